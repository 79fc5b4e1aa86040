"""The Python worker of `just bench` (bench/bench.py runs it), with the command line of the
Rust worker (bench/src/bin/worker.rs): ``uncontended LIB URL NAME N`` and ``contend LIB URL
NAME OUT SECONDS HOLD_US OUTSIDE_US``.

Libraries, each with its defaults: ``dlock`` (redis:// or zk://), ``redis-py`` (``Lock``,
polls every 100 ms), ``python-redis-lock`` (waits on a list with BLPOP), ``pottery``
(``Redlock`` on one master) and ``kazoo`` (``Lock`` recipe on ZooKeeper).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Callable
from urllib.parse import urlparse

Acquire = Callable[[], Callable[[], object]]


def library(lib: str, url: str, name: str) -> Acquire:
    """Acquire (waiting as long as it takes) -> the release function."""
    port = urlparse(url).port
    if lib == "dlock":
        import dlock

        lock = dlock.connect(url).lock(name, lease=10.0)
        return lambda: lock.acquire().release
    if lib == "kazoo":
        from kazoo.client import KazooClient

        zk = KazooClient(hosts=f"127.0.0.1:{port}")
        zk.start()
        kazoo_lock = zk.Lock("/kazoo/" + name)

        def kazoo_acquire() -> Callable[[], object]:
            kazoo_lock.acquire()
            return kazoo_lock.release

        return kazoo_acquire
    import redis

    r = redis.Redis(port=port)
    if lib == "redis-py":

        def redis_py_acquire() -> Callable[[], object]:
            lock = r.lock(name, timeout=10)
            lock.acquire(blocking=True)
            return lock.release

        return redis_py_acquire
    if lib == "python-redis-lock":
        import redis_lock

        def prl_acquire() -> Callable[[], object]:
            lock = redis_lock.Lock(r, name, expire=10)
            lock.acquire(blocking=True)
            return lock.release

        return prl_acquire
    if lib == "pottery":
        from pottery import Redlock

        redlock = Redlock(key=name, masters={r}, auto_release_time=10)

        def pottery_acquire() -> Callable[[], object]:
            redlock.acquire(blocking=True, timeout=-1)
            return redlock.release

        return pottery_acquire
    raise SystemExit(f"unknown library {lib}")


def main() -> None:
    mode, lib, url, name = sys.argv[1:5]
    acquire = library(lib, url, name)
    if mode == "uncontended":
        n = int(sys.argv[5])
        acquire()()
        samples = []
        start = time.monotonic_ns()
        for _ in range(n):
            t = time.monotonic_ns()
            acquire()()
            samples.append(time.monotonic_ns() - t)
        print(json.dumps({"samples": samples, "total": time.monotonic_ns() - start}))
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
        release = acquire()
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
