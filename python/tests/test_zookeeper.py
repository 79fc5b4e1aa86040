"""The same API on ZooKeeper: zk:// is only another URL."""

from __future__ import annotations

import threading
from typing import List

import dlock
from conftest import ZooKeeperServer


def test_zookeeper_locks_exclude_fence_and_report_status(zookeeper: ZooKeeperServer) -> None:
    a, b = dlock.connect(zookeeper.url), dlock.connect(zookeeper.url)
    tokens: List[int] = []
    inside = threading.Lock()

    def work(client: dlock.Client) -> None:
        for _ in range(5):
            with client.lock("orders/42", wait=30.0) as held:
                assert inside.acquire(blocking=False), "two holders at once"
                tokens.append(held.fencing_token)
                inside.release()

    threads = [threading.Thread(target=work, args=(c,)) for c in (a, b, a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(tokens) == 20
    assert tokens == sorted(tokens) and len(set(tokens)) == 20

    held = a.lock("orders/42").acquire()
    assert b.lock("orders/42").try_acquire() is None
    status = b.status("orders/42")
    assert status.fencing_token == held.fencing_token and status.owner is not None
    held.release()
    assert b.status("orders/42").owner is None
    a.close()
    b.close()
