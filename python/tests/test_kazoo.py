"""kazoo's ``Lock`` and dlock share a ZooKeeper lock: kazoo built with
``extra_lock_patterns=["-lock-"]`` counts dlock's nodes as contenders, and dlock counts kazoo's
``<hex>__lock__<seq>`` nodes (docs/PROTOCOL.md §10). The path is dlock's: ``/dlock/`` + the
escaped name, under the same chroot."""

from __future__ import annotations

import threading
from typing import List

from kazoo.client import KazooClient

import dlock
from conftest import ZooKeeperServer

PATH = "/dlock/orders%2F42"  # the lock "orders/42"


def kazoo_client(zookeeper: ZooKeeperServer) -> KazooClient:
    client = KazooClient(hosts=f"127.0.0.1:{zookeeper.port}")
    client.start(timeout=30)
    return client


def test_a_kazoo_lock_and_a_dlock_lock_exclude_each_other(zookeeper: ZooKeeperServer) -> None:
    client = dlock.connect(zookeeper.url)
    kz = kazoo_client(zookeeper)
    kazoo_lock = kz.Lock(PATH, identifier="kazoo", extra_lock_patterns=["-lock-"])

    held = client.lock("orders/42").acquire()
    assert not kazoo_lock.acquire(blocking=False), "kazoo passed dlock's holder"
    kazoo_holds, done = threading.Event(), threading.Event()

    def kazoo_waits() -> None:
        assert kazoo_lock.acquire(timeout=30)
        kazoo_holds.set()
        done.wait(30)
        kazoo_lock.release()

    waiter = threading.Thread(target=kazoo_waits)
    waiter.start()
    # kazoo's node is queued behind dlock's: the release hands the lock to it.
    while not any("__lock__" in c for c in kz.get_children(PATH)):
        threading.Event().wait(0.01)
    assert not kazoo_holds.is_set()
    token = held.fencing_token
    held.release()
    assert kazoo_holds.wait(30), "kazoo was not woken by dlock's release"
    assert client.lock("orders/42").try_acquire() is None, "dlock passed kazoo's holder"
    status = client.status("orders/42")
    assert status.owner is not None and "__lock__" not in status.owner
    assert status.fencing_token > token
    done.set()
    waiter.join()
    again = client.lock("orders/42").acquire()
    assert again.fencing_token > status.fencing_token
    again.release()
    kz.stop()
    client.close()


def test_kazoo_and_dlock_workers_never_hold_together(zookeeper: ZooKeeperServer) -> None:
    inside = threading.Lock()
    acquisitions: List[str] = []
    clients = [dlock.connect(zookeeper.url) for _ in range(2)]
    kazoos = [kazoo_client(zookeeper) for _ in range(2)]

    def hold(who: str) -> None:
        assert inside.acquire(blocking=False), f"{who} beside another holder"
        acquisitions.append(who)
        inside.release()

    def dlock_worker(client: dlock.Client) -> None:
        for _ in range(15):
            with client.lock("orders/42", wait=60.0):
                hold("dlock")

    def kazoo_worker(kz: KazooClient) -> None:
        lock = kz.Lock(PATH, extra_lock_patterns=["-lock-"])
        for _ in range(15):
            with lock:
                hold("kazoo")

    threads = [threading.Thread(target=dlock_worker, args=(c,)) for c in clients]
    threads += [threading.Thread(target=kazoo_worker, args=(k,)) for k in kazoos]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert acquisitions.count("dlock") == 30 and acquisitions.count("kazoo") == 30
    for kz in kazoos:
        kz.stop()
    for client in clients:
        client.close()
