"""Lock statistics against a real redis-server: after a scripted sequence the counts are exact
(the same script as the Rust crate's and Node's tests), and the Prometheus text they make
parses with prometheus_client's own parser."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Dict, List

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import dlock
import dlock.aio
from conftest import RedisServer
from dlock.prometheus import DlockCollector

NAME = "stats/a"


async def waiters(client: dlock.aio.Client, n: int) -> None:
    """Until the server shows `n` waiters (an event, polled; no verdict rests on its timing)."""
    while len((await client.status(NAME)).waiters) != n:
        await asyncio.sleep(0.005)


async def script(client: dlock.aio.Client) -> None:
    """Acquire, reenter, busy, time out, cancel, hand off, lose to max-hold."""
    lock = client.lock(NAME, lease=60.0)
    outer = await lock.acquire()
    inner = await lock.acquire()  # the same owner: a reentry
    assert await client.lock(NAME).try_acquire() is None
    try:
        await client.lock(NAME, wait=0.05).acquire()
        raise AssertionError("acquired a held lock")
    except dlock.LockTimeout:
        pass
    # Its DEQUEUE may still be on its way: the waiter counted next must be the one cancelled.
    await waiters(client, 0)
    cancelled = asyncio.ensure_future(client.lock(NAME).acquire())
    await waiters(client, 1)
    cancelled.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await cancelled
    await waiters(client, 0)
    handed = asyncio.ensure_future(client.lock(NAME, lease=60.0).acquire())
    await waiters(client, 1)
    await inner.release()
    await outer.release()
    await (await handed).release()
    short = await client.lock(NAME, max_hold=0.1).acquire()
    assert await short.wait_lost() == "max-hold"


def test_counts_after_a_scripted_sequence_are_exact(redis: RedisServer) -> None:
    async def main() -> List[dlock.LockStats]:
        client = await dlock.aio.connect(redis.url, waiter_lease=60.0)
        await script(client)
        return await client.stats()

    [s] = asyncio.run(main())
    assert (s.name, s.kind, s.permits) == (NAME, "lock", None)
    counts = (s.acquired, s.handed_off, s.reentered, s.released, s.busy, s.timed_out, s.cancelled, s.failed)
    assert counts == (3, 1, 1, 2, 1, 1, 1, 0)
    assert {r: n for r, n in s.lost.items() if n} == {"max-hold": 1}
    assert set(s.lost) == set(dlock.LOST_REASONS)
    # Nothing is renewed: every lease is a minute, and so is the waiter lease, which the handed
    # lock is valid for until its renewal, a third of it after the waiter queued.
    assert (s.renewals, s.renewals_failed) == (0, 0)
    assert (s.held, s.waiting) == (0, 0)
    assert (s.wait.count, s.hold.count) == (3, 3)
    assert s.wait.buckets[-1] == ("+Inf", 3) and s.hold.buckets[-1] == ("+Inf", 3)
    # The max-hold tenure held for 0.1 s at least, by the engine's clock.
    assert s.hold.max >= 0.1 and s.hold.sum >= s.hold.max
    counts_by_bound = [n for _, n in s.wait.buckets]
    assert counts_by_bound == sorted(counts_by_bound), "cumulative"


def test_prometheus_text_parses_with_the_counts(redis: RedisServer) -> None:
    client = dlock.connect(redis.url)
    with client.lock(NAME, lease=60.0):
        pass
    held = client.lock(NAME).try_acquire()  # another owner; held while the scrape runs
    assert held is not None
    registry = CollectorRegistry()
    registry.register(DlockCollector(client))
    text = generate_latest(registry).decode()
    samples: Dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}"] = sample.value
    lock = f"kind=lock,name={NAME}"
    assert samples[f"dlock_acquired_total{{{lock}}}"] == 2
    assert samples[f"dlock_released_total{{{lock}}}"] == 1
    assert samples[f"dlock_held{{{lock}}}"] == 1
    assert samples[f"dlock_lost_total{{{lock},reason=max-hold}}"] == 0
    assert samples[f"dlock_wait_seconds_count{{{lock}}}"] == 2
    assert samples[f"dlock_wait_seconds_bucket{{kind=lock,le=+Inf,name={NAME}}}"] == 2
    assert samples[f"dlock_hold_seconds_count{{{lock}}}"] == 1
    # Each family is announced once with its type.
    assert text.count("# TYPE dlock_wait_seconds histogram") == 1
    assert text.count("# TYPE dlock_acquired_total counter") == 1


def test_the_engine_gives_its_counts_as_dicts() -> None:
    engine = dlock.Engine({"client_id": "0" * 31 + "1"}, 0)
    assert engine.stats() == {"locks": []}
