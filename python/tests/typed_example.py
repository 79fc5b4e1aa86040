"""Type-checked with `mypy --strict` by test_typing.py: the API as users write it."""

from __future__ import annotations

import asyncio
from typing import Optional

import dlock
import dlock.aio


def sync_example(url: str) -> bool:
    client: dlock.Client = dlock.connect(url, waiter_lease=3.0)
    with client.lock("orders/42", lease=10.0, wait=5.0) as held:
        token: int = held.fencing_token
    maybe: Optional[dlock.Held] = client.lock("orders/42").try_acquire()
    if maybe is not None:
        maybe.extend(10.0)
        reason: Optional[str] = maybe.wait_lost(timeout=0.01)
        assert reason is None and not maybe.is_lost
        maybe.release()
    status: dlock.LockStatus = client.status("orders/42")
    client.close()
    return status.latest_token > token


async def async_example(url: str) -> bool:
    client = await dlock.aio.connect(url)
    async with client.lock("orders/42", lease=10.0) as held:
        token: int = held.fencing_token
    again: dlock.aio.AsyncHeld = await client.lock("orders/42").acquire()
    await again.release()
    await client.close()
    return again.fencing_token > token


def election_example(url: str) -> int:
    client = dlock.connect(url)
    election: dlock.Election = client.election("scheduler", lease=10.0)
    with election.campaign("worker-1:8080") as lead:
        term: int = lead.term
        lead.proclaim("worker-1:8081")
        leader: Optional[dlock.Leader] = election.leader()
        assert leader is not None and leader.term == term
    with election.observe() as observer:
        first: Optional[dlock.Leader] = next(observer)
        assert first is None
    return term


async def async_election_example(url: str) -> int:
    client = await dlock.aio.connect(url)
    async with client.election("scheduler").campaign("worker-2") as lead:
        term: int = lead.term
    lead2: dlock.aio.AsyncLeadership = await client.election("scheduler").campaign("worker-2")
    await lead2.resign()
    async for leader in client.election("scheduler").observe():
        assert leader is None
        break
    return term


if __name__ == "__main__":
    url = "memory://typed"
    terms = (election_example(url), asyncio.run(async_election_example(url)))
    print(sync_example(url) and terms[1] > terms[0], asyncio.run(async_example(url)))
