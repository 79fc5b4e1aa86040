"""client.semaphore(name, permits=N): at most N holders at a time, each permit a lease of its own."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, List

import pytest

import dlock
import dlock.aio


def test_at_most_permits_holders_and_every_permit_used(redis: Any) -> None:
    clients = [dlock.connect(redis.url) for _ in range(3)]
    lock = threading.Lock()
    inside = [0]
    most = [0]
    tokens: List[int] = []

    def work(i: int) -> None:
        semaphore = clients[i % 3].semaphore("pool", permits=3, lease=5.0, wait=60.0)
        for _ in range(4):
            with semaphore as held:
                with lock:
                    inside[0] += 1
                    most[0] = max(most[0], inside[0])
                    tokens.append(held.fencing_token)
                time.sleep(0.05)
                with lock:
                    inside[0] -= 1

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
        assert not t.is_alive(), "a permit waiter was never served"
    assert most[0] == 3, "never more than 3 holders, and all 3 permits in use at once"
    assert len(tokens) == 32 and len(set(tokens)) == 32, "every permit has a token of its own"


def test_each_acquire_is_a_permit_of_its_own(redis: Any) -> None:
    client = dlock.connect(redis.url)
    semaphore = client.semaphore("two", permits=2)
    assert repr(semaphore).startswith("<dlock.Semaphore 'two' permits=2")
    first = semaphore.acquire()
    second = semaphore.acquire()  # the same object and thread: a second permit, not reentry
    assert first.fencing_token != second.fencing_token
    assert semaphore.try_acquire() is None
    # The lock of the same name is another thing.
    lock = client.lock("two").try_acquire()
    assert lock is not None
    lock.release()
    first.release()
    third = semaphore.try_acquire()
    assert third is not None and third.fencing_token > second.fencing_token
    second.release()
    third.release()


def test_bad_and_disagreeing_permits_are_refused(redis: Any) -> None:
    client = dlock.connect(redis.url)
    held = client.semaphore("agreed", permits=2).acquire()
    with pytest.raises(dlock.InvalidArgument, match="2 permits"):
        client.semaphore("agreed", permits=3).try_acquire()
    for bad in (0, -1, 1025, 2**40):
        with pytest.raises(dlock.InvalidArgument, match="permits"):
            client.semaphore("agreed", permits=bad).try_acquire()
    with pytest.raises(TypeError):
        client.semaphore("agreed", permits=True)
    with pytest.raises(TypeError):
        client.semaphore("agreed", permits="2")  # type: ignore[arg-type]
    held.release()


def test_zookeeper_semaphores_hand_permits_to_their_waiters(zookeeper: Any) -> None:
    a, b = dlock.connect(zookeeper.url), dlock.connect(zookeeper.url)
    first = a.semaphore("pool", permits=2).acquire()
    second = a.semaphore("pool", permits=2).acquire()
    assert b.semaphore("pool", permits=2).try_acquire() is None
    got: List[int] = []

    def wait() -> None:
        with b.semaphore("pool", permits=2, wait=10.0) as held:
            got.append(held.fencing_token)

    t = threading.Thread(target=wait)
    t.start()
    time.sleep(0.2)
    first.release()  # not the waiter's predecessor: it watches both permits ahead of it
    t.join(timeout=10)
    assert got and got[0] > second.fencing_token
    second.release()


def test_asyncio_tasks_share_the_permits(redis: Any) -> None:
    async def main() -> None:
        client = await dlock.aio.connect(redis.url)
        semaphore = client.semaphore("tasks", permits=2, lease=5.0)
        inside = [0]
        most = [0]

        async def work() -> None:
            for _ in range(3):
                async with semaphore:
                    inside[0] += 1
                    most[0] = max(most[0], inside[0])
                    await asyncio.sleep(0.03)
                    inside[0] -= 1

        await asyncio.wait_for(asyncio.gather(*(work() for _ in range(5))), 60)
        assert most[0] == 2
        await client.close()

    asyncio.run(main())
