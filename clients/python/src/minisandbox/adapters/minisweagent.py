"""A mini-swe-agent environment over minisandbox.

mini-swe-agent builds environments as ``cls(**config)`` (``environment_class`` popped from its YAML
config), calls ``execute`` for each action and ``get_template_vars`` for its prompt templates. Both
protocol generations are served: v1 passes the command string (a timeout raises
``subprocess.TimeoutExpired``, which its agent turns into a timeout message), v2 passes the action
dict ``{"command": ...}`` (a timeout is a returned output with ``exception_info``, and a first
output line ``COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`` raises its ``Submitted``).

Each command runs in a fresh process, as in mini-swe-agent's docker environment (state lives in the
files, not in the shell), with stderr merged into stdout in order.

    environment:
      environment_class: minisandbox.adapters.minisweagent.MinisandboxEnvironment
      dataset: swe-bench-lite
      instance_id: astropy__astropy-12907
      cwd: /testbed
"""

from __future__ import annotations

import dataclasses
import logging
import os
import platform
import subprocess
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Union

from ..client import Client, RemoteSandbox
from ..errors import MinisandboxError, NodeLost
from ..pool import Pool
from ..types import Evaluation, Limits

SUBMIT_MARKER = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"

# stderr joins stdout at the descriptor, so their lines keep the order they were written in
_MERGE = 'exec 2>&1; exec "$@"'


@dataclass
class MinisandboxEnvironmentConfig:
    ref: Optional[str] = None
    """The environment's ref, or use ``dataset`` + ``instance_id``, or ``snapshot``."""
    dataset: Optional[str] = None
    instance_id: Optional[str] = None
    snapshot: Optional[str] = None
    sandbox_id: Optional[str] = None
    """Attach to an existing sandbox (e.g. a fork child) instead of creating one; it is not deleted at cleanup."""
    base_url: Optional[str] = None
    """Default $MINISANDBOX_URL or http://127.0.0.1:7000; the token from $MINISANDBOX_TOKEN(_FILE)."""
    pool_urls: Optional[List[str]] = None
    """Many nodes: the sandbox is placed on one of these (a ``Pool``), instead of ``base_url``."""
    pool_dns: Optional[str] = None
    """Many nodes: ``name:port`` whose A/AAAA records are the nodes (a ``Pool``)."""
    token: Optional[str] = None
    token_file: Optional[str] = None
    cwd: str = ""
    """Working directory of each command (default: the environment's workdir)."""
    env: Dict[str, str] = field(default_factory=dict)
    forward_env: List[str] = field(default_factory=list)
    """Host variables passed on when set (``env`` wins on conflicts)."""
    timeout: int = 30
    interpreter: List[str] = field(default_factory=lambda: ["bash", "-lc"])
    """The command is appended to this, as mini-swe-agent's docker environment does."""
    limits: Optional[Dict[str, Any]] = None
    network: Optional[str] = None
    ttl: Optional[Union[float, str]] = None
    max_output: Optional[Union[int, str]] = None

    def model_dump(self, mode: str = "python") -> Dict[str, Any]:
        """As pydantic's, for code that serializes mini-swe-agent configs."""
        d = dataclasses.asdict(self)
        d.pop("token", None)  # never in trajectories
        return d


class MinisandboxEnvironment:
    def __init__(
        self,
        *,
        config_class: type = MinisandboxEnvironmentConfig,
        logger: Optional[logging.Logger] = None,
        client: Union[None, Client, Pool] = None,
        **kwargs: Any,
    ) -> None:
        self.logger = logger or logging.getLogger("minisweagent.environment")
        self.config: MinisandboxEnvironmentConfig = config_class(**kwargs)
        c = self.config
        # a pool this environment made is its own to close; one it was given is the caller's
        self._own_pool: Optional[Pool] = None
        if client is None and (c.pool_urls is not None or c.pool_dns is not None):
            client = self._own_pool = Pool(c.pool_urls, dns=c.pool_dns, token=c.token, token_file=c.token_file)
        self.client: Union[Client, Pool] = client or Client(c.base_url, token=c.token, token_file=c.token_file)
        self._owned = c.sandbox_id is None
        self.sandbox: Optional[RemoteSandbox] = None
        if c.sandbox_id is not None:
            self.sandbox = self.client.sandbox(c.sandbox_id)
        else:
            self.sandbox = self.client.create(
                c.ref,
                dataset=c.dataset,
                instance_id=c.instance_id,
                snapshot=c.snapshot,
                limits=Limits(**c.limits) if c.limits else None,  # type: ignore[typeddict-item]
                network=c.network,
                ttl=c.ttl,
            )
        self.logger.info("minisandbox sandbox %s ready", self.sandbox.id)

    def _env(self) -> Dict[str, str]:
        out = {k: v for k in self.config.forward_env if (v := os.environ.get(k)) is not None}
        out.update(self.config.env)
        return out

    def execute(self, command: Union[str, Dict[str, Any]], cwd: str = "", *, timeout: Optional[int] = None) -> Dict[str, Any]:
        """Runs the command; returns ``{"output": str, "returncode": int}`` (v2: plus ``exception_info``)."""
        v2 = isinstance(command, dict)
        cmd = str(command.get("command", "")) if isinstance(command, dict) else command
        assert self.sandbox is not None, "the sandbox is closed"
        limit = timeout or self.config.timeout
        env = self._env()
        try:
            r = self.sandbox.exec(
                ["/bin/sh", "-c", _MERGE, "sh", *self.config.interpreter, cmd],
                cwd=(cwd or self.config.cwd) or None,
                env=env or None,
                timeout=limit,
                max_output=self.config.max_output,
            )
        except NodeLost:
            raise  # the episode is gone with its node: for the trainer to drop, not for the model to read
        except MinisandboxError as e:
            if not v2:
                raise
            # v2 environments report a failed execution as an output the agent shows the model
            return {
                "output": "",
                "returncode": -1,
                "exception_info": f"An error occurred while executing the command: {e}",
                "extra": {"exception_type": type(e).__name__, "exception": str(e)},
            }
        output = r.stdout + r.stderr
        if r.outcome == "ok":
            result: Dict[str, Any] = {"output": output, "returncode": int(r.exit_code if r.exit_code is not None else -1)}
            if v2:
                result["exception_info"] = ""
                self._check_finished(result)
            return result
        if not v2 and r.outcome == "timeout":
            raise subprocess.TimeoutExpired(cmd, limit, output=output.encode("utf-8"))
        why = f"the command timed out after {limit}s" if r.outcome == "timeout" else f"the command ended by {r.outcome}"
        return {
            "output": output,
            "returncode": -1,
            "exception_info": f"An error occurred while executing the command: {why}",
            "extra": {"exception_type": r.outcome, "exception": r.error or why},
        }

    def _check_finished(self, output: Dict[str, Any]) -> None:
        lines = output.get("output", "").lstrip().splitlines(keepends=True)
        if lines and lines[0].strip() == SUBMIT_MARKER and output["returncode"] == 0:
            submission = "".join(lines[1:])
            try:
                from minisweagent.exceptions import Submitted  # type: ignore[import-not-found]
            except ImportError:
                return  # mini-swe-agent v1 (or absent) checks the marker itself
            raise Submitted({"role": "exit", "content": submission, "extra": {"exit_status": "Submitted", "submission": submission}})

    def evaluate(self, patch: Optional[str] = None, *, timeout: Union[None, float, str] = None) -> Evaluation:
        """Grades ``patch`` (default: the sandbox's changes, the repository's diff in ``cwd``) for the
        configured ``dataset``/``instance_id``, as ``Client.evaluate``: an ``Evaluation`` for a verdict,
        ``EvaluationError`` when the grading could not judge the patch, the server's typed errors
        when it cannot grade at all."""
        c = self.config
        if c.dataset is None or c.instance_id is None:
            raise ValueError("evaluate needs the environment's dataset and instance_id (it was made from a ref, snapshot or sandbox_id)")
        assert self.sandbox is not None, "the sandbox is closed"
        if patch is None:
            patch = self.sandbox.diff(workdir=c.cwd or None)
        return self.client.evaluate(c.dataset, c.instance_id, patch, timeout=timeout)

    def get_template_vars(self, **kwargs: Any) -> Dict[str, Any]:
        out: Dict[str, Any] = {**self.config.model_dump(), **platform.uname()._asdict()}
        out["sandbox_id"] = self.sandbox.id if self.sandbox else None
        out.update(kwargs)
        return out

    def serialize(self) -> Dict[str, Any]:
        return {
            "info": {
                "config": {
                    "environment": self.config.model_dump(mode="json"),
                    "environment_type": f"{self.__class__.__module__}.{self.__class__.__name__}",
                }
            }
        }

    def cleanup(self) -> None:
        sb, self.sandbox = getattr(self, "sandbox", None), None
        if sb is not None and getattr(self, "_owned", False):
            try:
                sb.delete(missing_ok=True)
            except Exception as e:  # a cleanup at interpreter exit must not raise
                logging.getLogger("minisweagent.environment").warning("deleting sandbox %s failed: %s", sb.id, e)
        pool, self._own_pool = getattr(self, "_own_pool", None), None
        if pool is not None:
            pool.close()

    def __del__(self) -> None:
        self.cleanup()
