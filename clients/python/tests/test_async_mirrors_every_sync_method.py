"""The asyncio client is made from the sync one: every public method of ``Client``, ``Pool``,
``RemoteSandbox``, ``Session`` and ``Job`` has an ``async`` counterpart of the same name and parameters, so a method
added to the sync client and not to the table in aio.py fails here. No server needed."""

from __future__ import annotations

import inspect
from typing import Any, Dict, Set

import pytest

from minisandbox import AsyncClient, AsyncJob, AsyncPool, AsyncSandbox, AsyncSession, Client, Job, Pool, RemoteSandbox, Session

PAIRS = [(Client, AsyncClient), (Pool, AsyncPool), (RemoteSandbox, AsyncSandbox), (Session, AsyncSession), (Job, AsyncJob)]
# sync on both sides (they make a handle without a request, or read what the pool holds), or
# closed otherwise (``aclose``)
NOT_AWAITED: Dict[type, Set[str]] = {
    Client: {"sandbox", "close", "base_url", "transport"},
    Pool: {"sandbox", "client", "held", "close"},
    RemoteSandbox: {"job"},
}


def public_methods(cls: type) -> Set[str]:
    return {n for n, v in vars(cls).items() if not n.startswith("_") and (callable(v) or isinstance(v, property))}


@pytest.mark.parametrize("sync_cls,async_cls", PAIRS, ids=[s.__name__ for s, _ in PAIRS])
def test_every_sync_method_has_an_async_one_with_its_parameters(sync_cls: Any, async_cls: Any) -> None:
    skipped = NOT_AWAITED.get(sync_cls, set())
    for name in sorted(public_methods(sync_cls) - skipped):
        sync_fn, async_fn = getattr(sync_cls, name), getattr(async_cls, name, None)
        assert async_fn is not None, f"{async_cls.__name__} has no {name}"
        assert inspect.iscoroutinefunction(async_fn), f"{async_cls.__name__}.{name} is not async"
        if name != "fork":  # the async fork also takes an AsyncSession
            assert inspect.signature(async_fn) == inspect.signature(sync_fn), name
            assert async_fn.__doc__ == sync_fn.__doc__, name
    for name in skipped & {"sandbox", "job", "client", "held"}:
        assert not inspect.iscoroutinefunction(getattr(async_cls, name)), name
