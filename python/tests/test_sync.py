"""The blocking API against a real redis-server."""

from __future__ import annotations

import math
import re
import threading
import time
from typing import List

import pytest

import dlock
from conftest import RedisServer


def test_with_lock_gives_increasing_fencing_tokens(redis: RedisServer) -> None:
    client = dlock.connect(redis.url)
    tokens = []
    before_ms = time.time_ns() // 1_000_000
    for _ in range(3):
        with client.lock("orders/42", lease=10.0, wait=5.0) as held:
            assert isinstance(held.fencing_token, int)
            tokens.append(held.fencing_token)
    after_ms = time.time_ns() // 1_000_000
    assert tokens[0] < tokens[1] < tokens[2]
    # Each token is at least the server's clock in ms × 1000 (the server runs on this machine).
    assert (before_ms - 1000) * 1000 <= tokens[0] <= (after_ms + 1000) * 1000
    assert client.status("orders/42").owner is None


def test_try_acquire_and_wait_timeout(redis: RedisServer) -> None:
    a, b = dlock.connect(redis.url), dlock.connect(redis.url)
    held = a.lock("x").acquire()
    assert b.lock("x").try_acquire() is None
    started = time.monotonic()
    with pytest.raises(dlock.LockTimeout):
        b.lock("x", wait=0.2).acquire()
    assert 0.15 < time.monotonic() - started < 5
    assert issubclass(dlock.LockTimeout, TimeoutError)
    time.sleep(0.05)
    assert a.status("x").waiters == ()
    held.release()
    again = b.lock("x").try_acquire()
    assert again is not None and again.fencing_token > held.fencing_token
    again.release()


def test_reentrancy_is_per_lock_object_and_thread(redis: RedisServer) -> None:
    client = dlock.connect(redis.url)
    lock = client.lock("re")
    with lock as outer:
        with lock as inner:
            assert inner.fencing_token == outer.fencing_token
            assert client.status("re").count == 2
            seen: List[object] = []
            thread = threading.Thread(target=lambda: seen.append(lock.try_acquire()))
            thread.start()
            thread.join()
            assert seen == [None], "another thread is another owner"
            assert client.lock("re").try_acquire() is None, "another Lock object is another owner"
        assert client.status("re").count == 1
    assert client.status("re").owner is None


def test_release_twice_is_not_held(redis: RedisServer) -> None:
    held = dlock.connect(redis.url).lock("twice").acquire()
    held.release()
    with pytest.raises(dlock.NotHeld):
        held.release()
    assert "released" in repr(held)


def test_lost_when_the_key_is_deleted(redis: RedisServer) -> None:
    client = dlock.connect(redis.url)
    calls: List[str] = []
    done = threading.Event()

    def on_lost(held: dlock.Held, reason: str) -> None:
        calls.append(reason)
        done.set()

    held = client.lock("fragile", lease=0.6, on_lost=on_lost).acquire()
    assert held.wait_lost(timeout=0.05) is None
    redis.cli("DEL", "dlock:{fragile}:lock")
    assert held.wait_lost(timeout=3) == "not-owner"
    assert held.is_lost and held.lost_reason == "not-owner"
    assert done.wait(3) and calls == ["not-owner"]
    assert "lost (not-owner)" in repr(held)
    with pytest.raises(dlock.LockLost):
        held.release()


def test_lost_when_redis_restarts(redis: RedisServer) -> None:
    client = dlock.connect(redis.url)
    held = client.lock("r", lease=0.6).acquire()
    redis.restart()
    assert held.wait_lost(timeout=5) in ("not-owner", "expired")
    again = client.lock("r", wait=5).acquire()
    again.release()


def test_extend_and_max_hold(redis: RedisServer) -> None:
    client = dlock.connect(redis.url)
    held = client.lock("e", lease=1.0).acquire()
    held.extend(60.0)
    ttl = client.status("e").ttl
    assert ttl is not None and ttl > 50
    held.release()
    bounded = client.lock("m", lease=0.2, max_hold=0.5).acquire()
    assert bounded.wait_lost(timeout=3) == "max-hold"
    time.sleep(0.05)
    assert client.status("m").owner is None


def test_waiters_are_served_in_order(redis: RedisServer) -> None:
    holder = dlock.connect(redis.url)
    held = holder.lock("fifo").acquire()
    order: List[int] = []
    threads = []
    for i in range(4):
        client = dlock.connect(redis.url)

        def wait_turn(i: int = i, client: dlock.Client = client) -> None:
            with client.lock("fifo"):
                order.append(i)

        thread = threading.Thread(target=wait_turn)
        thread.start()
        threads.append(thread)
        deadline = time.monotonic() + 5
        while len(holder.status("fifo").waiters) < i + 1:
            assert time.monotonic() < deadline
            time.sleep(0.005)
    held.release()
    for thread in threads:
        thread.join(10)
    assert order == [0, 1, 2, 3]


BAD_LOCKS = [
    dict(name=""),
    dict(name="n" * 1025),
    dict(name="ok", lease=0.0),
    dict(name="ok", lease=-1.0),
    dict(name="ok", lease=math.nan),
    dict(name="ok", lease=math.inf),
    dict(name="ok", lease=0.005),
    dict(name="ok", lease=8 * 86400.0),
    dict(name="ok", wait=-1.0),
    dict(name="ok", max_hold=0.0),
]


@pytest.mark.parametrize("args", BAD_LOCKS)
def test_bad_input_raises_invalid_argument_and_sends_nothing(redis: RedisServer, args: dict) -> None:  # type: ignore[type-arg]
    client = dlock.connect(redis.url)
    name = args.pop("name")
    with pytest.raises(dlock.InvalidArgument) as info:
        client.lock(name, **args).acquire()
    assert isinstance(info.value, ValueError)
    assert redis.cli("DBSIZE") == "0"


@pytest.mark.parametrize("url", ["", "127.0.0.1:6379", "redis://", "http://x", "memory://a b", "zk://h", "zk://h:1?ttl=2"])
def test_bad_urls(url: str) -> None:
    with pytest.raises(dlock.InvalidArgument):
        dlock.connect(url)


def test_unreachable_backend_is_a_connection_error() -> None:
    from conftest import free_port

    with pytest.raises(dlock.BackendError) as info:
        dlock.connect(f"redis://127.0.0.1:{free_port()}")
    assert isinstance(info.value, ConnectionError)


def test_acl_user_and_redacted_repr(redis_acl: RedisServer) -> None:
    url = f"redis://alice:s3cret@127.0.0.1:{redis_acl.port}"
    with dlock.connect(url) as client:
        assert "s3cret" not in repr(client) and "alice:***@" in repr(client)
        with client.lock("acl") as held:
            assert held.fencing_token > 0
    assert client.closed and "closed" in repr(client)
    with pytest.raises(dlock.DlockError):
        client.lock("acl").acquire()
    with pytest.raises(dlock.BackendError):
        dlock.connect(f"redis://alice:wrong@127.0.0.1:{redis_acl.port}")


def test_memory_backend_needs_no_server() -> None:
    a, b = dlock.connect("memory://py-tests"), dlock.connect("memory://py-tests")
    with a.lock("m") as held:
        assert b.lock("m").try_acquire() is None
    assert b.lock("m").try_acquire() is not None
    assert repr(a.lock("m", lease=5.0)) == "<dlock.Lock 'm' lease=5.0s wait=None>"
    assert re.match(r"<dlock\.Held 'm' fencing_token=\d+ ", repr(held)), repr(held)


def test_lock_delay_keeps_the_lock_on_the_server_past_the_lease(redis: RedisServer) -> None:
    client = dlock.connect(redis.url, lock_delay=10.0)
    with client.lock("delayed", lease=1.0) as held:
        # The server keeps the lock lease + delay (the delay 1% longer, for clock rates):
        # longer than the lease alone could last.
        ttl = client.status("delayed").ttl
        assert ttl is not None and 1.0 < ttl <= 11.1, ttl
        assert not held.is_lost
    assert client.status("delayed").owner is None, "a release frees the lock at once"
    with pytest.raises(dlock.InvalidArgument):
        dlock.connect(redis.url, lock_delay=-1.0)
