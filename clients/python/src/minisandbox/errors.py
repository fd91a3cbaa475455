"""Typed errors for the server's error body ``{"error": {"code", "message", "hint", "field"?}}``.

The exception class follows the error ``code`` (stable across releases) rather than the HTTP status,
so a caller can ``except NotFoundError`` whether the sandbox, the session or the file was missing.
"""

from __future__ import annotations

import re
from typing import Any, Dict, Optional, Type


class MinisandboxError(Exception):
    """Any error the server answered (or the transport hit). ``code`` is the server's ErrorCode."""

    def __init__(
        self,
        message: str,
        *,
        code: str = "INTERNAL",
        hint: Optional[str] = None,
        field: Optional[str] = None,
        status: Optional[int] = None,
        retry_after: Optional[float] = None,
        body: Optional[Dict[str, Any]] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.hint = hint
        self.field = field
        self.status = status
        self.retry_after = retry_after
        self.body = body

    def __str__(self) -> str:
        s = f"{self.code}: {self.message}"
        if self.field:
            s += f" (field {self.field})"
        if self.hint:
            s += f" [hint: {self.hint}]"
        return s


class TransportError(MinisandboxError):
    """The server could not be reached, or the connection broke mid-request. ``sent`` is False when
    no connection was made (the server cannot have seen the request)."""

    sent: bool = True


class NodeLost(TransportError):
    """The node that holds the sandbox is gone (code ``NODE_LOST``): it refused or dropped the
    connection and did not answer a health probe on a fresh one, stopped answering the pool's
    probes while a call was in flight, or restarted (410 ``NODE_RESTARTED``: its sandboxes ended
    with the process). ``node`` names the node, ``sandbox_id`` the sandbox the call was on (None
    for a node-wide call), ``reason`` says which (``unreachable``, ``unresponsive``, ``restarted``)
    and ``__cause__`` is the error underneath. The sandbox's work is lost, not failed: a trainer
    drops the episode rather than score it."""

    def __init__(
        self,
        message: str,
        *,
        node: Optional[str] = None,
        sandbox_id: Optional[str] = None,
        reason: str = "unreachable",
        code: str = "NODE_LOST",
        **kwargs: Any,
    ) -> None:
        super().__init__(message, code="NODE_LOST", **kwargs)
        self.node = node
        self.sandbox_id = sandbox_id
        self.reason = reason
        # the server's code when it said so itself (NODE_RESTARTED), else NODE_LOST
        self.server_code = code


class UnauthorizedError(MinisandboxError):
    """401: missing or wrong token."""


class NotFoundError(MinisandboxError):
    """404: no such sandbox, session, job, snapshot, ref, file or route."""

    @property
    def missing_route(self) -> bool:
        """True when the server has no such route (an older server), not a missing object."""
        return self.message.startswith("no route ")


class InvalidInputError(MinisandboxError):
    """422 (or 415): a field failed its schema; ``field`` names it (dotted path, e.g. ``limits.memory``)."""


class MalformedBodyError(MinisandboxError):
    """400: the body was not valid JSON."""


class BodyTooLargeError(MinisandboxError):
    """413: a body or file beyond the server's limit."""


class CapacityError(MinisandboxError):
    """429: the server holds its maximum of sandboxes; ``retry_after`` is in seconds."""


class GoneError(MinisandboxError):
    """410: the sandbox or session ended while the request ran."""


class ServerError(MinisandboxError):
    """5xx: the server's side failed (a sandbox that would not start, a registry error)."""


class NotConfiguredError(ServerError):
    """501: the server was not given what the route needs, e.g. ``--eval-dataset`` for ``evaluate``."""


class EvaluationError(MinisandboxError):
    """The server answered, but could not grade the patch (``evaluation.status`` is ``timeout`` or
    ``error``): there is no reward to take from it, and ``resolved: False`` is no verdict.
    ``evaluation`` holds the status, the reason (``evaluation.error``) and the report."""

    def __init__(self, evaluation: Any) -> None:
        why = f": {evaluation.error}" if evaluation.error else ""
        super().__init__(f"{evaluation.instance_id} was not graded ({evaluation.status}){why}", code="NOT_GRADED")
        self.evaluation = evaluation


class CommandError(MinisandboxError):
    """A command did not succeed (``ExecResult.check()``): non-zero exit, timeout, oom, killed."""

    def __init__(self, message: str, result: Any) -> None:
        super().__init__(message, code="COMMAND_FAILED")
        self.result = result


_BY_CODE: Dict[str, Type[MinisandboxError]] = {
    "UNAUTHORIZED": UnauthorizedError,
    "NOT_FOUND": NotFoundError,
    "SANDBOX_FILE": NotFoundError,
    "INVALID_INPUT": InvalidInputError,
    "UNSAFE_PATH": InvalidInputError,
    "DIFF_FAILED": InvalidInputError,
    "MALFORMED_BODY": MalformedBodyError,
    "BODY_TOO_LARGE": BodyTooLargeError,
    "CAPACITY": CapacityError,
    "SANDBOX_DESTROYED": GoneError,
    "SESSION_CLOSED": GoneError,
    "NOT_CONFIGURED": NotConfiguredError,
}

_BY_STATUS: Dict[int, Type[MinisandboxError]] = {
    400: MalformedBodyError,
    401: UnauthorizedError,
    404: NotFoundError,
    410: GoneError,
    413: BodyTooLargeError,
    415: InvalidInputError,
    422: InvalidInputError,
    429: CapacityError,
}


def node_of(sandbox_id: str) -> Optional[str]:
    """The node a sandbox id names (``sb-<time36>-<hex4>.<node>``), or None for an id without one."""
    _, dot, node = sandbox_id.rpartition(".")
    return node if dot and node else None


def error_from_response(status: int, body: Optional[Dict[str, Any]], retry_after: Optional[float], fallback_text: str) -> MinisandboxError:
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict):
        code = str(err.get("code", "INTERNAL"))
        message = str(err.get("message", fallback_text))
        hint = err.get("hint")
        field = err.get("field")
    else:
        code, message, hint, field = ("INTERNAL" if status >= 500 else f"HTTP_{status}"), (fallback_text or f"HTTP {status}"), None, None
    if code == "NODE_RESTARTED":
        # "sandbox X was lost when node N restarted at T": the sandbox is gone with its process
        m = re.search(r"sandbox (\S+) ", message)
        sid = m.group(1) if m else None
        return NodeLost(message, node=node_of(sid) if sid else None, sandbox_id=sid, reason="restarted", code=code,
                        hint=hint if isinstance(hint, str) else None, status=status, body=body if isinstance(body, dict) else None)
    cls = _BY_CODE.get(code) or _BY_STATUS.get(status) or (ServerError if status >= 500 else MinisandboxError)
    return cls(
        message,
        code=code,
        hint=hint if isinstance(hint, str) else None,
        field=field if isinstance(field, str) else None,
        status=status,
        retry_after=retry_after,
        body=body if isinstance(body, dict) else None,
    )
