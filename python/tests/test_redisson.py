"""The Redisson-compatible mode from Python: ``?compat=redisson`` on a redis:// or
redis-cluster:// URL lays each lock out as Redisson's RLock (PROTOCOL.md §19), so a Java service
on Redisson and this client exclude each other. Redisson itself contends in ``just interop``;
here a holder runs Redisson's own acquire and unlock scripts (RedissonLock 3.52) through
redis-py."""

from __future__ import annotations

import threading
import time

import pytest
import redis as redis_py

import dlock
from conftest import RedisCluster, RedisServer

REDISSON_LOCK = """
if ((redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then
redis.call('hincrby', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end;
return redis.call('pttl', KEYS[1]);
"""

REDISSON_UNLOCK = """
if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil; end;
local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1);
if (counter > 0) then redis.call('pexpire', KEYS[1], ARGV[2]); return 0;
else redis.call('del', KEYS[1]); redis.call(ARGV[4], KEYS[2], ARGV[1]); return 1; end;
"""

FIELD = "4f0e5b1c-7a2d-4e9b-9c3f-1d2e3f4a5b6c:1"


def test_a_redisson_holder_and_dlock_exclude_each_other(redis: RedisServer) -> None:
    url = f"{redis.url}/?compat=redisson"
    client = dlock.connect(url)
    raw = redis_py.Redis(port=redis.port)
    assert raw.eval(REDISSON_LOCK, 1, "orders/42", 60_000, FIELD) is None
    assert client.lock("orders/42").try_acquire() is None, "dlock passed Redisson's holder"
    got = threading.Event()
    tokens = []

    def wait() -> None:
        with client.lock("orders/42", wait=30.0) as held:
            tokens.append(held.fencing_token)
            got.set()

    waiter = threading.Thread(target=wait)
    waiter.start()
    while raw.pubsub_numsub("redisson_lock__channel:{orders/42}")[0][1] == 0:
        time.sleep(0.01)
    released = time.monotonic()
    assert raw.eval(REDISSON_UNLOCK, 2, "orders/42", "redisson_lock__channel:{orders/42}", 0, 30_000, FIELD, "publish") == 1
    assert got.wait(30), "not woken by Redisson's unlock message"
    assert time.monotonic() - released < 30, "woken by the message, not the 60 s lease"
    waiter.join()
    assert tokens[0] == int(raw.get("redisson_lock_token:{orders/42}"))
    # dlock's hold is Redisson's layout: Redisson's acquire gets the holder's TTL back.
    with client.lock("orders/42") as held:
        fields = raw.hgetall("orders/42")
        assert list(fields.values()) == [b"1"] and FIELD.encode() not in fields
        assert raw.eval(REDISSON_LOCK, 1, "orders/42", 60_000, FIELD) > 0
        status = client.status("orders/42")
        assert status.owner == next(iter(fields)).decode()
        assert status.latest_token == held.fencing_token
    assert not raw.exists("orders/42")
    client.close()


def test_only_locks_and_one_server(redis: RedisServer) -> None:
    client = dlock.connect(f"{redis.url}/?compat=redisson")
    with pytest.raises(dlock.InvalidArgument, match="semaphores"):
        client.semaphore("pool", permits=2).try_acquire()
    client.close()
    for url, why in (
        (f"{redis.url}/?compat=curator", "compat takes one value"),
        ("redis-cluster://127.0.0.1:1,127.0.0.1:2?compat=curator", "compat takes one value"),
    ):
        with pytest.raises(dlock.InvalidArgument, match=why):
            dlock.connect(url)


def test_one_lock_of_a_plain_client_in_redissons_layout(redis: RedisServer) -> None:
    client = dlock.connect(redis.url)
    raw = redis_py.Redis(port=redis.port)
    with client.lock("report", compat="redisson") as held:
        assert len(raw.hgetall("report")) == 1, "Redisson's hash at the raw name"
        assert held.fencing_token == int(raw.get("redisson_lock_token:{report}"))
        assert raw.eval(REDISSON_LOCK, 1, "report", 60_000, FIELD) > 0, "Redisson sees the holder"
        other = client.lock("report").try_acquire()
        assert other is not None, "the client's own layout is another lock"
        other.release()
    assert not raw.exists("report")
    with pytest.raises(dlock.InvalidArgument, match="compat"):
        client.lock("report", compat="curator").try_acquire()
    client.close()


def test_on_a_cluster_redissons_sharded_unlock_wakes_a_dlock_waiter(redis_cluster: RedisCluster) -> None:
    # Waiters that look again only every 2 minutes unless woken: the unlock's message it is.
    client = dlock.connect(f"{redis_cluster.url}?compat=redisson", waiter_lease=120.0)
    channel = "redisson_lock__channel:{orders/42}"
    # The node that serves the lock's slot (its key and channel share it) runs the scripts.
    any_node = redis_py.Redis(port=redis_cluster.nodes[0].port)
    slot = any_node.execute_command("CLUSTER", "KEYSLOT", "orders/42")
    port = next(r[2][1] for r in any_node.execute_command("CLUSTER", "SLOTS") if r[0] <= slot <= r[1])
    raw = redis_py.Redis(port=port)
    assert raw.eval(REDISSON_LOCK, 1, "orders/42", 60_000, FIELD) is None
    assert client.lock("orders/42").try_acquire() is None, "dlock passed Redisson's holder"
    got = threading.Event()

    def wait() -> None:
        with client.lock("orders/42", wait=90.0):
            got.set()

    waiter = threading.Thread(target=wait)
    waiter.start()
    while raw.execute_command("PUBSUB", "SHARDNUMSUB", channel)[1] == 0:
        time.sleep(0.01)
    assert raw.eval(REDISSON_UNLOCK, 2, "orders/42", channel, 0, 30_000, FIELD, "spublish") == 1
    assert got.wait(60), "not woken by Redisson's sharded unlock message"
    waiter.join()
    client.close()
