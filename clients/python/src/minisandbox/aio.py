"""The asyncio client: the synchronous client's calls run in a thread pool of its own (each worker
thread with its own keep-alive connection), so many sandboxes' commands run at once from one event
loop with the standard library only.

Each async method is made from its sync method by ``_mirror`` (a table of names, below in each
class), so the two cannot drift apart: type checkers and IDEs see the sync method's parameters
(through ``ParamSpec``) with an awaitable result. Only the calls that return another handle
(a sandbox, session or job) say how to wrap it."""

from __future__ import annotations

import asyncio
import functools
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable, Coroutine, Dict, Generic, List, Optional, Sequence, TypeVar, Union

from .client import Client, ForkChild, Job, RemoteSandbox, Session
from .pool import Pool
from .errors import NotFoundError, TransportError
from .types import ApiErrorInfo

if TYPE_CHECKING:
    # only for type checkers (typing gained them in 3.10; this package supports 3.9, no dependencies)
    from typing_extensions import Concatenate, ParamSpec

    P = ParamSpec("P")

R = TypeVar("R")
S = TypeVar("S")
T = TypeVar("T")


class _Mirrors(Generic[S]):
    """An async handle over a sync one: ``sync`` answers the calls, ``_pool`` (the client's) runs them."""

    sync: S
    _pool: ThreadPoolExecutor

    async def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))


def _mirror_as(fn: Callable[Concatenate[Any, P], R], wrap: Callable[[Any, R], T]) -> Callable[Concatenate[Any, P], Coroutine[Any, Any, T]]:
    """The async form of the sync method ``fn`` (same parameters), whose result ``wrap(self, result)`` makes."""
    name = fn.__name__

    async def method(self: _Mirrors[Any], /, *args: Any, **kwargs: Any) -> T:
        return wrap(self, await self._call(getattr(self.sync, name), *args, **kwargs))

    # the sync method's name, doc and (through __wrapped__) signature, for help() and inspect
    return functools.update_wrapper(method, fn, assigned=("__name__", "__doc__"))


def _mirror(fn: Callable[Concatenate[Any, P], R]) -> Callable[Concatenate[Any, P], Coroutine[Any, Any, R]]:
    """The async form of the sync method ``fn``: same parameters, same result."""
    return _mirror_as(fn, lambda _self, result: result)


class AsyncClient(_Mirrors[Client]):
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

    @classmethod
    def _over(cls, sync: Client, pool: ThreadPoolExecutor) -> "AsyncClient":
        """An async client over ``sync`` whose calls run in ``pool`` (a pool's node, its threads)."""
        self = cls.__new__(cls)
        self.sync = sync
        self._pool = pool
        return self

    async def aclose(self) -> None:
        self._pool.shutdown(wait=False)
        self.sync.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    health = _mirror(Client.health)
    capacity = _mirror(Client.capacity)
    openapi = _mirror(Client.openapi)
    prewarm = _mirror(Client.prewarm)
    evaluate = _mirror(Client.evaluate)
    create = _mirror_as(Client.create, lambda self, sb: AsyncSandbox(self, sb))
    get = _mirror_as(Client.get, lambda self, sb: AsyncSandbox(self, sb))
    info = _mirror(Client.info)
    list = _mirror(Client.list)
    delete = _mirror(Client.delete)
    snapshots = _mirror(Client.snapshots)
    delete_snapshot = _mirror(Client.delete_snapshot)

    def sandbox(self, sandbox_id: str) -> "AsyncSandbox":
        return AsyncSandbox(self, self.sync.sandbox(sandbox_id))


class AsyncPool(_Mirrors[Pool]):
    """As ``Pool``, with ``async`` methods; its handles are ``AsyncSandbox`` bound to their node.
    Made as ``Pool`` is (it probes the nodes at once, within ``node_timeout``); ``max_concurrency``
    bounds the requests in flight over all nodes (threads)."""

    def __init__(
        self,
        urls: Optional[Sequence[str]] = None,
        *,
        dns: Optional[str] = None,
        token: Optional[str] = None,
        token_file: Optional[str] = None,
        timeout: float = 600.0,
        node_timeout: float = 10.0,
        max_attempts: int = 3,
        retry_on_capacity: float = 0.0,
        max_concurrency: int = 64,
        **pool_options: Any,
    ) -> None:
        self.sync = Pool(urls, dns=dns, token=token, token_file=token_file, timeout=timeout, node_timeout=node_timeout,
                         max_attempts=max_attempts, retry_on_capacity=retry_on_capacity, **pool_options)
        self._pool = ThreadPoolExecutor(max_workers=max_concurrency, thread_name_prefix="minisandbox")
        self._clients: Dict[int, AsyncClient] = {}

    def _client_of(self, sync: Client) -> AsyncClient:
        c = self._clients.get(id(sync))
        if c is None:
            c = self._clients[id(sync)] = AsyncClient._over(sync, self._pool)
        return c

    def _wrap(self, sb: RemoteSandbox) -> "AsyncSandbox":
        return AsyncSandbox(self._client_of(sb.client), sb)

    async def aclose(self) -> None:
        """As ``Pool.close``: deletes what the pool made and still holds."""
        await self._call(self.sync.close)
        self._pool.shutdown(wait=False)

    async def __aenter__(self) -> "AsyncPool":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    create = _mirror_as(Pool.create, lambda self, sb: self._wrap(sb))
    get = _mirror_as(Pool.get, lambda self, sb: self._wrap(sb))
    info = _mirror(Pool.info)
    delete = _mirror(Pool.delete)
    list = _mirror(Pool.list)
    nodes = _mirror(Pool.nodes)
    evaluate = _mirror(Pool.evaluate)
    swerex_url = _mirror(Pool.swerex_url)
    prefetch = _mirror(Pool.prefetch)
    prefetch_status = _mirror(Pool.prefetch_status)

    def sandbox(self, sandbox_id: str) -> "AsyncSandbox":
        return self._wrap(self.sync.sandbox(sandbox_id))

    def client(self, node: str) -> AsyncClient:
        return self._client_of(self.sync.client(node))

    def held(self) -> List[str]:
        return self.sync.held()


class AsyncSandbox(_Mirrors[RemoteSandbox]):
    """As ``RemoteSandbox``, with ``async`` methods; ``async with`` deletes it at the block's end."""

    def __init__(self, client: AsyncClient, sync: RemoteSandbox) -> None:
        self.client = client
        self.sync = sync
        self.id = sync.id
        self._pool = client._pool

    def __repr__(self) -> str:
        return f"AsyncSandbox({self.id!r})"

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.delete(missing_ok=True)

    info = _mirror(RemoteSandbox.info)
    is_alive = _mirror(RemoteSandbox.is_alive)
    delete = _mirror(RemoteSandbox.delete)
    close = delete
    exec = _mirror(RemoteSandbox.exec)
    exec_async = _mirror_as(RemoteSandbox.exec_async, lambda self, job: AsyncJob(self.client, job))
    jobs = _mirror(RemoteSandbox.jobs)
    session = _mirror_as(RemoteSandbox.session, lambda self, s: AsyncSession(self.client, s))
    read_file = _mirror(RemoteSandbox.read_file)
    read_text = _mirror(RemoteSandbox.read_text)
    read_file_with_mode = _mirror(RemoteSandbox.read_file_with_mode)
    write_file = _mirror(RemoteSandbox.write_file)
    list_files = _mirror(RemoteSandbox.list_files)
    upload_dir = _mirror(RemoteSandbox.upload_dir)
    download_dir = _mirror(RemoteSandbox.download_dir)
    upload_file = _mirror(RemoteSandbox.upload_file)
    download_file = _mirror(RemoteSandbox.download_file)
    diff = _mirror(RemoteSandbox.diff)
    snapshot = _mirror(RemoteSandbox.snapshot)
    reset = _mirror(RemoteSandbox.reset)

    def job(self, job_id: str) -> "AsyncJob":
        return AsyncJob(self.client, self.sync.job(job_id))

    async def fork(self, count: int, *, session: Union[None, str, Session, "AsyncSession"] = None) -> List["AsyncForkChild"]:
        """As ``RemoteSandbox.fork``; ``session`` may be an ``AsyncSession`` too."""
        sid = session.id if isinstance(session, (Session, AsyncSession)) else session
        out: List[AsyncForkChild] = []
        for c in await self._call(self.sync.fork, count, session=sid):
            sb = AsyncSandbox(self.client, c.sandbox) if c.sandbox is not None else None
            out.append(AsyncForkChild(sb, AsyncSession(self.client, c.session) if c.session is not None else None, c.error))
        return out


class AsyncSession(_Mirrors[Session]):
    def __init__(self, client: AsyncClient, sync: Session) -> None:
        self.client = client
        self.sync = sync
        self.id = sync.id
        self._pool = client._pool

    async def __aenter__(self) -> "AsyncSession":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        try:
            await self.close()
        except (NotFoundError, TransportError):
            pass

    run = _mirror(Session.run)
    interrupt = _mirror(Session.interrupt)
    close = _mirror(Session.close)


class AsyncJob(_Mirrors[Job]):
    def __init__(self, client: AsyncClient, sync: Job) -> None:
        self.client = client
        self.sync = sync
        self.id = sync.id
        self._pool = client._pool

    status = _mirror(Job.status)
    wait = _mirror(Job.wait)
    kill = _mirror(Job.kill)


# A fork's child in the asyncio client: the sync client's ForkChild over the async classes.
AsyncForkChild = ForkChild[AsyncSandbox, AsyncSession]
