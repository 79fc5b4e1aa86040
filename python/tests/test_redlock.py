"""dlock on Redlock: three independent redis-servers behind one redlock:// URL."""

from __future__ import annotations

import threading
import time

import pytest

import dlock
from conftest import Redlock


def test_redlock_excludes_fences_and_survives_a_node_restart(redlock: Redlock) -> None:
    a, b = dlock.connect(redlock.url), dlock.connect(redlock.url)
    # A lease that a loaded machine's scheduling delays cannot eat: renewals go every third.
    with a.lock("job", lease=2.0) as held:
        # A Redlock acquire returns once a majority grants it; the third node's answer may
        # still be on its way (on a fresh node, after loading the functions). Only with all
        # three does a restart of one leave the two that renewals need, so wait for it here,
        # before a contender could take the third node in between.
        deadline = time.monotonic() + 10
        while len({node.cli("HGET", "dlock:{job}:lock", "owner") for node in redlock.nodes}) != 1:
            assert time.monotonic() < deadline, "a did not get the lock on every node"
            time.sleep(0.01)
        assert b.lock("job").try_acquire() is None
        status = a.status("job")
        assert status.fencing_token == held.fencing_token
        # One of three nodes restarts empty: renewals from the other two keep the lock.
        redlock.nodes[0].restart()
        threading.Event().wait(4.5)  # two leases and more: six renewals
        assert not held.is_lost
        assert b.lock("job").try_acquire() is None
        first = held.fencing_token
    # Every node restarts empty: tokens still grow.
    for node in redlock.nodes:
        node.restart()
    with b.lock("job", wait=10) as again:
        assert again.fencing_token > first


def test_redlock_with_a_majority_down_fails_cleanly(redlock: Redlock) -> None:
    client = dlock.connect(redlock.url)
    redlock.nodes[1].stop()
    redlock.nodes[2].stop()
    with pytest.raises(dlock.BackendError):
        client.lock("job", lease=0.9).try_acquire()
