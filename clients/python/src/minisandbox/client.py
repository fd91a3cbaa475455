"""The synchronous client: ``Client`` for the server, ``RemoteSandbox`` for one sandbox, ``Session``
and ``Job`` for a persistent shell and a background command in it."""

from __future__ import annotations

import math
import os
import posixpath
import time
import stat as statmod
from types import TracebackType
from typing import Any, Dict, Generic, List, Mapping, Optional, Protocol, Sequence, Tuple, Type, TypeVar, Union
from urllib.parse import quote

from . import _tar
from ._transport import Transport
from .errors import EvaluationError, MinisandboxError, NodeLost, NotFoundError, TransportError
from .types import (
    Capacity,
    Evaluation,
    ExecResult,
    FileEntry,
    JobInfo,
    Limits,
    PrewarmResult,
    SandboxInfo,
    SnapshotInfo,
    ApiErrorInfo,
)

Command = Union[str, Sequence[str]]

# a request waits this long beyond the command's own timeout before the client gives up on it
_MARGIN_S = 60.0


def _timeout_for(cmd_timeout: Optional[float], default: float) -> float:
    return default if cmd_timeout is None else max(default, float(cmd_timeout) + _MARGIN_S)


class Client:
    """A connection to one ``minisandbox serve``.

    ``base_url`` defaults to $MINISANDBOX_URL or http://127.0.0.1:7000; the token is ``token``, else
    $MINISANDBOX_TOKEN, else the content of ``token_file`` / $MINISANDBOX_TOKEN_FILE. ``timeout`` is
    the socket timeout of requests without a command timeout of their own. With
    ``retry_on_capacity=S``, a create answered 429 is retried after its Retry-After for up to S seconds.
    """

    def __init__(
        self,
        base_url: Optional[str] = None,
        *,
        token: Optional[str] = None,
        token_file: Optional[str] = None,
        timeout: float = 600.0,
        retry_on_capacity: float = 0.0,
    ) -> None:
        self._t = Transport(base_url, token, token_file, timeout, retry_on_capacity)

    @property
    def base_url(self) -> str:
        return self._t.base_url

    @property
    def transport(self) -> Transport:
        return self._t

    def close(self) -> None:
        """Closes the pooled connections (sandboxes stay; delete them first)."""
        self._t.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- server ---------------------------------------------------------------------------------

    def health(self) -> Dict[str, Any]:
        return self._t.request("GET", "/v1/health").json()  # type: ignore[no-any-return]

    def capacity(self) -> Capacity:
        return Capacity.from_json(self._t.request("GET", "/v1/capacity").json())

    def openapi(self) -> Dict[str, Any]:
        return self._t.request("GET", "/v1/openapi.json").json()  # type: ignore[no-any-return]

    def prewarm(
        self, refs: Optional[Sequence[str]] = None, *, dataset: Optional[str] = None, instance_ids: Optional[Sequence[str]] = None
    ) -> List[PrewarmResult]:
        """Pulls and lays out environments ahead of time: ``refs``, or a dataset (some or all instances)."""
        body: Dict[str, Any] = {}
        if refs is not None:
            body["refs"] = list(refs)
        if dataset is not None:
            body["dataset"] = dataset
        if instance_ids is not None:
            body["instance_ids"] = list(instance_ids)
        r = self._t.request("POST", "/v1/prewarm", json_body=body, timeout=_timeout_for(3600, self._t.timeout))
        return [PrewarmResult.from_json(x) for x in r.json().get("results", [])]

    def evaluate(
        self,
        dataset: str,
        instance_id: str,
        patch: Optional[str],
        *,
        model: Optional[str] = None,
        run_id: Optional[str] = None,
        timeout: Union[None, float, str] = None,
    ) -> Evaluation:
        """Grades ``patch`` for a dataset instance in a fresh sandbox (as ``minisandbox score``).
        Returns an ``Evaluation`` only for a verdict on the patch (``status`` completed, empty_patch
        or patch_apply_failed; ``.reward`` is 1.0 or 0.0); raises ``EvaluationError`` (with the
        ``evaluation``) when the grading timed out or errored, and the server's typed errors when
        it could not grade at all (``NotConfiguredError``: no ``--eval-dataset``; ``NotFoundError``:
        no such dataset or instance). ``timeout`` limits the eval script (seconds, or "30m")."""
        body: Dict[str, Any] = {"dataset": dataset, "instance_id": instance_id, "patch": patch}
        if model is not None:
            body["model"] = model
        if run_id is not None:
            body["run_id"] = run_id
        if timeout is not None:
            body["timeout"] = timeout
        r = self._t.request("POST", "/v1/evaluate", json_body=body, timeout=_timeout_for(3600, self._t.timeout))
        ev = Evaluation.from_json(instance_id, r.json(), r.headers.get("x-minisandbox-score-status"))
        if not ev.graded:
            raise EvaluationError(ev)
        return ev

    # -- sandboxes ------------------------------------------------------------------------------

    def create(
        self,
        ref: Optional[str] = None,
        *,
        dataset: Optional[str] = None,
        instance_id: Optional[str] = None,
        snapshot: Optional[str] = None,
        limits: Optional[Limits] = None,
        network: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        workdir: Optional[str] = None,
        ttl: Union[None, float, str] = None,
    ) -> "RemoteSandbox":
        """A new sandbox from exactly one source: ``ref``, ``dataset`` + ``instance_id``, or
        ``snapshot``. Use it as a context manager to have it deleted at the end of the block."""
        body: Dict[str, Any] = {}
        for k, v in (
            ("ref", ref),
            ("dataset", dataset),
            ("instance_id", instance_id),
            ("snapshot", snapshot),
            ("limits", dict(limits) if limits is not None else None),
            ("network", network),
            ("env", dict(env) if env is not None else None),
            ("workdir", workdir),
            ("ttl", ttl),
        ):
            if v is not None:
                body[k] = v
        r = self._t.request("POST", "/v1/sandboxes", json_body=body, timeout=_timeout_for(1800, self._t.timeout))
        info = SandboxInfo.from_json(r.json())
        self._made(info.id)
        return RemoteSandbox(self, info.id, info)

    def sandbox(self, sandbox_id: str) -> "RemoteSandbox":
        """A handle on an existing sandbox, without a request."""
        return RemoteSandbox(self, sandbox_id)

    def get(self, sandbox_id: str) -> "RemoteSandbox":
        """A handle on an existing sandbox, looked up (NotFoundError if it is gone)."""
        return RemoteSandbox(self, sandbox_id, self.info(sandbox_id))

    def info(self, sandbox_id: str) -> SandboxInfo:
        return SandboxInfo.from_json(self._t.request("GET", f"/v1/sandboxes/{_seg(sandbox_id)}").json())

    def list(self) -> List[SandboxInfo]:
        return [SandboxInfo.from_json(x) for x in self._t.request("GET", "/v1/sandboxes").json().get("sandboxes", [])]

    def delete(self, sandbox_id: str, *, missing_ok: bool = False) -> None:
        """Deletes the sandbox; with ``missing_ok``, one already gone (or lost with its node) is no error."""
        try:
            self._t.request("DELETE", f"/v1/sandboxes/{_seg(sandbox_id)}")
        except (NotFoundError, NodeLost):
            self._gone(sandbox_id)
            if not missing_ok:
                raise
        self._gone(sandbox_id)

    # what a pool's node client tracks (the sandboxes it made and still holds); nothing here
    def _made(self, sandbox_id: str) -> None:
        pass

    def _gone(self, sandbox_id: str) -> None:
        pass

    # -- snapshots ------------------------------------------------------------------------------

    def snapshots(self) -> List[SnapshotInfo]:
        return [SnapshotInfo.from_json(x) for x in self._t.request("GET", "/v1/snapshots").json().get("snapshots", [])]

    def delete_snapshot(self, snapshot_id: str) -> None:
        self._t.request("DELETE", f"/v1/snapshots/{_seg(snapshot_id)}")


class _HasId(Protocol):
    id: str


SandboxT = TypeVar("SandboxT", bound=_HasId)
SessionT = TypeVar("SessionT", bound=_HasId)


class ForkChild(Generic[SandboxT, SessionT]):
    """One child of a fork: ``sandbox`` (and ``session``, when the fork carried one), or ``error``.
    The sync client's children hold a ``RemoteSandbox`` and a ``Session``, the asyncio client's an
    ``AsyncSandbox`` and an ``AsyncSession``."""

    def __init__(self, sandbox: Optional[SandboxT], session: Optional[SessionT], error: Optional[ApiErrorInfo]) -> None:
        self.sandbox = sandbox
        self.session = session
        self.error = error

    @property
    def ok(self) -> bool:
        return self.sandbox is not None

    def __repr__(self) -> str:
        return f"ForkChild(sandbox={self.sandbox and self.sandbox.id!r}, session={self.session and self.session.id!r}, error={self.error!r})"


class RemoteSandbox:
    """One sandbox on the server. A context manager: the block's end deletes it."""

    def __init__(self, client: Client, sandbox_id: str, info: Optional[SandboxInfo] = None) -> None:
        self.client = client
        self.id = sandbox_id
        self.created = info
        self._p = f"/v1/sandboxes/{_seg(sandbox_id)}"

    def __repr__(self) -> str:
        return f"RemoteSandbox({self.id!r})"

    def __enter__(self) -> "RemoteSandbox":
        return self

    def __exit__(self, et: Optional[Type[BaseException]], ev: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        self.delete(missing_ok=True)

    @property
    def _t(self) -> Transport:
        return self.client.transport

    def info(self) -> SandboxInfo:
        return self.client.info(self.id)

    def is_alive(self) -> bool:
        """Whether the sandbox still exists (False too once its node is lost)."""
        try:
            self.info()
            return True
        except (NotFoundError, NodeLost):
            return False

    def delete(self, *, missing_ok: bool = False) -> None:
        self.client.delete(self.id, missing_ok=missing_ok)

    close = delete

    # -- commands -------------------------------------------------------------------------------

    @staticmethod
    def _exec_body(
        command: Command, cwd: Optional[str], env: Optional[Mapping[str, str]], timeout: Optional[float], max_output: Union[None, int, str]
    ) -> Dict[str, Any]:
        body: Dict[str, Any] = {"command": command} if isinstance(command, str) else {"argv": list(command)}
        if cwd is not None:
            body["cwd"] = cwd
        if env is not None:
            body["env"] = dict(env)
        if timeout is not None:
            body["timeout"] = timeout
        if max_output is not None:
            body["max_output"] = max_output
        return body

    def exec(
        self,
        command: Command,
        *,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        timeout: Optional[float] = None,
        max_output: Union[None, int, str] = None,
    ) -> ExecResult:
        """Runs a shell string (``/bin/sh -c``) or an argv in a fresh process; waits for its end.
        A timeout is an outcome (``result.outcome == "timeout"``), not an exception."""
        body = self._exec_body(command, cwd, env, timeout, max_output)
        return ExecResult.from_json(self._t.request("POST", f"{self._p}/exec", json_body=body, timeout=_timeout_for(timeout, self._t.timeout)).json())

    def exec_async(
        self,
        command: Command,
        *,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        timeout: Optional[float] = None,
        max_output: Union[None, int, str] = None,
    ) -> "Job":
        """Starts a command as a job and returns at once; ``job.wait()`` gets its result."""
        body = self._exec_body(command, cwd, env, timeout, max_output)
        r = self._t.request("POST", f"{self._p}/exec", query={"async": True}, json_body=body)
        return Job(self, str(r.json()["job"]))

    def jobs(self) -> List[JobInfo]:
        return [JobInfo.from_json(j) for j in self._t.request("GET", f"{self._p}/jobs").json().get("jobs", [])]

    def job(self, job_id: str) -> "Job":
        return Job(self, job_id)

    def session(self, startup: Sequence[str] = ()) -> "Session":
        """A persistent shell: cwd, exported variables and activated venvs carry over between runs."""
        r = self._t.request("POST", f"{self._p}/sessions", json_body={"startup": list(startup)})
        return Session(self, str(r.json()["session"]))

    # -- files ----------------------------------------------------------------------------------

    def read_file(self, path: str) -> bytes:
        return self._t.request("GET", f"{self._p}/files", query={"path": path}).body

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return self.read_file(path).decode(encoding, errors="replace")

    def read_file_with_mode(self, path: str) -> Tuple[bytes, Optional[int]]:
        """The bytes and the permission bits (``0o644``), if the server could tell them."""
        r = self._t.request("GET", f"{self._p}/files", query={"path": path})
        m = r.headers.get("x-file-mode")
        return r.body, (int(m, 8) if m else None)

    def write_file(self, path: str, data: Union[bytes, str], *, mode: Optional[int] = None) -> None:
        """Writes the file (parent directories made); ``mode`` as an int, e.g. ``0o755``."""
        payload = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        query: Dict[str, Any] = {"path": path}
        if mode is not None:
            query["mode"] = format(mode & 0o7777, "o").rjust(3, "0")
        self._t.request("PUT", f"{self._p}/files", query=query, body=payload, content_type="application/octet-stream")

    def list_files(self, path: str) -> List[FileEntry]:
        r = self._t.request("GET", f"{self._p}/files/list", query={"path": path})
        return [FileEntry.from_json(e) for e in r.json().get("entries", [])]

    def upload_dir(self, local_dir: str, remote_dir: str) -> None:
        """Copies the tree under ``local_dir`` into ``remote_dir`` (created) as one tar stream; against
        a server without the tar route, file by file."""
        with _tar.pack_dir(local_dir) as tarball:
            try:
                self._t.request("PUT", f"{self._p}/tar", query={"path": remote_dir}, body=tarball, content_type="application/x-tar")
                return
            except NotFoundError as e:
                if not e.missing_route:
                    raise
        self._upload_dir_files(local_dir, remote_dir)

    def _upload_dir_files(self, local_dir: str, remote_dir: str) -> None:
        dirs: List[str] = [remote_dir]
        links: List[Tuple[str, str]] = []
        for rel, full, st in _tar.walk_dir(local_dir):
            target = posixpath.join(remote_dir, rel.replace(os.sep, "/"))
            if statmod.S_ISLNK(st.st_mode):
                links.append((os.readlink(full), target))
            elif statmod.S_ISDIR(st.st_mode):
                dirs.append(target)
            elif statmod.S_ISREG(st.st_mode):
                with open(full, "rb") as f:
                    self.write_file(target, f.read(), mode=statmod.S_IMODE(st.st_mode))
        self.exec(["/bin/sh", "-c", 'mkdir -p -- "$@"', "mkdir", *dirs]).check()
        for dest, link in links:
            self.exec(["/bin/sh", "-c", 'ln -sfn -- "$1" "$2"', "ln", dest, link]).check()

    def download_dir(self, remote_dir: str, local_dir: str) -> int:
        """Copies the tree under ``remote_dir`` into ``local_dir`` (created); returns the entry count."""
        r = self._t.request("GET", f"{self._p}/tar", query={"path": remote_dir}, stream=lambda resp: _tar.extract_stream(resp, local_dir))
        return int(r.streamed)

    def upload_file(self, local_path: str, remote_path: str) -> None:
        """Copies one host file (with its permission bits) into the sandbox."""
        with open(local_path, "rb") as f:
            data = f.read()
        self.write_file(remote_path, data, mode=statmod.S_IMODE(os.stat(local_path).st_mode))

    def download_file(self, remote_path: str, local_path: str) -> None:
        data, mode = self.read_file_with_mode(remote_path)
        with open(local_path, "wb") as f:
            f.write(data)
        if mode is not None:
            os.chmod(local_path, mode)

    # -- state ----------------------------------------------------------------------------------

    def diff(self, *, workdir: Optional[str] = None, base: Optional[str] = None) -> str:
        """The repository's changes against its base commit, as a patch (the agent's submission)."""
        return self._t.request("GET", f"{self._p}/diff", query={"workdir": workdir, "base": base}).text

    def fork(self, count: int, *, session: Union[None, str, "Session"] = None) -> List["ForkChild[RemoteSandbox, Session]"]:
        """``count`` independent children of the current state, each reported on its own (a child the
        server could not make carries ``error``). With ``session``, each child has a session of the
        same id that starts in that session's cwd with its exported variables."""
        body: Dict[str, Any] = {"count": count}
        sid = session.id if isinstance(session, Session) else session
        if sid is not None:
            body["session"] = sid
        r = self._t.request("POST", f"{self._p}/fork", json_body=body, timeout=_timeout_for(600, self._t.timeout))
        out: List[ForkChild[RemoteSandbox, Session]] = []
        for c in r.json().get("children", []):
            if "id" in c:
                self.client._made(str(c["id"]))
                child = RemoteSandbox(self.client, str(c["id"]))
                s = c.get("session")
                out.append(ForkChild(child, Session(child, str(s)) if s else None, None))
            else:
                out.append(ForkChild(None, None, ApiErrorInfo.from_json(c.get("error") or {})))
        return out

    def snapshot(self, *, push: bool = False, tag: Optional[str] = None) -> SnapshotInfo:
        """Freezes the writable layer into a content-addressed layer (``create(snapshot=...)`` starts
        from it); ``push=True`` publishes it to the registry under ``tag``."""
        body: Dict[str, Any] = {}
        if push:
            body["push"] = True
        if tag is not None:
            body["tag"] = tag
        r = self._t.request("POST", f"{self._p}/snapshot", json_body=body, timeout=_timeout_for(1800, self._t.timeout))
        return SnapshotInfo.from_json(r.json())

    def reset(self, *, snapshot: Optional[str] = None, ref: Optional[str] = None) -> SandboxInfo:
        """Back to the creation state, or to a snapshot of this node (``snapshot``), or over an
        environment of the registry (``ref``: e.g. a snapshot another node pushed), same id; every
        process and session ends."""
        body: Dict[str, Any] = {}
        if snapshot is not None:
            body["snapshot"] = snapshot
        if ref is not None:
            body["ref"] = ref
        return SandboxInfo.from_json(self._t.request("POST", f"{self._p}/reset", json_body=body, timeout=_timeout_for(1800, self._t.timeout)).json())


class Session:
    """A persistent shell in a sandbox. A context manager: the block's end closes it."""

    def __init__(self, sandbox: RemoteSandbox, session_id: str) -> None:
        self.sandbox = sandbox
        self.id = session_id
        self._p = f"/v1/sandboxes/{_seg(sandbox.id)}/sessions/{_seg(session_id)}"

    def __repr__(self) -> str:
        return f"Session({self.sandbox.id!r}, {self.id!r})"

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self.close()
        except (NotFoundError, TransportError):
            pass

    def run(self, command: str, *, timeout: Optional[float] = None, max_output: Union[None, int, str] = None) -> ExecResult:
        """Runs in the shell; a timeout interrupts the command and keeps the shell and its state."""
        body: Dict[str, Any] = {"command": command}
        if timeout is not None:
            body["timeout"] = timeout
        if max_output is not None:
            body["max_output"] = max_output
        t = self.sandbox.client.transport
        return ExecResult.from_json(t.request("POST", f"{self._p}/run", json_body=body, timeout=_timeout_for(timeout, t.timeout)).json())

    def interrupt(self) -> None:
        """Ctrl-C for the running command (if any); the shell stays."""
        self.sandbox.client.transport.request("POST", f"{self._p}/interrupt")

    def close(self) -> None:
        self.sandbox.client.transport.request("DELETE", self._p)


class Job:
    """A command started with ``exec_async``."""

    def __init__(self, sandbox: RemoteSandbox, job_id: str) -> None:
        self.sandbox = sandbox
        self.id = job_id
        self._p = f"/v1/sandboxes/{_seg(sandbox.id)}/jobs/{_seg(job_id)}"

    def __repr__(self) -> str:
        return f"Job({self.sandbox.id!r}, {self.id!r})"

    def status(self, wait: float = 0) -> JobInfo:
        """The job's state; with ``wait`` (seconds, at most 300) the server holds the answer until the
        job ends or the wait elapses."""
        t = self.sandbox.client.transport
        q = {"wait": min(300, math.ceil(wait))} if wait > 0 else None
        return JobInfo.from_json(t.request("GET", self._p, query=q, timeout=_timeout_for(wait, t.timeout)).json())

    def wait(self, timeout: Optional[float] = None) -> ExecResult:
        """The job's result once it ends (long-polling in steps of at most 300 s); with ``timeout``
        (seconds), a TimeoutError if it has not ended by then."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = 300.0 if deadline is None else max(0.0, min(300.0, deadline - time.monotonic()))
            info = self.status(wait=left)
            if info.done and info.result is not None:
                return info.result
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"job {self.id} still running after {timeout}s")

    def kill(self) -> None:
        self.sandbox.client.transport.request("DELETE", self._p)


def _seg(s: str) -> str:
    return quote(s, safe="")


__all__ = ["Client", "RemoteSandbox", "Session", "Job", "ForkChild", "MinisandboxError"]
