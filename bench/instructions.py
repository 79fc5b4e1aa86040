"""`just bench-instructions`: the client's CPU per uncontended acquire + release on Redis,
counted in instructions, not timed.

A shared, noisy machine moves every timing of `just bench` by tens of percent from one run
to the next; the instructions a client executes per cycle do not move. Each worker of
`just bench` (same command line, bench/src/bin/worker.rs and bench/python/worker.py) runs
under valgrind's callgrind twice, for N1 and for N2 cycles against one redis-server started
here; (instructions of the second − of the first) / (N2 − N1) is what one cycle costs in
user space, start-up and connection excluded. The kernel's part (system calls, wake-ups)
is not counted: `strace -c` on the same command counts those.

Writes bench/results/instructions.md, and leaves callgrind's files in
target/bench-instructions/ (`callgrind_annotate --inclusive=yes FILE`: where they go). Node is left out: V8's JIT under valgrind measures
valgrind.

Usage: instructions.py [--python PYTHON] [--n1 N] [--n2 N]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import List, Optional, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import ROOT, implementations, machine, start_redis  # noqa: E402

RESULTS = ROOT / "bench" / "results"
# Redis's uncontended peers, and dlock beside them.
LIBRARIES = [
    ("dlock", "Rust"),
    ("dlock, Wasm engine", "Rust"),
    ("rslock", "Rust"),
    ("dlock", "Python"),
    ("redis-py Lock", "Python"),
    ("python-redis-lock", "Python"),
]


def instructions(command: List[str], out: Path) -> int:
    """The instructions callgrind counted for `command` (every thread, user space)."""
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *command],
        capture_output=True, text=True, timeout=3600,
    )
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or not found:
        raise RuntimeError(f"{' '.join(command[:4])}…: exit {done.returncode}: {done.stderr.strip()[-500:]}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python", default=sys.executable, help="the Python with dlock and the peers installed")
    parser.add_argument("--n1", type=int, default=500)
    parser.add_argument("--n2", type=int, default=2500)
    args = parser.parse_args()
    impls = {(i.label, i.language): i for i in implementations(args.python) if i.backend == "redis"}
    rows: List[Tuple[str, str, Optional[int], str]] = []
    profiles = ROOT / "target" / "bench-instructions"
    profiles.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="dlock-instructions-") as tmp:
        server, url = start_redis(Path(tmp))
        try:
            for label, language in LIBRARIES:
                impl = impls[(label, language)]
                try:
                    counts = [
                        instructions(impl.command + ["uncontended", impl.lib, url, f"instructions-{impl.lib}", str(n)],
                                     profiles / f"callgrind.{impl.lib}.{language}.{n}")
                        for n in (args.n1, args.n2)
                    ]
                    per_cycle = (counts[1] - counts[0]) // (args.n2 - args.n1)
                    rows.append((label, language, per_cycle, ""))
                    print(f"{label} ({language}): {per_cycle:,} instructions per cycle", flush=True)
                except (RuntimeError, subprocess.TimeoutExpired) as e:
                    rows.append((label, language, None, str(e)))
                    print(f"{label} ({language}): skipped: {e}", flush=True)
        finally:
            server.kill()
            server.wait()
    lines = [
        "# Client instructions per acquire + release (Redis)",
        "",
        f"Machine: {machine()}.",
        "",
        f"`just bench-instructions`: each worker under callgrind for {args.n1:,} and {args.n2:,} uncontended "
        "cycles against one redis-server; the difference over the extra cycles is one cycle's user-space "
        "instructions in the client (every thread), start-up and connection excluded. Exact from run to "
        "run, unlike the timings of `just bench`; the kernel's part (system calls, wake-ups) is not in it.",
        "",
        "| library | language | instructions per cycle | / peer of the same language |",
        "| --- | --- | ---: | ---: |",
    ]
    peers = {}
    for label, language, count, _ in rows:
        if count is not None and not label.startswith("dlock"):
            peers[language] = min(count, peers.get(language, count))
    for label, language, count, why in rows:
        if count is None:
            lines.append(f"| {label} | {language} | skipped: {why[:120]} | |")
            continue
        peer = peers.get(language)
        ratio = f"{count / peer:.2f}" if peer else "–"
        lines.append(f"| {label} | {language} | {count:,} | {ratio} |")
    (RESULTS / "instructions.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {RESULTS / 'instructions.md'}")


if __name__ == "__main__":
    main()
