"""`just bench`: dlock next to the peer libraries, against the same servers, in one run.

It starts one redis-server, one ZooKeeper, one PostgreSQL and one MariaDB on free loopback
ports (the databases as the Python tests start them: python/tests/conftest.py), then runs
workers — separate OS processes, one command line for every language (see
bench/src/bin/worker.rs) — for dlock from Rust (native and Wasm engine), Python and Node, and
for the peers: redis-py ``Lock``, python-redis-lock, pottery ``Redlock``, node-redlock, rslock,
Redisson ``RLock`` (JVM), kazoo ``Lock``, Curator ``InterProcessMutex`` (JVM), Spring
Integration's ``JdbcLockRegistry`` and ShedLock (JVM, on both databases), and the databases'
own session locks as yardsticks (``pg_advisory_lock``, ``GET_LOCK``: no lease, no fence).
Every library runs with its defaults. A peer whose worker cannot run is skipped with the
reason printed.

Measured:

- raw round trips of the servers (PING, EVALSHA of ``return 1``, ZooKeeper ``exists``,
  ``SELECT 1``; and a cycle of dlock's own ACQUIRE and RELEASE scripts on a bare redis-rs
  connection, which splits a dlock cycle into the server's part and the client's, and
  next to rslock's and node-redlock's cycles says what protocol v1's scripts cost with no
  client of dlock's around them), from Rust, measured before and after every round of the
  uncontended runs: the yardstick is the lowest p50;
- uncontended acquire + release, N cycles in a fresh process, three rounds that take turns
  across the libraries; the round with the lowest p50 counts: p50, p99, cycles per second;
  and the client's CPU per cycle (its process's CPU time over the N cycles, every thread,
  user + system, as the worker reads it), the least of the rounds. Each process first runs
  5,000 cycles unmeasured, so that a JIT (V8's, the JVM's) is warm. For Node, the CPU time
  of JavaScript's own thread per cycle too (``/proc/self/task/<pid>/schedstat``): what a
  cycle takes from the event loop that serves the application;
- contended hand-off between W = 2, 8, 16 processes: each holds the lock 1 ms (spinning on
  the monotonic clock, so that no language's timer stretches it; the measured hold is
  reported), then works W ms outside it (so that, with FIFO hand-off, the lock stays busy while the releaser does
  not take it straight back). From all workers' timelines (CLOCK_MONOTONIC, shared by the
  processes) the hand-off latency is the time from a release, while another process was
  waiting, to the next acquisition; the wait is the time from asking for the lock to getting
  it; fairness is max/min acquisitions per worker. Cycles of the first second (warm-up) do
  not count;
- a hot lock: the same W processes take one lock over and over, holding it 0 ms and working
  0 ms outside it: acquisitions per second, hand-off p50 and p99, fairness, and how busy the
  clients' CPUs were (``/proc/stat``) over the measured seconds: their CPU time per
  acquisition, every worker's together (kernel and network stack included);
- server capacity (Redis): 64 tasks of one client process (threads in Python and Java) take
  1,000 distinct locks, each task its own share so that nobody waits, for S seconds; the
  server's CPU (``INFO cpu``, user + system) per cycle and the commands it ran
  (``INFO commandstats``, reset before each run). One Redis core carries 1 / (CPU per cycle)
  cycles per second whatever the clients can send; the cycles per second measured are the
  client's.

The servers run on the first CPU and every client on the others, so that every round trip
crosses CPUs (as it crosses machines in production) and every library meets the same costs.

Writes bench/results/latest.md, bench/results/latest.svg (hand-off distributions, 8
workers) and the summary table between the bench markers in README.md; a run of some
backends only (``--backends postgres,mariadb``) writes bench/results/<backends>.md and
leaves the rest alone.

Usage: bench.py [--seconds S] [--cycles N] [--only SUBSTRING] [--backends B,B…]
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python" / "tests"))
from conftest import MariadbServer, PostgresServer  # noqa: E402 (the tests' own database servers)

RESULTS = ROOT / "bench" / "results"
HOLD_US = 1000
WORKERS = (2, 8, 16)
CAPACITY_TASKS, CAPACITY_LOCKS = 64, 1000
ROUNDS = 3
WARMUP = 1.0
# Uncontended cycles each worker runs before the measured ones: V8 had not yet optimised
# ioredis after 2,000 (node-redlock's CPU per cycle fell from 402 µs in its first 1,000
# cycles to 218, 166, 149, then 107-120 from the 5,000th on); a service runs warm.
UNCONTENDED_WARMUP = 5000
# Servers on the first CPU, every client on the others: a round trip then always crosses
# CPUs, as it crosses machines in production. (Left to the scheduler, a process lands on the
# server's CPU or not, and its round trips differ threefold on this kind of virtual machine.)
ALL_CPUS = sorted(os.sched_getaffinity(0))
SERVER_CPUS = set(ALL_CPUS[:1])
CLIENT_CPUS = set(ALL_CPUS[1:]) or SERVER_CPUS
# Each backend: its name in tables, and the raw round trip a lock operation is measured by.
BACKENDS = {"redis": "Redis", "zk": "ZooKeeper", "postgres": "PostgreSQL", "mariadb": "MariaDB"}
YARDSTICK = {"redis": "evalsha", "zk": "exists", "postgres": "postgres select", "mariadb": "mariadb select"}


def busy_ticks(cpus: set) -> Tuple[int, int]:
    """The busy and total clock ticks of ``cpus`` so far (``/proc/stat``; idle and iowait
    are not busy)."""
    busy = total = 0
    with open("/proc/stat") as f:
        for line in f:
            name, *ticks = line.split()
            if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
                values = [int(t) for t in ticks]
                busy += sum(values) - values[3] - values[4]
                total += sum(values)
    return busy, total


def on_servers() -> None:
    os.sched_setaffinity(0, SERVER_CPUS)


def on_clients() -> None:
    os.sched_setaffinity(0, CLIENT_CPUS)


@dataclass
class Impl:
    label: str
    language: str
    backend: str  # a key of BACKENDS
    command: List[str]
    lib: str
    dlock: bool = False
    skipped: Optional[str] = None
    uncontended: Dict[str, float] = field(default_factory=dict)
    handoff: Dict[int, Dict[str, float]] = field(default_factory=dict)
    distributions: Dict[int, List[float]] = field(default_factory=dict)
    hot: Dict[int, Dict[str, float]] = field(default_factory=dict)
    # Hot lock: the clients' CPUs, busy fraction and µs per acquisition, by W.
    hot_cpu: Dict[int, Dict[str, float]] = field(default_factory=dict)
    capacity: Dict[str, object] = field(default_factory=dict)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pct(xs: List[float], q: float) -> float:
    xs = sorted(xs)
    return xs[int(q * (len(xs) - 1))] if xs else float("nan")


def start_redis(directory: Path) -> Tuple["subprocess.Popen[bytes]", str]:
    port = free_port()
    server = subprocess.Popen(
        ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no", "--dir", str(directory)],
        stdout=subprocess.DEVNULL, preexec_fn=on_servers,
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return server, f"redis://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.05)
    server.kill()
    raise RuntimeError("redis-server did not start")


def start_zookeeper(directory: Path) -> Tuple["subprocess.Popen[bytes]", str]:
    port = free_port()
    (directory / "data").mkdir()
    config = directory / "zoo.cfg"
    config.write_text(
        f"tickTime=2000\ninitLimit=10\nsyncLimit=5\ndataDir={directory / 'data'}\nclientPort={port}\n"
        "clientPortAddress=127.0.0.1\nadmin.enableServer=false\n4lw.commands.whitelist=*\nmaxClientCnxns=0\n"
    )
    server = subprocess.Popen(
        ["java", "-Xmx512m", "-cp", "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar",
         "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(config)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=on_servers,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"srvr")
                if b"Mode:" in s.recv(4096):
                    return server, f"zk://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.1)
    server.kill()
    raise RuntimeError("ZooKeeper did not start")


def pin_to_servers(pid: int) -> None:
    """Moves a running server (every thread of it) to the servers' CPU; its later threads and
    children inherit that."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        os.sched_setaffinity(int(task.name), SERVER_CPUS)


def start_databases(directory: Path) -> Tuple[PostgresServer, MariadbServer]:
    postgres = PostgresServer()
    pin_to_servers(int((postgres.data / "postmaster.pid").read_text().split()[0]))
    (directory / "mariadb").mkdir()
    mariadb = MariadbServer(directory / "mariadb")
    pin_to_servers(mariadb.process.pid)
    return postgres, mariadb


def implementations(python: str) -> List[Impl]:
    rust = [str(ROOT / "target" / "release" / "worker")]
    py = [python, str(ROOT / "bench" / "python" / "worker.py")]
    node = ["node", str(ROOT / "bench" / "node" / "worker.mjs")]
    jar = ROOT / "bench" / "java" / "target" / "worker.jar"
    java = ["java", "-Xmx256m", "-XX:+UseSerialGC", "-jar", str(jar)]
    impls = [
        Impl("dlock", "Rust", "redis", rust, "dlock", dlock=True),
        Impl("dlock, Wasm engine", "Rust", "redis", rust, "dlock-wasm", dlock=True),
        Impl("dlock", "Python", "redis", py, "dlock", dlock=True),
        Impl("dlock", "Node", "redis", node, "dlock", dlock=True),
        Impl("rslock", "Rust", "redis", rust, "rslock"),
        Impl("redis-py Lock", "Python", "redis", py, "redis-py"),
        Impl("python-redis-lock", "Python", "redis", py, "python-redis-lock"),
        Impl("pottery Redlock", "Python", "redis", py, "pottery"),
        Impl("node-redlock", "Node", "redis", node, "node-redlock"),
        Impl("Redisson RLock", "Java", "redis", java, "redisson"),
        Impl("dlock", "Rust", "zk", rust, "dlock", dlock=True),
        Impl("dlock", "Python", "zk", py, "dlock", dlock=True),
        Impl("kazoo Lock", "Python", "zk", py, "kazoo"),
        Impl("Curator InterProcessMutex", "Java", "zk", java, "curator"),
    ]
    for backend, yardstick in (("postgres", "pg_advisory_lock"), ("mariadb", "GET_LOCK")):
        impls += [
            Impl("dlock", "Rust", backend, rust, "dlock", dlock=True),
            Impl("dlock", "Python", backend, py, "dlock", dlock=True),
            Impl("dlock", "Node", backend, node, "dlock", dlock=True),
            Impl(f"{yardstick} (session lock)", "Rust", backend, rust, yardstick),
            Impl("JdbcLockRegistry", "Java", backend, java, "jdbc-lock-registry"),
            Impl("ShedLock (tried every 100 ms)", "Java", backend, java, "shedlock"),
        ]
    if not jar.exists():
        for impl in impls:
            if impl.language == "Java":
                impl.skipped = "the JVM worker was not built (Maven could not fetch its libraries)"
    return impls


def run_json(command: List[str], timeout: float) -> dict:
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, preexec_fn=on_clients)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:4])}…: exit {done.returncode}: {done.stderr.strip()[-500:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def uncontended(impl: Impl, url: str, cycles: int) -> None:
    """One round: N cycles in a fresh process. The best round (lowest p50) is kept."""
    name = f"bench-solo-{impl.lib}-{impl.language}".lower()
    command = impl.command + ["uncontended", impl.lib, url, name, str(cycles), str(UNCONTENDED_WARMUP)]
    result = run_json(command, timeout=600)
    samples = [s / 1e6 for s in result["samples"]]
    measured = {"p50": pct(samples, 0.5), "p99": pct(samples, 0.99), "rate": len(samples) / (result["total"] / 1e9)}
    # The client's CPU per cycle (every thread of its process, µs): what the library costs the
    # machine, and on the quiet machine a bench wants far steadier from run to run than a
    # latency. The least of the rounds.
    least = {"cpu": result["cpu"] / 1e3 / len(samples)}
    # Node's workers also give JavaScript's own thread's CPU time: what a cycle takes from
    # the event loop, where the service's requests run.
    if result.get("thread") is not None:
        least["thread"] = result["thread"] / 1e3 / len(samples)
    least = {key: min(value, impl.uncontended.get(key, value)) for key, value in least.items()}
    if not impl.uncontended or measured["p50"] < impl.uncontended["p50"]:
        impl.uncontended = measured
    impl.uncontended.update(least)


def round_trips(urls: List[str], rtt: Dict[str, float]) -> None:
    """Raw round trips from Rust; the lowest p50 of all measurements is kept."""
    for url in urls:
        for key, samples in run_json([str(ROOT / "target" / "release" / "worker"), "rtt", url, "5000"], 600).items():
            rtt[key] = min(rtt.get(key, float("inf")), pct([s / 1e6 for s in samples], 0.5))


def handoffs(timelines: List[List[Tuple[int, int, int]]]) -> Tuple[List[float], List[int]]:
    """Hand-off latencies (ms) and acquisitions per worker, from (requested, acquired,
    released) timelines."""
    cycles = sorted((acq, rel) for timeline in timelines for _, acq, rel in timeline)
    requests = sorted(req for timeline in timelines for req, _, _ in timeline)
    acquired = sorted(acq for timeline in timelines for _, acq, _ in timeline)
    latencies = []
    for (_, released), (next_acquired, _) in zip(cycles, cycles[1:]):
        # Someone else was waiting when the lock was released: requested before, not yet in.
        waiting = bisect.bisect_left(requests, released) - bisect.bisect_right(acquired, released)
        if waiting > 0 and next_acquired >= released:
            latencies.append((next_acquired - released) / 1e6)
    return latencies, [len(t) for t in timelines]


def contend(impl: Impl, url: str, workers: int, seconds: float, hot: bool = False) -> None:
    """W processes on one lock: each holds it 1 ms and works W ms outside (a hot lock: 0 and
    0). Fills ``impl.handoff[W]`` (``impl.hot[W]``)."""
    directory = Path(tempfile.mkdtemp(prefix="dlock-bench-"))
    name = f"bench-{'hot' if hot else 'handoff'}-{impl.lib}-{impl.language}-{workers}".lower()
    hold_us, outside_us = (0, 0) if hot else (HOLD_US, HOLD_US * workers)
    procs = []
    try:
        for w in range(workers):
            out = directory / f"worker-{w}"
            procs.append(subprocess.Popen(
                impl.command + ["contend", impl.lib, url, name, str(out), str(WARMUP + seconds), str(hold_us), str(outside_us)],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=on_clients,
            ))
        deadline = time.monotonic() + 120
        while not all((directory / f"worker-{w}.ready").exists() for w in range(workers)):
            for p in procs:
                if p.poll() is not None:
                    raise RuntimeError(f"a worker exited before starting: {p.stderr.read().decode()[-500:] if p.stderr else ''}")
            if time.monotonic() > deadline:
                raise RuntimeError("workers not ready after 120 s")
            time.sleep(0.02)
        go = time.monotonic_ns()
        (directory / "go").write_text("")
        # The clients' CPUs over the measured seconds (hot lock): every worker at once, so the
        # CPU time one acquisition takes from the clients, whichever process spends it.
        if hot:
            time.sleep(max(0.0, go / 1e9 + WARMUP - time.monotonic()))
            before = busy_ticks(CLIENT_CPUS)
            time.sleep(max(0.0, go / 1e9 + WARMUP + seconds - time.monotonic()))
            after = busy_ticks(CLIENT_CPUS)
        for p in procs:
            p.wait(timeout=seconds + 120)
            if p.returncode != 0:
                raise RuntimeError(f"a worker failed: {p.stderr.read().decode()[-500:] if p.stderr else ''}")
        timelines = [
            [tuple(int(x) for x in line.split()) for line in (directory / f"worker-{w}").read_text().splitlines()]
            for w in range(workers)
        ]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        shutil.rmtree(directory, ignore_errors=True)
    # Only cycles requested after the warm-up count (JIT compilers, connection pools).
    start = go + int(WARMUP * 1e9)
    timelines = [[c for c in timeline if c[0] >= start] for timeline in timelines]
    latencies, counts = handoffs(timelines)  # type: ignore[arg-type]
    waits = [(acq - req) / 1e6 for timeline in timelines for req, acq, _ in timeline]
    holds = [(rel - acq) / 1e6 for timeline in timelines for _, acq, rel in timeline]
    if hot:
        busy, total = after[0] - before[0], after[1] - before[1]
        impl.hot_cpu[workers] = {
            "busy": busy / max(total, 1),
            "per acquisition": busy / os.sysconf("SC_CLK_TCK") / max(sum(counts), 1) * 1e6,
        }
    (impl.hot if hot else impl.handoff)[workers] = {
        "acquisitions": sum(counts),
        "rate": sum(counts) / seconds,
        "p50": pct(latencies, 0.5),
        "p99": pct(latencies, 0.99),
        "wait p50": pct(waits, 0.5),
        "wait p99": pct(waits, 0.99),
        "samples": len(latencies),
        "fairness": max(counts) / max(min(counts), 1),
        "hold p50": pct(holds, 0.5),
    }
    if not hot:
        impl.distributions[workers] = latencies


def server_capacity(impl: Impl, url: str, seconds: float) -> None:
    """64 tasks, 1,000 locks, nobody waiting: the cycles, and what they cost redis-server."""
    import redis  # in the bench's venv (redis-py is a peer)

    server = redis.Redis.from_url(url)

    def cpu() -> float:
        info = server.info("cpu")
        return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])

    server.config_resetstat()
    before = cpu()
    prefix = f"bench-capacity-{impl.lib}-{impl.language}".lower()
    result = run_json(
        impl.command + ["capacity", impl.lib, url, prefix, str(seconds), str(CAPACITY_TASKS), str(CAPACITY_LOCKS)],
        timeout=seconds + 300,
    )
    used = cpu() - before
    stats = server.info("commandstats")
    server.close()
    cycles = int(result["cycles"])
    commands = sorted(
        ((k.removeprefix("cmdstat_"), v) for k, v in stats.items() if k not in ("cmdstat_info", "cmdstat_config|resetstat")),
        key=lambda kv: -float(kv[1]["usec"]),
    )
    impl.capacity = {
        "rate": cycles / float(result["seconds"]),
        "cpu per cycle": used / max(cycles, 1) * 1e6,
        "server busy": used / float(result["seconds"]),
        "commands": ", ".join(
            f"{name} ×{int(v['calls']) / max(cycles, 1):.2f} ({float(v['usec_per_call']):.1f} µs)" for name, v in commands
        ),
    }


def version(command: List[str], pattern: str = r"(\d+\.\d+(\.\d+)?)") -> str:
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=30)
        m = re.search(pattern, out.stdout + out.stderr)
        return m.group(1) if m else "?"
    except (OSError, subprocess.TimeoutExpired):
        return "?"


def machine() -> str:
    cpu = "?"
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    redis = version(["redis-server", "--version"], r"v=(\S+)")
    java = version(["java", "-version"], r'version "(\S+)"')
    return (
        f"{platform.system()} {platform.release()}, {cpu}, {os.cpu_count()} cores; "
        f"redis-server {redis}, ZooKeeper 3.8 (Debian), rustc {version(['rustc', '--version'])}, "
        f"Python {platform.python_version()}, Node {version(['node', '--version'])}, Java {java}"
    )


def fmt(x: float, digits: int = 3) -> str:
    return "—" if x != x else f"{x:.{digits}f}"


def report(impls: List[Impl], rtt: Dict[str, float], seconds: float, cycles: int) -> Tuple[str, str]:
    def find(label: str, language: str, backend: str) -> Optional[Impl]:
        return next((i for i in impls if (i.label, i.language, i.backend) == (label, language, backend) and not i.skipped), None)

    rust = find("dlock", "Rust", "redis")
    evalsha = rtt.get("evalsha", float("nan"))
    # dlock's own two scripts without its client: what the server and the wire take.
    scripts = rtt.get("dlock scripts", float("nan"))

    def yard(backend: str) -> float:
        return rtt.get(YARDSTICK[backend], float("nan"))
    lines = [
        f"# dlock next to its peers ({time.strftime('%Y-%m-%d')})",
        "",
        f"Machine: {machine()}.",
        "One redis-server, one ZooKeeper, one PostgreSQL (`fsync=off`, as the tests run it) and one MariaDB (its "
        "defaults: a commit waits for its log flush) on loopback, started by `just bench` and pinned to the first CPU, "
        "every client process on the other CPUs; every library with its defaults; "
        f"{cycles} uncontended cycles per library and round after {UNCONTENDED_WARMUP:,} unmeasured ones, best of {ROUNDS} rounds; {seconds:g} s per contended row after {WARMUP:g} s of warm-up, each worker holding 1 ms (spinning) and working "
        "W ms outside the lock between cycles.",
        "",
        "## Round trips (the yardstick, from Rust)",
        "",
        "| operation | p50 (ms) |",
        "| --- | ---: |",
        f"| Redis PING | {fmt(rtt.get('ping', float('nan')))} |",
        f"| Redis EVALSHA `return 1` | {fmt(evalsha)} |",
        f"| Redis: dlock's ACQUIRE + RELEASE scripts, one cycle on a bare redis-rs connection | {fmt(scripts)} |",
        f"| ZooKeeper exists | {fmt(rtt.get('exists', float('nan')))} |",
        f"| PostgreSQL `SELECT 1` | {fmt(rtt.get('postgres select', float('nan')))} |",
        f"| MariaDB `SELECT 1` | {fmt(rtt.get('mariadb select', float('nan')))} |",
        "",
        "## Uncontended acquire + release",
        "",
        "Client CPU: the worker process's CPU time (user + system, every thread) over the measured cycles, per "
        "cycle, the least of the rounds.",
        "",
        "| library | language | backend | p50 (ms) | p99 (ms) | cycles/s | p50 / 2 round trips | p50 / dlock (same language, else Rust; same backend) | client CPU per cycle (µs) | client CPU / dlock's (same language, else Rust; same backend) |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for impl in impls:
        if impl.skipped or not impl.uncontended:
            continue
        u = impl.uncontended
        base = find("dlock", impl.language, impl.backend) or find("dlock", "Rust", impl.backend)
        two = 2 * yard(impl.backend)
        vs = u["p50"] / base.uncontended["p50"] if base and base.uncontended else float("nan")
        cpu_vs = u["cpu"] / base.uncontended["cpu"] if base and base.uncontended else float("nan")
        lines.append(
            f"| {impl.label} | {impl.language} | {BACKENDS[impl.backend]} | {fmt(u['p50'])} | "
            f"{fmt(u['p99'])} | {u['rate']:.0f} | {fmt(u['p50'] / two, 2)} | {fmt(vs, 2)} | "
            f"{u['cpu']:.0f} | {fmt(cpu_vs, 2)} |"
        )
    threads = [i for i in impls if not i.skipped and "thread" in i.uncontended]
    if threads:
        lines += [
            "",
            "JavaScript's thread: the CPU time of Node's own thread (Linux `schedstat`) per cycle, the least of the "
            "rounds: what a cycle takes from the event loop that runs the service's requests. dlock's I/O and engine "
            "run on the addon's runtime thread; node-redlock's on JavaScript's.",
            "",
            "| library | backend | JavaScript's thread CPU per cycle (µs) | client CPU per cycle (µs) |",
            "| --- | --- | ---: | ---: |",
        ]
        lines += [
            f"| {i.label} | {BACKENDS[i.backend]} | {i.uncontended['thread']:.0f} | {i.uncontended['cpu']:.0f} |"
            for i in threads
        ]
    lines += [
        "",
        "## Contended hand-off between processes",
        "",
        "Hand-off: from a release, while another process waited, to the next acquisition. Wait: from asking for the "
        "lock to getting it.",
        "",
        "| library | language | backend | workers | acquisitions | hand-off p50 (ms) | p99 (ms) | p50 / dlock Rust p50 | p50 / round trip | wait p50 (ms) | wait p99 (ms) | fairness max/min | hold p50 (ms) |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for workers in WORKERS:
        for impl in impls:
            h = impl.handoff.get(workers)
            if impl.skipped or not h:
                continue
            base = find("dlock", "Rust", impl.backend)
            base_p50 = base.handoff[workers]["p50"] if base and workers in base.handoff else float("nan")
            lines.append(
                f"| {impl.label} | {impl.language} | {BACKENDS[impl.backend]} | {workers} | "
                f"{h['acquisitions']:.0f} | {fmt(h['p50'])} | {fmt(h['p99'])} | {fmt(h['p50'] / base_p50, 1)} | "
                f"{fmt(h['p50'] / yard(impl.backend), 2)} | {fmt(h['wait p50'], 2)} | {fmt(h['wait p99'], 1)} | {fmt(h['fairness'], 2)} | "
                f"{fmt(h['hold p50'], 3)} |"
            )
    lines += [
        "",
        "## A hot lock",
        "",
        "W processes take one lock over and over, holding it 0 ms and working 0 ms outside it. Client CPUs: "
        f"how busy the {len(CLIENT_CPUS)} CPU(s) the workers run on were over the measured seconds "
        "(`/proc/stat`; 1.00 = saturated, then the clients are the limit), and that CPU time per acquisition, "
        "all workers' and the kernel's for them together.",
        "",
        "| library | language | backend | workers | acquisitions/s | / dlock Rust | hand-off p50 (ms) | p99 (ms) | wait p99 (ms) | fairness max/min | client CPUs busy | client CPU per acquisition (µs) |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for workers in WORKERS:
        for impl in impls:
            h = impl.hot.get(workers)
            if impl.skipped or not h:
                continue
            cpu = impl.hot_cpu.get(workers, {})
            base = find("dlock", "Rust", impl.backend)
            base_rate = base.hot[workers]["rate"] if base and workers in base.hot else float("nan")
            lines.append(
                f"| {impl.label} | {impl.language} | {BACKENDS[impl.backend]} | {workers} | {h['rate']:.0f} | "
                f"{fmt(h['rate'] / base_rate, 2)} | {fmt(h['p50'])} | {fmt(h['p99'])} | {fmt(h['wait p99'], 1)} | {fmt(h['fairness'], 2)} | "
                f"{fmt(cpu.get('busy', float('nan')), 2)} | {fmt(cpu.get('per acquisition', float('nan')), 0)} |"
            )
    capacity = [i for i in impls if i.capacity and not i.skipped]
    if capacity:
        lines += [
            "",
            "## Server capacity (Redis)",
            "",
            f"{CAPACITY_TASKS} tasks of one client process take {CAPACITY_LOCKS:,} distinct locks, nobody waiting. "
            "Server CPU: redis-server's user + system time per acquire + release cycle; one Redis core carries "
            "1 s / that. Server busy: its CPU time over the run's time (1.0 = the core was saturated; below it, the "
            "client was the limit). Commands: every command per cycle, with the server's time per call, most time first; "
            "a script's (fcall, evalsha) time includes that of the commands it runs.",
            "",
            "| library | language | cycles/s (client) | server busy | server CPU per cycle (µs) | cycles/s one core carries | / cheapest peer | commands per cycle |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |",
        ]
        peers = [i.capacity["cpu per cycle"] for i in capacity if not i.dlock]
        cheapest = min(peers) if peers else float("nan")
        for impl in capacity:
            c = impl.capacity
            lines.append(
                f"| {impl.label} | {impl.language} | {c['rate']:.0f} | {fmt(c['server busy'], 2)} | {fmt(c['cpu per cycle'], 1)} | "
                f"{1e6 / c['cpu per cycle']:.0f} | {fmt(cheapest / c['cpu per cycle'], 2)} | {c['commands']} |"
            )
    skipped = [f"- {i.label} ({i.language}): {i.skipped}" for i in impls if i.skipped]
    if skipped:
        lines += ["", "Skipped:", ""] + skipped

    # The targets (issues 12 and 26), read off the numbers above.
    def ratio(a: Optional[Impl], b: Optional[Impl], key: str = "p50", workers: Optional[int] = None) -> float:
        if not a or not b:
            return float("nan")
        if workers is None:
            return a.uncontended.get(key, float("nan")) / b.uncontended.get(key, float("nan"))
        return a.handoff.get(workers, {}).get(key, float("nan")) / b.handoff.get(workers, {}).get(key, float("nan"))

    def ratio_to(p50: float, b: Optional[Impl]) -> float:
        return p50 / b.uncontended.get("p50", float("nan")) if b else float("nan")

    if not rust:  # the targets are Redis's
        return "\n".join(lines) + "\n", ""
    fairness = max((i.handoff[w]["fairness"] for i in impls if i.dlock for w in i.handoff), default=float("nan"))
    hot_peers = [i for i in impls if not i.dlock and i.backend == "redis" and 8 in i.hot]
    best_hot = max(hot_peers, key=lambda i: i.hot[8]["rate"], default=None)
    peer_hot = best_hot.hot[8]["rate"] if best_hot else float("nan")

    def hot_cpu(impl: Optional[Impl]) -> float:
        return impl.hot_cpu.get(8, {}).get("per acquisition", float("nan")) if impl else float("nan")

    hot_fairness = max((i.hot[w]["fairness"] for i in impls if i.dlock and i.backend == "redis" for w in i.hot), default=float("nan"))
    dlock_capacity = max((i.capacity["cpu per cycle"] for i in impls if i.dlock and i.capacity), default=float("nan"))
    peer_capacity = min((i.capacity["cpu per cycle"] for i in impls if not i.dlock and i.capacity), default=float("nan"))
    targets = [
        ("uncontended Rust cycle / rslock cycle", ratio(rust, find("rslock", "Rust", "redis")), "≤ 1.05", lambda x: x <= 1.05),
        ("uncontended Rust cycle / 2 EVALSHA round trips", rust.uncontended["p50"] / (2 * evalsha) if rust else float("nan"), "≤ 1.20", lambda x: x <= 1.20),
        ("(where it goes) dlock's two functions by FCALL on a bare connection / 2 EVALSHA of `return 1`: the server's part", scripts / (2 * evalsha), "–", lambda x: True),
        ("(where it goes) uncontended Rust cycle / dlock's two functions on a bare connection: the client's part", rust.uncontended["p50"] / scripts, "–", lambda x: True),
        ("(where it goes) dlock's two functions on a bare connection / rslock cycle: protocol v1's scripts with no client of dlock's", ratio_to(scripts, find("rslock", "Rust", "redis")), "–", lambda x: True),
        ("Wasm engine cycle / native cycle", ratio(find("dlock, Wasm engine", "Rust", "redis"), rust), "≤ 1.05", lambda x: x <= 1.05),
        ("(where it goes) client CPU per cycle, Wasm engine / native", ratio(find("dlock, Wasm engine", "Rust", "redis"), rust, "cpu"), "–", lambda x: True),
        ("Node cycle / node-redlock cycle", ratio(find("dlock", "Node", "redis"), find("node-redlock", "Node", "redis")), "≤ 0.95", lambda x: x <= 0.95),
        ("(where it goes) client CPU per cycle, dlock Node / node-redlock", ratio(find("dlock", "Node", "redis"), find("node-redlock", "Node", "redis"), "cpu"), "–", lambda x: True),
        ("(where it goes) JavaScript's thread CPU per cycle, dlock Node / node-redlock", ratio(find("dlock", "Node", "redis"), find("node-redlock", "Node", "redis"), "thread"), "–", lambda x: True),
        ("(where it goes) dlock's two functions on a bare connection / node-redlock cycle: protocol v1's scripts with no client of dlock's", ratio_to(scripts, find("node-redlock", "Node", "redis")), "–", lambda x: True),
        ("hot lock, 8 processes: dlock Rust acquisitions/s / best peer's", rust.hot.get(8, {}).get("rate", float("nan")) / peer_hot, "≥ 2", lambda x: x >= 2),
        ("(where it goes) hot lock, 8 processes: client CPU per acquisition, dlock Rust / best peer's", hot_cpu(rust) / hot_cpu(best_hot), "–", lambda x: True),
        ("hot lock: dlock fairness, worst row (Redis)", hot_fairness, "≤ 1.05", lambda x: x <= 1.05),
        ("server capacity: dlock cycles per core / cheapest peer's", peer_capacity / dlock_capacity, "≥ 0.7", lambda x: x >= 0.7),
        ("hand-off p50 / EVALSHA round trip (Rust, 8 workers)", rust.handoff[8]["p50"] / evalsha if rust and 8 in rust.handoff else float("nan"), "≤ 1", lambda x: x <= 1),
        ("redis-py Lock hand-off / dlock (Python, 8 workers)", ratio(find("redis-py Lock", "Python", "redis"), find("dlock", "Python", "redis"), workers=8), "≥ 50", lambda x: x >= 50),
        ("python-redis-lock hand-off / dlock (Python, 8 workers)", ratio(find("python-redis-lock", "Python", "redis"), find("dlock", "Python", "redis"), workers=8), "> 1", lambda x: x > 1),
        ("Python cycle / Rust cycle", ratio(find("dlock", "Python", "redis"), rust), "≤ 1.10", lambda x: x <= 1.10),
        ("(where it goes) client CPU per cycle, Python / Rust", ratio(find("dlock", "Python", "redis"), rust, "cpu"), "–", lambda x: True),
        ("Node cycle / Rust cycle", ratio(find("dlock", "Node", "redis"), rust), "≤ 1.10", lambda x: x <= 1.10),
        ("(where it goes) client CPU per cycle, Node / Rust", ratio(find("dlock", "Node", "redis"), rust, "cpu"), "–", lambda x: True),
        ("dlock fairness, worst row", fairness, "≤ 1.2", lambda x: x <= 1.2),
    ]
    lines += ["", "## Targets", "", "| target | measured | goal | met |", "| --- | ---: | ---: | --- |"]
    for what, value, goal, ok in targets:
        met = "–" if goal == "–" else ("yes" if value == value and ok(value) else "no")
        lines.append(f"| {what} | {fmt(value, 2)} | {goal} | {met} |")
    full = "\n".join(lines) + "\n"

    summary = [
        f"Measured by `just bench` on {time.strftime('%Y-%m-%d')} ({machine()}); full table: "
        "[bench/results/latest.md](bench/results/latest.md).",
        "",
        "| library | language | backend | uncontended p50 (ms) | client CPU per cycle (µs) | hand-off p50, 8 workers (ms) | wait p99, 8 workers (ms) | fairness, 8 workers | hot lock, 8 workers (acquisitions/s) |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for impl in impls:
        if impl.skipped:
            continue
        h = impl.handoff.get(8, {})
        summary.append(
            f"| {impl.label} | {impl.language} | {BACKENDS[impl.backend]} | "
            f"{fmt(impl.uncontended.get('p50', float('nan')))} | {impl.uncontended.get('cpu', float('nan')):.0f} | "
            f"{fmt(h.get('p50', float('nan')))} | "
            f"{fmt(h.get('wait p99', float('nan')), 1)} | {fmt(h.get('fairness', float('nan')), 2)} | "
            f"{impl.hot.get(8, {}).get('rate', float('nan')):.0f} |"
        )
    return full, "\n".join(summary) + "\n"


def plot(impls: List[Impl]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot")
        return
    backends = [b for b in BACKENDS if any(i.backend == b and i.distributions.get(8) for i in impls)]
    if not backends:
        return
    fig, axes = plt.subplots(1, len(backends), figsize=(6 * len(backends), 4.8), squeeze=False)
    for ax, backend in zip(axes[0], backends):
        title = BACKENDS[backend]
        for impl in impls:
            xs = sorted(x for x in impl.distributions.get(8, []) if x > 0)
            if impl.backend == backend and xs:
                style = "-" if impl.dlock else "--"
                ax.plot(xs, [i / len(xs) for i in range(len(xs))], style, label=f"{impl.label} ({impl.language})")
        ax.set_xscale("log")
        ax.set_xlabel("hand-off latency (ms, log scale)")
        ax.set_ylabel("fraction of hand-offs")
        ax.set_title(f"Hand-off between 8 processes, {title}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(RESULTS / "latest.svg")
    print(f"plot: {RESULTS / 'latest.svg'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--cycles", type=int, default=2000)
    parser.add_argument("--only", default="", help="run only libraries whose label contains this")
    parser.add_argument("--backends", default=",".join(BACKENDS), help="comma-separated: " + ", ".join(BACKENDS))
    args = parser.parse_args()
    backends = [b for b in BACKENDS if b in args.backends.split(",")]
    impls = [
        i for i in implementations(sys.executable)
        if i.backend in backends and args.only.lower() in f"{i.label} {i.language}".lower()
    ]
    directory = Path(tempfile.mkdtemp(prefix="dlock-bench-servers-"))
    servers: List["subprocess.Popen[bytes]"] = []
    databases: List[object] = []
    urls: Dict[str, str] = {}
    try:
        if "redis" in backends:
            (directory / "redis").mkdir()
            server, urls["redis"] = start_redis(directory / "redis")
            servers.append(server)
        if "zk" in backends:
            (directory / "zk").mkdir()
            server, urls["zk"] = start_zookeeper(directory / "zk")
            servers.append(server)
        if "postgres" in backends or "mariadb" in backends:
            postgres, mariadb = start_databases(directory)
            databases += [postgres, mariadb]
            urls["postgres"], urls["mariadb"] = postgres.url, mariadb.url
        urls = {b: u for b, u in urls.items() if b in backends}
        rtt: Dict[str, float] = {}
        round_trips(list(urls.values()), rtt)
        for impl in impls:
            if impl.skipped:
                print(f"skip {impl.label} ({impl.language}): {impl.skipped}", flush=True)
        # Rounds take turns across libraries, so that a noisy moment of the machine does not
        # land on one library's every measurement.
        for _ in range(ROUNDS):
            for impl in impls:
                if impl.skipped:
                    continue
                try:
                    uncontended(impl, urls[impl.backend], args.cycles)
                except (RuntimeError, subprocess.TimeoutExpired, ValueError) as e:
                    impl.skipped = f"its worker failed: {e}"
                    print(f"skip {impl.label} ({impl.language}): {impl.skipped}", flush=True)
            round_trips(list(urls.values()), rtt)
        print("round trips (ms):", {k: round(v, 4) for k, v in rtt.items()}, flush=True)
        for impl in impls:
            if impl.uncontended:
                print(f"{impl.label:>30} {impl.language:>6} {impl.backend:>8}: uncontended p50 {impl.uncontended['p50']:.3f} ms", flush=True)
        for workers in WORKERS:
            for impl in impls:
                if impl.skipped:
                    continue
                try:
                    contend(impl, urls[impl.backend], workers, args.seconds)
                except (RuntimeError, subprocess.TimeoutExpired, ValueError) as e:
                    print(f"{impl.label} ({impl.language}) x{workers} failed: {e}", flush=True)
                    continue
                h = impl.handoff[workers]
                print(
                    f"{impl.label:>30} {impl.language:>6} {impl.backend:>8} x{workers:<2}: {h['acquisitions']:6.0f} acquisitions, "
                    f"hand-off p50 {fmt(h['p50'])} ms p99 {fmt(h['p99'])} ms ({h['samples']} hand-offs), fairness {h['fairness']:.2f}",
                    flush=True,
                )
        for workers in WORKERS:
            for impl in impls:
                if impl.skipped:
                    continue
                try:
                    contend(impl, urls[impl.backend], workers, args.seconds, hot=True)
                except (RuntimeError, subprocess.TimeoutExpired, ValueError) as e:
                    print(f"{impl.label} ({impl.language}) hot x{workers} failed: {e}", flush=True)
                    continue
                h = impl.hot[workers]
                print(
                    f"{impl.label:>30} {impl.language:>6} {impl.backend:>8} hot x{workers:<2}: {h['rate']:7.0f} acquisitions/s, "
                    f"hand-off p50 {fmt(h['p50'])} ms p99 {fmt(h['p99'])} ms, fairness {h['fairness']:.2f}",
                    flush=True,
                )
        for impl in impls:
            if impl.skipped or impl.backend != "redis":
                continue
            try:
                server_capacity(impl, urls["redis"], args.seconds)
            except (RuntimeError, subprocess.TimeoutExpired, ValueError) as e:
                print(f"{impl.label} ({impl.language}) capacity failed: {e}", flush=True)
                continue
            c = impl.capacity
            print(
                f"{impl.label:>30} {impl.language:>6} capacity: {c['rate']:7.0f} cycles/s, "
                f"server {c['cpu per cycle']:.1f} µs per cycle ({c['commands']})",
                flush=True,
            )
    finally:
        for server in servers:
            server.kill()
            server.wait()
        for database in databases:
            database.stop()  # type: ignore[attr-defined]
        shutil.rmtree(directory, ignore_errors=True)
    full, summary = report(impls, rtt, args.seconds, args.cycles)
    RESULTS.mkdir(exist_ok=True)
    every = len(backends) == len(BACKENDS)
    out = RESULTS / ("latest.md" if every else "-".join(backends) + ".md")
    out.write_text(full)
    print(full)
    print(f"written: {out}")
    if every:
        plot(impls)
    if every and not args.only:
        readme = ROOT / "README.md"
        text = readme.read_text()
        start, end = "<!-- bench:start -->\n", "<!-- bench:end -->"
        if start in text and end in text:
            head, rest = text.split(start, 1)
            readme.write_text(head + start + summary + rest[rest.index(end):])
            print("README.md: benchmark table updated")


if __name__ == "__main__":
    main()
