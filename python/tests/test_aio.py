"""The asyncio API against a real redis-server."""

from __future__ import annotations

import asyncio
from typing import List

import pytest

import dlock
import dlock.aio
from conftest import RedisServer


def test_async_with_and_contention_between_tasks(redis: RedisServer) -> None:
    async def main() -> List[int]:
        client = await dlock.aio.connect(redis.url)
        inside = False
        tokens: List[int] = []

        async def worker() -> None:
            nonlocal inside
            for _ in range(5):
                async with client.lock("aio", lease=5.0) as held:
                    assert not inside, "two holders"
                    inside = True
                    tokens.append(held.fencing_token)
                    await asyncio.sleep(0)
                    inside = False

        await asyncio.gather(*(worker() for _ in range(6)))
        await client.close()
        return tokens

    tokens = asyncio.run(main())
    assert tokens == sorted(tokens) and len(set(tokens)) == 30


def test_cancelling_a_waiting_task_leaves_the_queue(redis: RedisServer) -> None:
    async def main() -> None:
        client = await dlock.aio.connect(redis.url)
        held = await client.lock("c").acquire()
        waiter = asyncio.ensure_future(client.lock("c").acquire())
        for _ in range(200):
            if (await client.status("c")).waiters:
                break
            await asyncio.sleep(0.005)
        assert len((await client.status("c")).waiters) == 1
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        for _ in range(200):
            if not (await client.status("c")).waiters:
                break
            await asyncio.sleep(0.005)
        assert (await client.status("c")).waiters == ()
        await held.release()
        assert (await client.status("c")).owner is None

    asyncio.run(main())


def test_wait_timeout_try_acquire_and_errors(redis: RedisServer) -> None:
    async def main() -> None:
        a = await dlock.aio.connect(redis.url)
        b = await dlock.aio.connect(redis.url)
        held = await a.lock("t").acquire()
        assert await b.lock("t").try_acquire() is None
        with pytest.raises(dlock.LockTimeout):
            await b.lock("t", wait=0.2).acquire()
        with pytest.raises(dlock.InvalidArgument):
            await b.lock("", lease=1.0).acquire()
        with pytest.raises(dlock.InvalidArgument):
            await dlock.aio.connect("http://nope")
        await held.extend(30.0)
        await held.release()
        with pytest.raises(dlock.NotHeld):
            await held.release()

    asyncio.run(main())


def test_on_lost_runs_on_the_loop(redis: RedisServer) -> None:
    async def main() -> str:
        client = await dlock.aio.connect(redis.url)
        lost = asyncio.get_running_loop().create_future()

        async def on_lost(held: dlock.aio.AsyncHeld, reason: str) -> None:
            lost.set_result(reason)

        held = await client.lock("l", lease=0.5, on_lost=on_lost).acquire()
        redis.cli("DEL", "dlock:{l}:lock")
        reason: str = await asyncio.wait_for(lost, 3)
        assert held.is_lost and "lost (not-owner)" in repr(held)
        return reason

    assert asyncio.run(main()) == "not-owner"


@pytest.mark.parametrize("backend", ["redis_cluster", "redlock"])
def test_asyncio_on_multi_node_backends(backend: str, request: pytest.FixtureRequest) -> None:
    url = request.getfixturevalue(backend).url
    other = dlock.connect(url)

    async def main() -> int:
        client = await dlock.aio.connect(url)
        async with client.lock("async/job") as held:
            assert other.lock("async/job").try_acquire() is None
            token = held.fencing_token
        await client.close()
        return token

    token = asyncio.run(main())
    with other.lock("async/job") as after:
        assert after.fencing_token > token
