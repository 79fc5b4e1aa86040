"""One contender of the live mixed-language test (contract/tests/contention.rs), in Python.

``contend.py URL NAME DIR LABEL TARGET [lock|rw|sem]`` acquires lock NAME until the counter in
DIR/counter reaches TARGET, starting when DIR/go appears (it writes DIR/LABEL.ready once
connected); each tenure does a fenced read-modify-write of the counter and appends
``token start_ns end_ns outcome`` (CLOCK_MONOTONIC; 0 written, 1 refused as stale, 2 target
reached, 3 a read hold, 4 a permit) to DIR/LABEL.log, as the Rust, Node and Java workers do.
In mode ``rw`` it takes the write hold of read-write lock NAME, and every third time its read
hold; in mode ``sem`` a permit of semaphore NAME (2 permits) TARGET times, each for 5 ms.
"""

import sys
import time
from pathlib import Path

import dlock


def fenced_increment(counter: Path, token: int, target: int) -> int:
    """Writes ``count+1 token`` over ``count last`` (0), unless the token is not newer (1)
    or the count has reached the target (2)."""
    fields = [int(f) for f in counter.read_text().split()] if counter.exists() else []
    count, last = (fields + [0, 0])[:2]
    if token <= last:
        return 1
    if count >= target:
        return 2
    counter.write_text(f"{count + 1} {token}\n")
    return 0


def main() -> None:
    url, name, directory, label, target = sys.argv[1:6]
    mode = sys.argv[6] if len(sys.argv) > 6 else "lock"
    rw = mode == "rw"
    root = Path(directory)
    client = dlock.connect(url)
    if mode == "sem":
        semaphore = client.semaphore(name, permits=2, lease=10.0)
        (root / f"{label}.ready").write_text("")
        while not (root / "go").exists():
            time.sleep(0.001)
        log = []
        for _ in range(int(target)):
            with semaphore as held:
                start = time.monotonic_ns()
                time.sleep(0.005)
                end = time.monotonic_ns()
            log.append(f"{held.fencing_token} {start} {end} 4\n")
        (root / f"{label}.log").write_text("".join(log))
        client.close()
        return
    if rw:
        rw_lock = client.rw_lock(name)
        write, read = rw_lock.write(lease=10.0), rw_lock.read(lease=10.0)
    else:
        write = read = client.lock(name, lease=10.0)
    (root / f"{label}.ready").write_text("")
    while not (root / "go").exists():
        time.sleep(0.001)
    log = []
    outcome = 0
    i = 0
    while outcome != 2:
        reading = rw and i % 3 == 2
        i += 1
        with read if reading else write as held:
            start = time.monotonic_ns()
            result = 3 if reading else fenced_increment(root / "counter", held.fencing_token, int(target))
            end = time.monotonic_ns()
        outcome = outcome if reading else result
        log.append(f"{held.fencing_token} {start} {end} {result}\n")
    (root / f"{label}.log").write_text("".join(log))
    client.close()


if __name__ == "__main__":
    main()
