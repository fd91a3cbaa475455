"""The asyncio client runs commands concurrently from one event loop."""

from __future__ import annotations

import asyncio

from conftest import REF, Server
from minisandbox import AsyncClient, AsyncJob, AsyncSandbox, AsyncSession

N = 6
# each command marks itself ready, then waits for all N marks: run one after another, the first
# would wait in vain until its own timeout
BARRIER = 'touch /tmp/ready-$I; n=0; while [ "$(ls /tmp | grep -c "^ready-")" -lt {n} ]; do n=$((n+1)); [ $n -gt 1200 ] && exit 9; sleep 0.1; done; echo done-$I'


def test_concurrent_execs_in_one_sandbox_and_across_sandboxes(server: Server) -> None:
    async def main() -> None:
        async with AsyncClient(server.url, token_file=server.token_file) as c:
            async with await c.create(REF) as sb:
                results = await asyncio.gather(*(sb.exec(BARRIER.format(n=N), env={"I": str(i)}, timeout=300) for i in range(N)))
                assert [r.stdout for r in results] == [f"done-{i}\n" for i in range(N)]
                assert all(r.ok for r in results)

            sbs = await asyncio.gather(*(c.create(REF) for _ in range(3)))
            try:
                outs = await asyncio.gather(*(s.exec(f"echo {s.id}") for s in sbs))
                assert [o.stdout for o in outs] == [f"{s.id}\n" for s in sbs]
                async with await sbs[0].session(["cd /tmp"]) as ses:
                    assert (await ses.run("pwd")).stdout == "/tmp\n"
                await sbs[0].write_file("/w/x", b"1", mode=0o600)
                assert await sbs[0].read_file_with_mode("/w/x") == (b"1", 0o600)
            finally:
                await asyncio.gather(*(s.delete() for s in sbs))
            assert await c.list() == []

    asyncio.run(main())


def test_calls_that_return_a_handle_return_the_async_one(server: Server) -> None:
    async def main() -> None:
        async with AsyncClient(server.url, token_file=server.token_file) as c:
            async with await c.create(REF) as sb:
                again = await c.get(sb.id)
                assert isinstance(again, AsyncSandbox) and again.id == sb.id
                job = await sb.exec_async("echo job-out")
                assert isinstance(job, AsyncJob)
                assert (await job.wait(timeout=300)).stdout == "job-out\n"
                assert (await sb.job(job.id).status()).done
                ses = await sb.session(["cd /tmp", "export MARK=m1"])
                assert isinstance(ses, AsyncSession)
                children = await sb.fork(2, session=ses)
                try:
                    assert [c.ok for c in children] == [True, True]
                    for child in children:
                        assert isinstance(child.sandbox, AsyncSandbox) and isinstance(child.session, AsyncSession)
                        assert (await child.session.run('echo "$MARK $(pwd)"')).stdout == "m1 /tmp\n"
                finally:
                    for child in children:
                        if child.sandbox is not None:
                            await child.sandbox.delete(missing_ok=True)

    asyncio.run(main())
