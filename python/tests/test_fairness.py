"""fair=False: a non-fair lock frees itself on release and wakes its first waiter to race for it."""

from __future__ import annotations

import threading
import time
from typing import Any, List

import pytest

import dlock


def test_non_fair_locks_exclude_and_wake_waiters(redis: Any) -> None:
    clients = [dlock.connect(redis.url) for _ in range(3)]
    inside: List[int] = [0]
    overlaps: List[str] = []
    counts = [0, 0, 0, 0, 0, 0]

    def work(i: int) -> None:
        lock = clients[i % 3].lock("hot", lease=5.0, wait=30.0, fair=i % 2 == 0)
        for _ in range(15):
            with lock:
                inside[0] += 1
                if inside[0] != 1:
                    overlaps.append(f"worker {i}")
                time.sleep(0.001)
                counts[i] += 1
                inside[0] -= 1

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
        assert not t.is_alive(), "a waiter was never woken"
    assert overlaps == []
    assert counts == [15] * 6


def test_a_non_fair_release_wakes_the_waiter(redis: Any) -> None:
    # The waiter refreshes its place only every 10 s (a third of its 30 s waiter lease), and
    # the holder's 30 s lease does not run out: only the release's wake-up can bring it in
    # time.
    a, b = dlock.connect(redis.url), dlock.connect(redis.url, waiter_lease=30.0)
    held = a.lock("x", fair=False).acquire()
    got: List[float] = []

    def wait() -> None:
        with b.lock("x", wait=10.0):
            got.append(time.monotonic())

    t = threading.Thread(target=wait)
    t.start()
    time.sleep(0.2)
    released = time.monotonic()
    held.release()
    t.join(timeout=10)
    assert got and got[0] - released < 5.0, "woken by the release, not by a refresh 10 s later"


def test_zookeeper_refuses_non_fair(zookeeper: Any) -> None:
    client = dlock.connect(zookeeper.url)
    with pytest.raises(dlock.InvalidArgument):
        client.lock("x", fair=False).acquire()
