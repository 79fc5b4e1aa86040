"""client.rw_lock(name): many readers at once, or one writer alone."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, List

import pytest

import dlock
import dlock.aio


def test_readers_share_and_a_writer_is_alone(redis: Any) -> None:
    clients = [dlock.connect(redis.url) for _ in range(3)]
    lock = threading.Lock()
    state = {"readers": 0, "writing": False, "most_readers": 0, "counter": 0}
    problems: List[str] = []

    def work(i: int) -> None:
        rw = clients[i % 3].rw_lock("doc")
        for _ in range(4):
            if i % 3 == 0:
                with rw.write(lease=5.0, wait=60.0):
                    with lock:
                        if state["writing"] or state["readers"]:
                            problems.append(f"writer {i} not alone")
                        state["writing"] = True
                    seen = state["counter"]
                    time.sleep(0.005)
                    state["counter"] = seen + 1
                    state["writing"] = False
            else:
                with rw.read(lease=5.0, wait=60.0):
                    with lock:
                        if state["writing"]:
                            problems.append(f"reader {i} beside the writer")
                        state["readers"] += 1
                        state["most_readers"] = max(state["most_readers"], state["readers"])
                    seen = state["counter"]
                    time.sleep(0.02)
                    if state["counter"] != seen:
                        problems.append(f"written while reader {i} read")
                    with lock:
                        state["readers"] -= 1

    threads = [threading.Thread(target=work, args=(i,)) for i in range(9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
        assert not t.is_alive(), "a waiter was never served"
    assert problems == []
    assert state["counter"] == 3 * 4
    assert state["most_readers"] > 1, "readers never shared the lock"


def test_downgrade_no_upgrade_and_writer_preference(redis: Any) -> None:
    a, b = dlock.connect(redis.url), dlock.connect(redis.url)
    doc = a.rw_lock("doc")
    assert repr(doc.read()).startswith("<dlock.Lock 'doc' read")
    with doc.read() as read:
        with doc.read() as again:
            assert again.fencing_token == read.fencing_token, "reentrant"
        with pytest.raises(dlock.InvalidArgument, match="upgrade"):
            doc.write().try_acquire()
    write = doc.write().acquire()
    read = doc.read().acquire()  # downgrade: beside its own write hold
    assert read.fencing_token > write.fencing_token
    assert b.rw_lock("doc").read().try_acquire() is None
    write.release()
    other = b.rw_lock("doc").read().try_acquire()
    assert other is not None, "readers share once the write hold is gone"
    # A waiting writer holds off later readers.
    got: List[int] = []

    def writer() -> None:
        with b.rw_lock("doc").write(wait=10.0) as held:
            got.append(held.fencing_token)

    t = threading.Thread(target=writer)
    t.start()
    time.sleep(0.5)
    assert a.rw_lock("doc").read().try_acquire() is None, "no reader passes the waiting writer"
    read.release()
    other.release()
    t.join(timeout=10)
    assert got and got[0] > read.fencing_token


def test_zookeeper_read_write_locks(zookeeper: Any) -> None:
    a, b = dlock.connect(zookeeper.url), dlock.connect(zookeeper.url)
    read = a.rw_lock("doc").read().acquire()
    other = b.rw_lock("doc").read().acquire()
    assert b.rw_lock("doc").write().try_acquire() is None
    read.release()
    other.release()
    doc = b.rw_lock("doc")
    with doc.write() as write:
        with doc.read() as downgraded:  # its owner reads beside its write hold
            # On ZooKeeper the read node takes the write node's number, and so its token.
            assert downgraded.fencing_token == write.fencing_token
            assert a.rw_lock("doc").read().try_acquire() is None


def test_asyncio_tasks_read_together(redis: Any) -> None:
    async def main() -> None:
        client = await dlock.aio.connect(redis.url)
        doc = client.rw_lock("doc")
        inside = [0]
        most = [0]

        async def read() -> None:
            async with doc.read(lease=5.0):
                inside[0] += 1
                most[0] = max(most[0], inside[0])
                await asyncio.sleep(0.05)
                inside[0] -= 1

        await asyncio.wait_for(asyncio.gather(*(read() for _ in range(4))), 30)
        assert most[0] > 1
        async with doc.write() as write:
            async with doc.read() as read:  # downgrade within one task
                assert read.fencing_token > write.fencing_token
        await client.close()

    asyncio.run(main())
