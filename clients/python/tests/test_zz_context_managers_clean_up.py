"""Every handle used as a context manager leaves nothing: the sandboxes are gone at the block's end,
also when the block raises. Runs last (file order): the server holds no sandbox afterwards."""

from __future__ import annotations

import asyncio

import pytest

from conftest import REF, Server
from minisandbox import AsyncClient, Client


def test_context_managers_delete_sandboxes_and_close_sessions(server: Server) -> None:
    with Client(server.url, token_file=server.token_file) as c:
        with c.create(REF) as sb:
            with sb.session() as s:
                assert s.run("true").ok
            assert sb.info().sessions == []
        with pytest.raises(RuntimeError):
            with c.create(REF) as sb2:
                raise RuntimeError("the rollout failed")
        assert not sb2.is_alive()

        async def main() -> None:
            async with AsyncClient(server.url, token_file=server.token_file) as ac:
                async with await ac.create(REF) as a:
                    assert (await a.exec("echo a")).stdout == "a\n"

        asyncio.run(main())
        assert c.list() == []
