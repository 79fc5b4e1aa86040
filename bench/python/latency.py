"""Uncontended lock cycle from Python: dlock's `with client.lock(...)` next to redis-py's
`Lock` and the raw EVALSHA round trip, plus the Rust client, all against one redis-server
started here, in one run.  Run with `just bench-python` (release builds)."""

from __future__ import annotations

import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable, List, Tuple

import redis

import dlock


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def measure(n: int, f: Callable[[], None]) -> Tuple[float, float]:
    for _ in range(n // 10):
        f()
    samples: List[float] = []
    for _ in range(n):
        start = time.perf_counter()
        f()
        samples.append(time.perf_counter() - start)
    samples.sort()
    return statistics.median(samples) * 1e3, samples[int(0.99 * (len(samples) - 1))] * 1e3


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    rust_bench = sys.argv[2] if len(sys.argv) > 2 else None
    directory = tempfile.mkdtemp(prefix="dlock-bench-")
    port = free_port()
    server = subprocess.Popen(
        ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no", "--dir", directory],
        stdout=subprocess.DEVNULL,
    )
    try:
        r = redis.Redis(port=port)
        for _ in range(100):
            try:
                r.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.02)
        url = f"redis://127.0.0.1:{port}"
        script = r.register_script("return 1")
        rows = [("redis-py EVALSHA round trip (`return 1`)", measure(n, lambda: script()))]

        def redis_py_lock() -> None:
            lock = r.lock("bench-redis-py", timeout=10)
            lock.acquire()
            lock.release()

        rows.append(("redis-py `Lock` acquire + release", measure(n, redis_py_lock)))
        client = dlock.connect(url)
        lock = client.lock("bench-dlock", lease=10.0)

        def dlock_cycle() -> None:
            with lock:
                pass

        rows.append(("dlock `with client.lock(...)`", measure(n, dlock_cycle)))
        if rust_bench:
            out = subprocess.run([rust_bench, str(n), url], capture_output=True, text=True, check=True).stdout
            for line in out.splitlines():
                if line.startswith("| dlock acquire + release, redis://"):
                    cells = [c.strip() for c in line.strip("|").split("|")]
                    rows.append(("Rust client acquire + release", (float(cells[1]), float(cells[2]))))
        base = rows[0][1][0]
        print(f"uncontended lock cycle, {n} iterations each, one redis-server on loopback (ms)\n")
        print("| operation | p50 | p99 | p50 / EVALSHA p50 |")
        print("| --- | ---: | ---: | ---: |")
        for name, (p50, p99) in rows:
            print(f"| {name} | {p50:.3f} | {p99:.3f} | {p50 / base:.2f} |")
        redis_py = rows[1][1][0]
        ours = rows[2][1][0]
        print(f"\ndlock / redis-py Lock (p50): {ours / redis_py:.2f}")
    finally:
        server.kill()
        server.wait()
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
