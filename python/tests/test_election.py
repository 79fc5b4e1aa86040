"""Leader election from Python (docs/PROTOCOL.md §20), sync and asyncio, against a real
redis-server, Redis Cluster, ZooKeeper, PostgreSQL and MariaDB: candidates lead one at a time with growing terms, observers hear
every change, and what cannot be done is refused. Verdicts wait for events, not sleeps."""

from __future__ import annotations

import asyncio
import threading
from typing import List, Optional

import pytest

import dlock
import dlock.aio
from conftest import (
    MariadbServer,
    PostgresServer,
    RedisCluster,
    Redlock,
    RedisServer,
    ZooKeeperServer,
)


def next_change(observer: dlock.Observer) -> Optional[dlock.Leader]:
    return next(observer)


def test_candidates_take_turns_and_an_observer_hears_each(redis: RedisServer) -> None:
    a, b, watcher = dlock.connect(redis.url), dlock.connect(redis.url), dlock.connect(redis.url)
    with watcher.election("scheduler").observe() as observer:
        assert next_change(observer) is None, "nobody leads yet"
        first = a.election("scheduler").campaign("a:1")
        assert next_change(observer) == dlock.Leader(first.term, "a:1")
        assert b.election("scheduler").leader() == dlock.Leader(first.term, "a:1")

        led: List[dlock.Leadership] = []
        second = threading.Thread(target=lambda: led.append(b.election("scheduler").campaign("b:2")))
        second.start()
        while len(watcher.status("scheduler").waiters) != 1:
            threading.Event().wait(0.01)

        first.proclaim("a:1 (draining)")
        assert next_change(observer) == dlock.Leader(first.term, "a:1 (draining)")
        first.resign()
        second.join(60)
        (lead,) = led
        assert lead.term > first.term
        seen = next_change(observer)
        if seen is None:  # the hand-off may show the free lock first
            seen = next_change(observer)
        assert seen == dlock.Leader(lead.term, "b:2")

        with lead:
            assert not lead.is_lost
        assert next_change(observer) is None, "free once the last resigns"
    assert a.election("scheduler").leader() is None


def test_leaving_the_with_block_resigns_and_wait_bounds_a_campaign(redis: RedisServer) -> None:
    client = dlock.connect(redis.url)
    election = client.election("jobs", lease=5.0, wait=0.2)
    with election.campaign("one") as lead:
        assert 0 < lead.valid_for <= 5.0, "the local deadline is within the lease"
        assert election.leader() == dlock.Leader(lead.term, "one")
        with pytest.raises(dlock.LockTimeout):
            election.campaign("two")
    assert election.leader() is None
    assert "lease=5.0s" in repr(election)


def test_bad_input_is_refused_before_anything_is_sent(redis: RedisServer, redlock: Redlock) -> None:
    client = dlock.connect(redis.url)
    with pytest.raises(dlock.InvalidArgument):
        client.election("e").campaign("v" * 4097)
    with pytest.raises(dlock.InvalidArgument):
        client.election("").leader()
    with pytest.raises(dlock.InvalidArgument, match="Redlock offers no elections"):
        dlock.connect(redlock.url).election("e").campaign("v")
    assert client.status("e").owner is None


def test_asyncio_campaign_observe_and_resign(redis: RedisServer) -> None:
    async def main() -> None:
        a = await dlock.aio.connect(redis.url)
        b = await dlock.aio.connect(redis.url)
        changes: List[Optional[dlock.Leader]] = []
        heard = asyncio.Event()

        async def watch() -> None:
            async with b.election("reports").observe() as observer:
                async for leader in observer:
                    changes.append(leader)
                    heard.set()

        watcher = asyncio.create_task(watch())
        async with a.election("reports").campaign("a") as lead:
            while dlock.Leader(lead.term, "a") not in changes:
                heard.clear()
                await asyncio.wait_for(heard.wait(), 60)
            await lead.proclaim("a2")
            while dlock.Leader(lead.term, "a2") not in changes:
                heard.clear()
                await asyncio.wait_for(heard.wait(), 60)
            assert await b.election("reports").leader() == dlock.Leader(lead.term, "a2")
        while changes[-1] is not None:
            heard.clear()
            await asyncio.wait_for(heard.wait(), 60)
        watcher.cancel()
        lead2 = await a.election("reports").campaign("again")
        assert lead2.term > lead.term
        await lead2.resign()

    asyncio.run(main())


def test_on_a_cluster(redis_cluster: RedisCluster) -> None:
    client = dlock.connect(redis_cluster.url)
    with client.election("cluster/e").observe() as observer:
        assert next_change(observer) is None
        with client.election("cluster/e").campaign("c") as lead:
            assert next_change(observer) == dlock.Leader(lead.term, "c")
        assert next_change(observer) is None


def a_leader_is_observed(url: str) -> None:
    """One client leads and proclaims again; another observes each change and the free lock."""
    a, b = dlock.connect(url), dlock.connect(url)
    with b.election("site/e").observe() as observer:
        assert next_change(observer) is None
        with a.election("site/e").campaign("a") as lead:
            assert next_change(observer) == dlock.Leader(lead.term, "a")
            lead.proclaim("a2")
            assert next_change(observer) == dlock.Leader(lead.term, "a2")
            assert b.election("site/e").leader() == dlock.Leader(lead.term, "a2")
        assert next_change(observer) is None


def test_on_zookeeper(zookeeper: ZooKeeperServer) -> None:
    a_leader_is_observed(zookeeper.url)


def test_on_postgres(postgres: PostgresServer) -> None:
    a_leader_is_observed(postgres.url)
    with pytest.raises(dlock.InvalidArgument, match="NUL"):
        dlock.connect(postgres.url).election("e").campaign("a\0b")


def test_on_mariadb(mariadb: MariadbServer) -> None:
    a_leader_is_observed(mariadb.url)
