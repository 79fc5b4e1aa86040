"""The Python worker of `just bench` (bench/bench.py runs it), with the command line of the
Rust worker (bench/src/bin/worker.rs): ``uncontended LIB URL NAME N [WARMUP]``, ``contend LIB URL
NAME OUT SECONDS HOLD_US OUTSIDE_US`` and ``capacity LIB URL PREFIX SECONDS TASKS LOCKS``
(TASKS threads of one client).

Libraries, each with its defaults: ``dlock`` (redis:// or zk://), ``redis-py`` (``Lock``,
polls every 100 ms), ``python-redis-lock`` (waits on a list with BLPOP), ``pottery``
(``Redlock`` on one master) and ``kazoo`` (``Lock`` recipe on ZooKeeper).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Callable
from urllib.parse import urlparse

# Acquires lock NAME (waiting as long as it takes) -> its release.
Acquire = Callable[[str], Callable[[], object]]


def library(lib: str, url: str) -> Acquire:
    """Acquire (waiting as long as it takes) -> the release function. One client (connection
    pool) for every lock; each library's lock object is made once per name."""
    port = urlparse(url).port
    if lib == "dlock":
        import dlock

        client = dlock.connect(url)
        dlocks = {}

        def dlock_acquire(name: str) -> Callable[[], object]:
            lock = dlocks.get(name) or dlocks.setdefault(name, client.lock(name, lease=10.0))
            return lock.acquire().release

        return dlock_acquire
    if lib == "kazoo":
        from kazoo.client import KazooClient

        zk = KazooClient(hosts=f"127.0.0.1:{port}")
        zk.start()
        kazoo_locks = {}

        def kazoo_acquire(name: str) -> Callable[[], object]:
            lock = kazoo_locks.get(name) or kazoo_locks.setdefault(name, zk.Lock("/kazoo/" + name))
            lock.acquire()
            return lock.release

        return kazoo_acquire
    import redis

    r = redis.Redis(port=port)
    if lib == "redis-py":

        def redis_py_acquire(name: str) -> Callable[[], object]:
            lock = r.lock(name, timeout=10)
            lock.acquire(blocking=True)
            return lock.release

        return redis_py_acquire
    if lib == "python-redis-lock":
        import redis_lock

        def prl_acquire(name: str) -> Callable[[], object]:
            lock = redis_lock.Lock(r, name, expire=10)
            lock.acquire(blocking=True)
            return lock.release

        return prl_acquire
    if lib == "pottery":
        from pottery import Redlock

        redlocks = {}

        def pottery_acquire(name: str) -> Callable[[], object]:
            redlock = redlocks.get(name) or redlocks.setdefault(name, Redlock(key=name, masters={r}, auto_release_time=10))
            redlock.acquire(blocking=True, timeout=-1)
            return redlock.release

        return pottery_acquire
    raise SystemExit(f"unknown library {lib}")


def capacity(acquire: Acquire, prefix: str, seconds: float, tasks: int, locks: int) -> None:
    """TASKS threads take disjoint shares of LOCKS locks over and over for SECONDS."""
    start = time.monotonic_ns()
    deadline = start + int(seconds * 1e9)
    counts = [0] * tasks

    def loop(task: int) -> None:
        names = [f"{prefix}/{i}" for i in range(task, locks, tasks)]
        while names and time.monotonic_ns() < deadline:
            for name in names:
                acquire(name)()
                counts[task] += 1

    threads = [threading.Thread(target=loop, args=(t,)) for t in range(tasks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps({"cycles": sum(counts), "seconds": (time.monotonic_ns() - start) / 1e9}))


def main() -> None:
    mode, lib, url, name = sys.argv[1:5]
    acquire = library(lib, url)
    if mode == "capacity":
        capacity(acquire, name, float(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7]))
        return
    if mode == "uncontended":
        n = int(sys.argv[5])
        for _ in range(int(sys.argv[6]) if len(sys.argv) > 6 else 1):  # warm-up (see worker.rs)
            acquire(name)()
        samples = []
        start, cpu = time.monotonic_ns(), time.process_time_ns()
        for _ in range(n):
            t = time.monotonic_ns()
            acquire(name)()
            samples.append(time.monotonic_ns() - t)
        total, cpu = time.monotonic_ns() - start, time.process_time_ns() - cpu
        print(json.dumps({"samples": samples, "total": total, "cpu": cpu}))
        return
    out = Path(sys.argv[5])
    seconds, hold_ns, outside = float(sys.argv[6]), int(sys.argv[7]) * 1000, int(sys.argv[8]) / 1e6
    Path(f"{out}.ready").write_text("")
    while not (out.parent / "go").exists():
        time.sleep(0.001)
    deadline = time.monotonic_ns() + int(seconds * 1e9)
    lines = []
    while time.monotonic_ns() < deadline:
        requested = time.monotonic_ns()
        release = acquire(name)
        acquired = time.monotonic_ns()
        # Held for exactly `hold` (a spin on the monotonic clock: a sleep would round it up to
        # the timer's granularity, differently in every language).
        while time.monotonic_ns() < acquired + hold_ns:
            pass
        released = time.monotonic_ns()
        release()
        lines.append(f"{requested} {acquired} {released}\n")
        time.sleep(outside)
    out.write_text("".join(lines))


if __name__ == "__main__":
    main()
