"""A generic ``Sandbox`` with the small surface rllm-style trainers drive (their docker/modal backends
have it): ``exec`` returning stdout (raising on failure), ``upload_file``, ``upload_dir``,
``read_file``, ``close`` and ``is_alive``; and ``evaluate``, the reward of its changes."""

from __future__ import annotations

import posixpath
from typing import Any, Mapping, Optional, Union

from ..client import Client, RemoteSandbox
from ..pool import Pool
from ..errors import CommandError
from ..types import Evaluation, ExecResult


class SandboxCommandError(CommandError, RuntimeError):
    """A command failed; a RuntimeError too, as rllm's backends raise."""


class Sandbox:
    """One minisandbox sandbox. ``Sandbox(ref="env/ref")`` creates one; ``Sandbox.attach(remote)``
    wraps an existing one (a fork child). A context manager: the block's end closes it."""

    def __init__(
        self,
        ref: Optional[str] = None,
        *,
        name: Optional[str] = None,
        client: Union[None, Client, Pool] = None,
        dataset: Optional[str] = None,
        instance_id: Optional[str] = None,
        snapshot: Optional[str] = None,
        workdir: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        shell: str = "/bin/sh",
        remote: Optional[RemoteSandbox] = None,
        **create_kwargs: Any,
    ) -> None:
        # a Pool places the sandbox; an attached one is driven through its own node's client
        self.client: Union[Client, Pool] = client or (remote.client if remote is not None else Client())
        self.shell = shell
        self.remote = remote or self.client.create(
            ref, dataset=dataset, instance_id=instance_id, snapshot=snapshot, workdir=workdir, env=env, **create_kwargs
        )
        self.name = name or self.remote.id
        # what evaluate grades for, when the sandbox was made from a dataset instance
        self.dataset = dataset
        self.instance_id = instance_id
        self._closed = False

    @classmethod
    def attach(cls, remote: RemoteSandbox, *, shell: str = "/bin/sh") -> "Sandbox":
        return cls(remote=remote, shell=shell)

    @property
    def id(self) -> str:
        return self.remote.id

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def run(self, command: str, timeout: Optional[float] = None, *, cwd: Optional[str] = None) -> ExecResult:
        """The full outcome, never raising for the command's own failure."""
        return self.remote.exec([self.shell, "-c", command], timeout=timeout, cwd=cwd)

    def exec(self, command: str, timeout: Optional[float] = None, user: Optional[str] = None, *, cwd: Optional[str] = None) -> str:
        """Runs ``command`` in ``shell -c``; returns its stdout, or raises SandboxCommandError (with
        the result) on a non-zero exit or a timeout."""
        if user is not None:
            raise NotImplementedError("minisandbox runs commands as the environment's user; `user` is not supported")
        r = self.run(command, timeout, cwd=cwd)
        if not r.ok:
            why = f"exit {r.exit_code}" if r.outcome == "ok" else r.outcome
            raise SandboxCommandError(f"command failed ({why}) in sandbox {self.name}: {command}\n{r.stderr[-500:]}", r)
        return r.stdout

    def upload_file(self, local_path: str, remote_path: str) -> None:
        self.remote.upload_file(local_path, remote_path)

    def upload_dir(self, local_path: str, remote_path: str) -> None:
        """``local_path``'s tree becomes ``remote_path`` (its contents, not a subdirectory of it)."""
        self.remote.upload_dir(local_path, posixpath.normpath(remote_path))

    def read_file(self, remote_path: str, *, binary: bool = False) -> Union[str, bytes]:
        data = self.remote.read_file(remote_path)
        return data if binary else data.decode("utf-8", errors="replace")

    def write_file(self, remote_path: str, content: Union[str, bytes], *, mode: Optional[int] = None) -> None:
        self.remote.write_file(remote_path, content, mode=mode)

    def evaluate(
        self,
        patch: Optional[str] = None,
        *,
        dataset: Optional[str] = None,
        instance_id: Optional[str] = None,
        workdir: Optional[str] = None,
        timeout: Union[None, float, str] = None,
    ) -> Evaluation:
        """Grades ``patch`` (default: the repository's diff in ``workdir``) for the instance it was made
        from (or ``dataset``/``instance_id``), as ``Client.evaluate``: an ``Evaluation`` for a verdict
        (``.reward``), ``EvaluationError`` when the grading could not judge the patch, the server's
        typed errors when it cannot grade at all."""
        ds, iid = dataset or self.dataset, instance_id or self.instance_id
        if ds is None or iid is None:
            raise ValueError("evaluate needs a dataset and instance_id (this sandbox was not made from one)")
        if patch is None:
            patch = self.remote.diff(workdir=workdir)
        return self.client.evaluate(ds, iid, patch, timeout=timeout)

    def is_alive(self) -> bool:
        return not self._closed and self.remote.is_alive()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.remote.delete(missing_ok=True)
