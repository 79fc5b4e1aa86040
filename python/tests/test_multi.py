"""Multi-locks (several names as one, all or none) against a real redis-server and ZooKeeper."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Dict, List

import pytest

import dlock
import dlock.aio


@pytest.mark.parametrize("backend", ["redis", "zookeeper"])
def test_a_multi_lock_is_all_or_none(backend: str, request: pytest.FixtureRequest) -> None:
    url = request.getfixturevalue(backend).url
    a, b = dlock.connect(url), dlock.connect(url)
    single = b.lock("set/2").acquire()
    assert a.multi_lock(["set/3", "set/1", "set/2"]).try_acquire() is None
    with pytest.raises(dlock.LockTimeout):
        a.multi_lock(["set/3", "set/1", "set/2"], wait=0.3).acquire()
    # What the failed attempts took is given back (in the background).
    deadline = time.monotonic() + 5
    while b.status("set/1").owner is not None:
        assert time.monotonic() < deadline, "set/1 was not given back"
        time.sleep(0.02)
    single.release()
    with a.multi_lock(["set/3", "set/1", "set/2", "set/1"], lease=5.0) as held:
        tokens = held.fencing_tokens
        assert list(tokens) == ["set/1", "set/2", "set/3"]
        for name, token in tokens.items():
            assert b.status(name).fencing_token == token
        assert b.lock("set/3").try_acquire() is None
        held.extend(10.0)
    for name in ["set/1", "set/2", "set/3"]:
        assert b.status(name).owner is None
    with pytest.raises(dlock.InvalidArgument):
        a.multi_lock([]).acquire()


def test_overlapping_multi_locks_from_threads_count_exactly(redis: Any) -> None:
    client = dlock.connect(redis.url)
    names = ["m/a", "m/b", "m/c"]
    counts: Dict[str, int] = {n: 0 for n in names}
    holders: Dict[str, int] = {n: 0 for n in names}
    errors: List[str] = []

    def work(i: int) -> None:
        mine = [names[(i + k) % 3] for k in range(2)][:: 1 if i % 2 else -1]
        for _ in range(10):
            with client.multi_lock(mine, lease=5.0, wait=30.0):
                for n in mine:
                    holders[n] += 1
                    if holders[n] != 1:
                        errors.append(f"two holders of {n}")
                seen = {n: counts[n] for n in mine}
                time.sleep(0.001)
                for n in mine:
                    counts[n] = seen[n] + 1
                    holders[n] -= 1

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
        assert not t.is_alive(), "overlapping multi-locks deadlocked"
    assert errors == []
    assert counts == {"m/a": 40, "m/b": 40, "m/c": 40}


def test_asyncio_multi_lock(redis: Any) -> None:
    async def main() -> None:
        client = await dlock.aio.connect(redis.url)
        other = await dlock.aio.connect(redis.url)
        async with client.multi_lock(["b", "a"], lease=5.0) as held:
            assert list(held.fencing_tokens) == ["a", "b"]
            assert await other.multi_lock(["a", "z"]).try_acquire() is None
        again = await other.multi_lock(["a", "z"]).try_acquire()
        assert again is not None
        assert again.fencing_tokens["a"] > held.fencing_tokens["a"]
        await again.release()

    asyncio.run(main())
