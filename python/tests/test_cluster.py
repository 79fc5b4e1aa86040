"""dlock on a real three-master Redis Cluster: the same API with a redis-cluster:// URL."""

from __future__ import annotations

import threading

import dlock
from conftest import RedisCluster


def test_locks_on_a_cluster_exclude_and_hand_off(redis_cluster: RedisCluster) -> None:
    a, b = dlock.connect(redis_cluster.url), dlock.connect(redis_cluster.url)
    names = [f"job/{i}" for i in range(12)]  # their hash slots spread over the three masters
    held = [a.lock(name, lease=0.3).acquire() for name in names]
    assert all(b.lock(name).try_acquire() is None for name in names)
    threading.Event().wait(1.0)  # several leases: the watchdog renews each lock on its own node
    assert not any(h.is_lost for h in held)
    first = held[0]
    waiting: list[dlock.Held] = []
    waiter = threading.Thread(target=lambda: waiting.append(b.lock(names[0], wait=5.0).acquire()))
    waiter.start()
    threading.Event().wait(0.05)
    first.release()
    waiter.join()
    assert waiting[0].fencing_token > first.fencing_token
    waiting[0].release()
    for h in held[1:]:
        h.release()
    assert a.fenced_write("stock/42", waiting[0].fencing_token, "7")
    assert not a.fenced_write("stock/42", first.fencing_token, "9")
