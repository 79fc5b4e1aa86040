"""Contended hand-off across OS processes: dlock next to redis-py's Lock, python-redis-lock
and pottery's Redlock, against one redis-server started here, in one run; with `zk` as the
second argument, dlock next to kazoo's Lock recipe against one ZooKeeper started here.

Each of W worker processes loops for a few seconds: acquire, hold 1 ms, release, work 1 ms
outside the lock (so that a process does not simply take the lock straight back). From all
workers' timelines (CLOCK_MONOTONIC is shared by processes) it reports the hand-off latency
— from one holder starting its release to the next *other* holder having the lock — its p50
and p99, fairness (max/min acquisitions per worker) and give-ups (waits that ran out).

Run with `just bench-handoff` (release build of the Python package). Writes
bench/results/handoff.md and, when matplotlib is installed, bench/results/handoff.svg
(`handoff-zk.md` and `handoff-zk.svg` for ZooKeeper).
"""

from __future__ import annotations

import multiprocessing
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

HOLD = 0.001
OUTSIDE = 0.001
WAIT = 10.0
Timeline = List[Tuple[float, float]]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def worker(lib: str, port: int, seconds: float, start_at: float, out: "multiprocessing.Queue[Tuple[Timeline, int]]") -> None:
    import redis

    url = f"redis://127.0.0.1:{port}"
    name = "bench-handoff-" + lib.replace(" ", "-")
    giveups = 0
    timeline: Timeline = []
    r = redis.Redis(port=port)
    # Each library as acquire() -> a release function, or None when the wait ran out.
    acquire: Callable[[], Optional[Callable[[], object]]]
    if lib in ("dlock", "dlock zk"):
        import dlock

        if lib == "dlock zk":
            url = f"zk://127.0.0.1:{port}"
        lock = dlock.connect(url).lock(name, lease=10.0, wait=WAIT)
        acquire = lambda: lock.acquire().release  # noqa: E731
    elif lib == "kazoo Lock":
        from kazoo.client import KazooClient

        zk = KazooClient(hosts=f"127.0.0.1:{port}")
        zk.start()
        kazoo_lock = zk.Lock("/kazoo/" + name)
        acquire = lambda: kazoo_lock.release if kazoo_lock.acquire(timeout=WAIT) else None  # noqa: E731
    elif lib == "redis-py Lock":

        def acquire() -> Optional[Callable[[], object]]:
            lock = r.lock(name, timeout=10)
            return lock.release if lock.acquire(blocking=True, blocking_timeout=WAIT) else None

    elif lib == "python-redis-lock":
        import redis_lock

        def acquire() -> Optional[Callable[[], object]]:
            lock = redis_lock.Lock(r, name, expire=10)
            return lock.release if lock.acquire(blocking=True, timeout=WAIT) else None

    elif lib == "pottery Redlock":
        from pottery import Redlock

        redlock = Redlock(key=name, masters={r}, auto_release_time=10)
        acquire = lambda: redlock.release if redlock.acquire(blocking=True, timeout=WAIT) else None  # noqa: E731
    else:
        raise ValueError(lib)

    def cycle() -> bool:
        release = acquire()
        if release is None:
            return False
        t = time.monotonic()
        time.sleep(HOLD)
        timeline.append((t, time.monotonic()))
        release()
        return True

    while time.monotonic() < start_at:
        time.sleep(0.001)
    deadline = start_at + seconds
    while time.monotonic() < deadline:
        if not cycle():
            giveups += 1
        time.sleep(OUTSIDE)
    out.put((timeline, giveups))


def run(lib: str, port: int, workers: int, seconds: float) -> Tuple[List[float], List[int], int]:
    ctx = multiprocessing.get_context("spawn")
    out: "multiprocessing.Queue[Tuple[Timeline, int]]" = ctx.Queue()
    start_at = time.monotonic() + 2.0  # everyone imported and connected
    procs = [ctx.Process(target=worker, args=(lib, port, seconds, start_at, out)) for _ in range(workers)]
    for p in procs:
        p.start()
    results = [out.get(timeout=seconds + 60) for _ in procs]
    for p in procs:
        p.join()
    events = sorted((acq, rel, w) for w, (timeline, _) in enumerate(results) for acq, rel in timeline)
    handoffs = [
        (nxt[0] - prev[1]) * 1e3 for prev, nxt in zip(events, events[1:]) if nxt[2] != prev[2] and nxt[0] >= prev[1]
    ]
    counts = [len(timeline) for timeline, _ in results]
    return handoffs, counts, sum(g for _, g in results)


def pct(xs: List[float], q: float) -> float:
    xs = sorted(xs)
    return xs[int(q * (len(xs) - 1))] if xs else float("nan")


def start_zookeeper(directory: str, port: int) -> "subprocess.Popen[bytes]":
    data = Path(directory) / "data"
    data.mkdir()
    config = Path(directory) / "zoo.cfg"
    config.write_text(
        f"tickTime=2000\ninitLimit=10\nsyncLimit=5\ndataDir={data}\nclientPort={port}\n"
        "clientPortAddress=127.0.0.1\nadmin.enableServer=false\n4lw.commands.whitelist=*\nmaxClientCnxns=0\n"
    )
    server = subprocess.Popen(
        ["java", "-Xmx512m", "-cp", "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar",
         "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(config)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"srvr")
                if b"Mode:" in s.recv(4096):
                    return server
        except OSError:
            time.sleep(0.1)
    server.kill()
    raise RuntimeError("ZooKeeper did not start")


def round_trip(zookeeper: bool, port: int) -> Tuple[str, float]:
    """The yardstick: one EVALSHA, or one ZooKeeper exists(), round trip from Python (p50, ms)."""
    samples = []
    if zookeeper:
        from kazoo.client import KazooClient

        zk = KazooClient(hosts=f"127.0.0.1:{port}")
        zk.start()
        call: Callable[[], object] = lambda: zk.exists("/")  # noqa: E731
        name = "ZooKeeper exists()"
    else:
        import redis

        call = redis.Redis(port=port).register_script("return 1")
        name = "EVALSHA"
    call()
    for _ in range(2000):
        t = time.perf_counter()
        call()
        samples.append((time.perf_counter() - t) * 1e3)
    return name, statistics.median(samples)


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 5.0
    zookeeper = len(sys.argv) > 2 and sys.argv[2] == "zk"
    libs = ["dlock zk", "kazoo Lock"] if zookeeper else ["dlock", "redis-py Lock", "python-redis-lock", "pottery Redlock"]
    directory = tempfile.mkdtemp(prefix="dlock-handoff-")
    port = free_port()
    if zookeeper:
        server = start_zookeeper(directory, port)
    else:
        server = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no", "--dir", directory],
            stdout=subprocess.DEVNULL,
        )
    rows = []
    distributions: Dict[str, List[float]] = {}
    try:
        time.sleep(0.3)
        yardstick, rtt = round_trip(zookeeper, port)
        for workers in (2, 8):
            for lib in libs:
                handoffs, counts, giveups = run(lib, port, workers, seconds)
                fairness = max(counts) / max(min(counts), 1)
                rows.append((lib, workers, sum(counts), pct(handoffs, 0.5), pct(handoffs, 0.99), fairness, giveups))
                if workers == 8:
                    distributions[lib] = handoffs
                print(f"{lib:>18} x{workers}: {sum(counts):6} acquisitions, hand-off p50 {pct(handoffs, 0.5):8.3f} ms", flush=True)
    finally:
        server.kill()
        server.wait()
        shutil.rmtree(directory, ignore_errors=True)

    dlock_p50 = {w: p50 for lib, w, _, p50, *_ in rows if lib.startswith("dlock")}
    backend = "one ZooKeeper 3.8" if zookeeper else "one redis-server"
    lines = [
        f"# Contended hand-off across processes ({time.strftime('%Y-%m-%d')})",
        "",
        f"Machine: {platform.platform()}, {os.cpu_count()} cores, Python {platform.python_version()}; {backend} "
        f"on loopback; each worker holds for {HOLD * 1e3:.0f} ms, then works {OUTSIDE * 1e3:.0f} ms outside the lock; {seconds:.0f} s per row. {yardstick} round trip from "
        f"Python: {rtt:.3f} ms (p50).",
        "",
        f"| library | workers | acquisitions | hand-off p50 (ms) | p99 (ms) | p50 / dlock p50 | p50 / {yardstick} | fairness max/min | give-ups |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for lib, w, n, p50, p99, fairness, giveups in rows:
        lines.append(
            f"| {lib} | {w} | {n} | {p50:.3f} | {p99:.3f} | {p50 / dlock_p50[w]:.1f} | {p50 / rtt:.2f} | {fairness:.2f} | {giveups} |"
        )
    results = Path(__file__).resolve().parents[1] / "results"
    results.mkdir(exist_ok=True)
    stem = "handoff-zk" if zookeeper else "handoff"
    (results / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(8, 4.5))
        for lib, xs in distributions.items():
            xs = sorted(x for x in xs if x > 0)
            if xs:
                ax.plot(xs, [i / len(xs) for i in range(len(xs))], label=lib)
        ax.set_xscale("log")
        ax.set_xlabel("hand-off latency (ms, log scale)")
        ax.set_ylabel("fraction of hand-offs")
        ax.set_title(f"Hand-off between 8 processes, {backend}")
        ax.legend()
        ax.grid(True, which="both", alpha=0.3)
        fig.tight_layout()
        fig.savefig(results / f"{stem}.svg")
        print(f"\nplot: {results / f'{stem}.svg'}")
    except ImportError:
        print("\nmatplotlib is not installed: no plot")


if __name__ == "__main__":
    main()
