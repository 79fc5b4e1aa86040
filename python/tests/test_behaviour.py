"""What Python users rely on: the GIL, Ctrl-C, fork, and processes."""

from __future__ import annotations

import _thread
import json
import multiprocessing
import os
import threading
import time
from pathlib import Path

import pytest

import dlock
from conftest import RedisServer


def test_the_gil_is_released_while_waiting(redis: RedisServer) -> None:
    client = dlock.connect(redis.url)
    held = client.lock("gil").acquire()
    counter = 0
    stop = threading.Event()

    def spin() -> None:
        nonlocal counter
        while not stop.is_set():
            counter += 1

    thread = threading.Thread(target=spin)
    thread.start()
    before = counter
    with pytest.raises(dlock.LockTimeout):
        client.lock("gil", wait=0.5).acquire()
    during = counter - before
    stop.set()
    thread.join()
    held.release()
    assert during > 10_000, f"the other thread only ran {during} times while we waited"


def test_renewals_go_on_while_another_thread_holds_the_gil(redis: RedisServer) -> None:
    # This thread's blocking call drives the runtime; at its signal tick it needs the GIL,
    # which the other thread holds through one long C call. It must step out of the runtime
    # to wait for it, or the lease runs out unrenewed meanwhile.
    client = dlock.connect(redis.url)
    held = client.lock("gil-held", lease=0.6).acquire()

    def hog() -> None:
        time.sleep(0.1)  # until this thread is in its call (else the test proves nothing)
        sum(range(100_000_000))  # the GIL, ~1.5 s, never let go

    thread = threading.Thread(target=hog)
    thread.start()
    held.wait_lost(timeout=0.5)
    thread.join()
    held.extend(5.0)  # the server's word: LockLost if the lease ran out meanwhile
    held.release()


def test_ctrl_c_interrupts_a_blocking_acquire_and_leaves_the_queue(redis: RedisServer) -> None:
    client = dlock.connect(redis.url)
    held = client.lock("intr").acquire()
    threading.Timer(0.2, _thread.interrupt_main).start()
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        client.lock("intr").acquire()  # would wait forever
    assert time.monotonic() - started < 2
    deadline = time.monotonic() + 2
    while client.status("intr").waiters:
        assert time.monotonic() < deadline, "the interrupted waiter is still queued"
        time.sleep(0.01)
    held.release()
    assert client.status("intr").owner is None


def test_renewals_and_losses_go_on_while_no_call_is_under_way(redis: RedisServer) -> None:
    # A blocking call drives the runtime on the caller's thread; between calls its keeper
    # thread must, or a lock held through plain Python work would expire unrenewed and its
    # loss go unseen. (No on_lost here: its watcher thread is a blocking call.)
    client = dlock.connect(redis.url)
    held = client.lock("kept", lease=1.0).acquire()
    key = "dlock:{kept}:lock"

    def ttl() -> int:
        return int(redis.cli("PTTL", key))

    # From here on, no dlock call: the renewal (the key's time to live going up) and the
    # loss are the keeper's work.
    deadline = time.monotonic() + 30
    last = ttl()
    while (now := ttl()) <= last:
        assert now > 0, "the lock expired unrenewed"
        assert time.monotonic() < deadline, "no renewal"
        last = now
        time.sleep(0.02)
    redis.cli("DEL", key)
    while not held.is_lost:
        assert time.monotonic() < deadline, "the loss was not noticed between calls"
        time.sleep(0.02)
    assert held.lost_reason == "not-owner"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_connects_again_and_works(redis: RedisServer) -> None:
    client = dlock.connect(redis.url)
    with client.lock("fork") as held:
        first = held.fencing_token
    pid = os.fork()
    if pid == 0:  # the child
        code = 1
        try:
            try:
                client.lock("fork").acquire()
            except dlock.DlockError as e:
                if "another process" in str(e):
                    with dlock.connect(redis.url).lock("fork") as child_held:
                        code = 0 if child_held.fencing_token > first else 3
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    with client.lock("fork") as held:
        assert held.fencing_token > first, "the parent's client still works"


def _fenced_worker(url: str, path: str, rounds: int) -> None:
    client = dlock.connect(url)
    for _ in range(rounds):
        with client.lock("counter", lease=5.0) as held:
            state = json.loads(Path(path).read_text())
            assert held.fencing_token > state["token"], "stale fencing token"
            time.sleep(0.001)
            Path(path).write_text(json.dumps({"value": state["value"] + 1, "token": held.fencing_token}))


def test_mutual_exclusion_across_processes_with_a_fenced_counter(redis: RedisServer, tmp_path: Path) -> None:
    path = tmp_path / "counter.json"
    path.write_text(json.dumps({"value": 0, "token": 0}))
    ctx = multiprocessing.get_context("spawn")
    workers = [ctx.Process(target=_fenced_worker, args=(redis.url, str(path), 20)) for _ in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
        assert w.exitcode == 0
    state = json.loads(path.read_text())
    assert state["value"] == 80, "every increment counted, none lost"
