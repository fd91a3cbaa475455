"""The asyncio client: the synchronous client's calls run in a thread pool of its own (each worker
thread with its own keep-alive connection), so many sandboxes' commands run at once from one event
loop with the standard library only."""

from __future__ import annotations

import asyncio
import functools
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, TypeVar, Union

from .client import Client, Command, ForkChild, Job, RemoteSandbox, Session
from .errors import NotFoundError, TransportError
from .types import Capacity, Evaluation, ExecResult, FileEntry, JobInfo, Limits, PrewarmResult, SandboxInfo, SnapshotInfo, ApiErrorInfo

T = TypeVar("T")


class AsyncClient:
    """As ``Client``, with ``async`` methods. ``max_concurrency`` bounds the requests in flight
    (threads); it should be at least the number of commands you run at once."""

    def __init__(
        self,
        base_url: Optional[str] = None,
        *,
        token: Optional[str] = None,
        token_file: Optional[str] = None,
        timeout: float = 600.0,
        retry_on_capacity: float = 0.0,
        max_concurrency: int = 64,
    ) -> None:
        self.sync = Client(base_url, token=token, token_file=token_file, timeout=timeout, retry_on_capacity=retry_on_capacity)
        self._pool = ThreadPoolExecutor(max_workers=max_concurrency, thread_name_prefix="minisandbox")

    async def _run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))

    async def aclose(self) -> None:
        self._pool.shutdown(wait=False)
        self.sync.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def health(self) -> Dict[str, Any]:
        return await self._run(self.sync.health)

    async def capacity(self) -> Capacity:
        return await self._run(self.sync.capacity)

    async def openapi(self) -> Dict[str, Any]:
        return await self._run(self.sync.openapi)

    async def prewarm(
        self, refs: Optional[Sequence[str]] = None, *, dataset: Optional[str] = None, instance_ids: Optional[Sequence[str]] = None
    ) -> List[PrewarmResult]:
        return await self._run(self.sync.prewarm, refs, dataset=dataset, instance_ids=instance_ids)

    async def evaluate(self, dataset: str, instance_id: str, patch: str, *, model: Optional[str] = None, run_id: Optional[str] = None) -> Evaluation:
        return await self._run(self.sync.evaluate, dataset, instance_id, patch, model=model, run_id=run_id)

    async def create(
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
    ) -> "AsyncSandbox":
        sb = await self._run(
            self.sync.create,
            ref,
            dataset=dataset,
            instance_id=instance_id,
            snapshot=snapshot,
            limits=limits,
            network=network,
            env=env,
            workdir=workdir,
            ttl=ttl,
        )
        return AsyncSandbox(self, sb)

    def sandbox(self, sandbox_id: str) -> "AsyncSandbox":
        return AsyncSandbox(self, self.sync.sandbox(sandbox_id))

    async def get(self, sandbox_id: str) -> "AsyncSandbox":
        return AsyncSandbox(self, await self._run(self.sync.get, sandbox_id))

    async def info(self, sandbox_id: str) -> SandboxInfo:
        return await self._run(self.sync.info, sandbox_id)

    async def list(self) -> List[SandboxInfo]:
        return await self._run(self.sync.list)

    async def delete(self, sandbox_id: str, *, missing_ok: bool = False) -> None:
        await self._run(self.sync.delete, sandbox_id, missing_ok=missing_ok)

    async def snapshots(self) -> List[SnapshotInfo]:
        return await self._run(self.sync.snapshots)

    async def delete_snapshot(self, snapshot_id: str) -> None:
        await self._run(self.sync.delete_snapshot, snapshot_id)


class AsyncForkChild:
    def __init__(self, sandbox: Optional["AsyncSandbox"], session: Optional["AsyncSession"], error: Optional[ApiErrorInfo]) -> None:
        self.sandbox = sandbox
        self.session = session
        self.error = error

    @property
    def ok(self) -> bool:
        return self.sandbox is not None


class AsyncSandbox:
    """As ``RemoteSandbox``, with ``async`` methods; ``async with`` deletes it at the block's end."""

    def __init__(self, client: AsyncClient, sync: RemoteSandbox) -> None:
        self.client = client
        self.sync = sync
        self.id = sync.id

    def __repr__(self) -> str:
        return f"AsyncSandbox({self.id!r})"

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.delete(missing_ok=True)

    async def info(self) -> SandboxInfo:
        return await self.client._run(self.sync.info)

    async def is_alive(self) -> bool:
        return await self.client._run(self.sync.is_alive)

    async def delete(self, *, missing_ok: bool = False) -> None:
        await self.client._run(self.sync.delete, missing_ok=missing_ok)

    close = delete

    async def exec(
        self,
        command: Command,
        *,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        timeout: Optional[float] = None,
        max_output: Union[None, int, str] = None,
    ) -> ExecResult:
        return await self.client._run(self.sync.exec, command, cwd=cwd, env=env, timeout=timeout, max_output=max_output)

    async def exec_async(
        self,
        command: Command,
        *,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        timeout: Optional[float] = None,
        max_output: Union[None, int, str] = None,
    ) -> "AsyncJob":
        job = await self.client._run(self.sync.exec_async, command, cwd=cwd, env=env, timeout=timeout, max_output=max_output)
        return AsyncJob(self.client, job)

    async def jobs(self) -> List[JobInfo]:
        return await self.client._run(self.sync.jobs)

    def job(self, job_id: str) -> "AsyncJob":
        return AsyncJob(self.client, self.sync.job(job_id))

    async def session(self, startup: Sequence[str] = ()) -> "AsyncSession":
        return AsyncSession(self.client, await self.client._run(self.sync.session, startup))

    async def read_file(self, path: str) -> bytes:
        return await self.client._run(self.sync.read_file, path)

    async def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return await self.client._run(self.sync.read_text, path, encoding)

    async def read_file_with_mode(self, path: str) -> Tuple[bytes, Optional[int]]:
        return await self.client._run(self.sync.read_file_with_mode, path)

    async def write_file(self, path: str, data: Union[bytes, str], *, mode: Optional[int] = None) -> None:
        await self.client._run(self.sync.write_file, path, data, mode=mode)

    async def list_files(self, path: str) -> List[FileEntry]:
        return await self.client._run(self.sync.list_files, path)

    async def upload_dir(self, local_dir: str, remote_dir: str) -> None:
        await self.client._run(self.sync.upload_dir, local_dir, remote_dir)

    async def download_dir(self, remote_dir: str, local_dir: str) -> int:
        return await self.client._run(self.sync.download_dir, remote_dir, local_dir)

    async def upload_file(self, local_path: str, remote_path: str) -> None:
        await self.client._run(self.sync.upload_file, local_path, remote_path)

    async def download_file(self, remote_path: str, local_path: str) -> None:
        await self.client._run(self.sync.download_file, remote_path, local_path)

    async def diff(self, *, workdir: Optional[str] = None, base: Optional[str] = None) -> str:
        return await self.client._run(self.sync.diff, workdir=workdir, base=base)

    async def fork(self, count: int, *, session: Union[None, str, Session, "AsyncSession"] = None) -> List[AsyncForkChild]:
        sid = session.id if isinstance(session, (Session, AsyncSession)) else session
        children: List[ForkChild] = await self.client._run(self.sync.fork, count, session=sid)
        out: List[AsyncForkChild] = []
        for c in children:
            sb = AsyncSandbox(self.client, c.sandbox) if c.sandbox is not None else None
            out.append(AsyncForkChild(sb, AsyncSession(self.client, c.session) if c.session is not None else None, c.error))
        return out

    async def snapshot(self, *, push: bool = False, tag: Optional[str] = None) -> SnapshotInfo:
        return await self.client._run(self.sync.snapshot, push=push, tag=tag)

    async def reset(self, *, snapshot: Optional[str] = None) -> SandboxInfo:
        return await self.client._run(self.sync.reset, snapshot=snapshot)


class AsyncSession:
    def __init__(self, client: AsyncClient, sync: Session) -> None:
        self.client = client
        self.sync = sync
        self.id = sync.id

    async def __aenter__(self) -> "AsyncSession":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        try:
            await self.close()
        except (NotFoundError, TransportError):
            pass

    async def run(self, command: str, *, timeout: Optional[float] = None, max_output: Union[None, int, str] = None) -> ExecResult:
        return await self.client._run(self.sync.run, command, timeout=timeout, max_output=max_output)

    async def interrupt(self) -> None:
        await self.client._run(self.sync.interrupt)

    async def close(self) -> None:
        await self.client._run(self.sync.close)


class AsyncJob:
    def __init__(self, client: AsyncClient, sync: Job) -> None:
        self.client = client
        self.sync = sync
        self.id = sync.id

    async def status(self, wait: float = 0) -> JobInfo:
        return await self.client._run(self.sync.status, wait)

    async def wait(self, timeout: Optional[float] = None) -> ExecResult:
        return await self.client._run(self.sync.wait, timeout)

    async def kill(self) -> None:
        await self.client._run(self.sync.kill)
