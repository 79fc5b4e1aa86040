"""`just bench-instructions`: the client's CPU per uncontended acquire + release on Redis,
counted in instructions, not timed.

A shared, noisy machine moves every timing of `just bench` by tens of percent from one run
to the next; the instructions a client executes per cycle do not move. Each worker of
`just bench` (same command line, bench/src/bin/worker.rs and bench/python/worker.py) runs
under valgrind's callgrind twice, for N1 and for N2 cycles against one redis-server started
here; (instructions of the second − of the first) / (N2 − N1) is what one cycle costs in
user space, start-up and connection excluded. The kernel's part (system calls, wake-ups)
is not counted: `strace -c` on the same command counts those.

Writes bench/results/instructions.md: the count per cycle, and where it goes (each function's
own instructions, by the part of the stack it belongs to: the engine, the client, tokio, the
Redis library, the allocator, the Wasm guest, wasmtime, the interpreter). Leaves
callgrind's files in target/bench-instructions/ (`callgrind_annotate --inclusive=yes FILE`
for the functions). Node is left out: V8's JIT under valgrind measures valgrind.

Usage: instructions.py [--python PYTHON] [--n1 N] [--n2 N]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Tuple

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

# Where a function's own instructions belong, from its callgrind name ("file:function
# [object]"). Rust functions go by the crate their path starts with (`<redis::cmd::Cmd as …>`
# is redis's); generic code of the standard library (collections, formatting, time) is
# `std`'s, whoever instantiated it. Code that wasmtime compiled has no symbol ("???:0x…"):
# that is the Wasm guest, dlock's engine and its translation of inputs and outputs. The
# Python package's native module is stripped (as released): its engine, client, runtime and
# Redis library are one part.
CRATES: Dict[str, str] = {
    "dlock_core": "dlock engine",
    "dlock": "dlock client", "dlock_wasmtime": "dlock client", "dlock_wit_convert": "dlock client",
    "dlock_py": "dlock client",
    "tokio": "async runtime", "tokio_util": "async runtime", "mio": "async runtime",
    "futures_util": "async runtime", "futures_core": "async runtime", "tracing": "async runtime",
    "redis": "Redis library", "combine": "Redis library", "rslock": "Redis library",
    "alloc": "std", "core": "std", "std": "std", "itoa": "std", "bytes": "std",
}
PART_NAMES = ["dlock engine", "Wasm guest (code without a symbol)", "dlock client", "wasmtime", "async runtime", "Redis library",
              "dlock native module",
              "Python interpreter", "allocator", "memory copies", "std", "other (the bench worker, libc)"]


def part_of(function: str) -> str:
    if function.startswith("???:0x") and function.endswith("[???]"):
        return "Wasm guest (code without a symbol)"
    if any(m in function for m in ("malloc.c:", "__rdl_", "__rust_alloc", "__rust_dealloc", "__rust_realloc",
                                   "__rust_no_alloc_shim", "obmalloc.c:")):
        return "allocator"
    if any(m in function for m in ("memmove", "memcpy", "memset", "memcmp", "strlen")):
        return "memory copies"
    if "wasmtime" in function.split(" [")[0] or "cranelift" in function.split(" [")[0]:
        return "wasmtime"
    name = function.split(":", 1)[1] if ":" in function and not function.startswith("<") else function
    crate = re.match(r"[<&*\s(]*(?:mut |const |dyn )?([A-Za-z_][A-Za-z0-9_]*)::", name)
    if crate and crate.group(1) in CRATES:
        return CRATES[crate.group(1)]
    if "_dlock.abi3.so]" in function:
        return "dlock native module"
    if "python3" in function or "libpython" in function:
        return "Python interpreter"
    return PART_NAMES[-1]


def parts(profile: Path) -> Dict[str, int]:
    """Instructions of `profile` by part (each function's own, not what it calls)."""
    done = subprocess.run(
        ["callgrind_annotate", "--inclusive=no", "--threshold=100", str(profile)],
        capture_output=True, text=True, check=True,
    )
    totals: Dict[str, int] = {}
    for line in done.stdout.splitlines():
        found = re.match(r"\s*([\d,]+) \(\s*[\d.]+%\)\s+(.+)", line)
        if found and not found.group(2).startswith("PROGRAM TOTALS"):
            part = part_of(found.group(2))
            totals[part] = totals.get(part, 0) + int(found.group(1).replace(",", ""))
    return totals


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
    split: Dict[Tuple[str, str], Dict[str, float]] = {}
    profiles = ROOT / "target" / "bench-instructions"
    profiles.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="dlock-instructions-") as tmp:
        server, url = start_redis(Path(tmp))
        try:
            for label, language in LIBRARIES:
                impl = impls[(label, language)]
                try:
                    files = [profiles / f"callgrind.{impl.lib}.{language}.{n}" for n in (args.n1, args.n2)]
                    counts = [
                        instructions(impl.command + ["uncontended", impl.lib, url, f"instructions-{impl.lib}", str(n)],
                                     out)
                        for n, out in zip((args.n1, args.n2), files)
                    ]
                    per_cycle = (counts[1] - counts[0]) // (args.n2 - args.n1)
                    first, second = parts(files[0]), parts(files[1])
                    split[(label, language)] = {
                        part: (second.get(part, 0) - first.get(part, 0)) / (args.n2 - args.n1)
                        for part in PART_NAMES
                    }
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
    shown = [part for part in PART_NAMES if any(abs(v.get(part, 0)) >= 500 for v in split.values())]
    lines += [
        "",
        "## Where they go",
        "",
        "Each function's own instructions per cycle, by the part of the client it belongs to "
        "(callgrind's function names; `Wasm guest` is the code wasmtime compiled from dlock.wasm, "
        "the engine and its translation of inputs and outputs). Parts under 500 in every row are "
        "left out, so a row may add up to a little less than its total.",
        "",
        "| library | language | " + " | ".join(shown) + " |",
        "| --- | --- | " + " | ".join("---:" for _ in shown) + " |",
    ]
    for label, language, count, _ in rows:
        if (label, language) in split:
            cells = [f"{split[(label, language)][part]:,.0f}" for part in shown]
            lines.append(f"| {label} | {language} | " + " | ".join(cells) + " |")
    (RESULTS / "instructions.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {RESULTS / 'instructions.md'}")


if __name__ == "__main__":
    main()
