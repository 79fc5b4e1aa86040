"""dlock.Engine with your own I/O: here a plain redis-py connection runs the engine's requests."""

from __future__ import annotations

import time
from typing import Any, Dict, List

import pytest
import redis as redis_py

import dlock
from dlock.errors import InvalidArgument

from conftest import RedisServer


def run(engine: dlock.Engine, conn: redis_py.Redis, inputs: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Feeds `inputs`, runs every request on `conn` (pub/sub is skipped: this host only
    try-acquires), and returns the events."""
    events: List[Dict[str, Any]] = []
    pending = list(inputs)
    while pending:
        engine.handle_input(time.monotonic_ns(), pending.pop(0))
        while (out := engine.poll_output()) is not None:
            if out["type"] != "request":
                events.append(out)
                continue
            op = out["op"]
            if op["type"] == "subscribe":
                reply: Dict[str, Any] = {"type": "reply", "id": out["id"], "value": {"status": "OK"}}
            else:
                source = dlock.Engine.script_source(op["script"])
                try:
                    value = conn.eval(source, len(op["keys"]), *op["keys"], *op["args"])
                    reply = {"type": "reply", "id": out["id"], "value": value}
                except redis_py.ResponseError as e:
                    reply = {"type": "reply", "id": out["id"], "error": {"type": "server", "message": str(e)}}
            pending.append(reply)
    return events


def test_bring_your_own_redis_connection(redis: RedisServer) -> None:
    conn = redis_py.Redis.from_url(redis.url)
    engine = dlock.Engine({"protocol": {"type": "redis"}}, time.monotonic_ns())
    assert len(engine.config["client_id"]) == 32

    acquire = {"type": "acquire", "op": 1, "name": "byo", "owner": 1, "lease_ms": 5000, "wait": "no"}
    [acquired] = run(engine, conn, [acquire])
    assert acquired["type"] == "acquired" and acquired["fencing_token"] > 0
    owner = conn.hget("dlock:{byo}:lock", "owner")
    assert owner is not None and owner.decode().startswith(engine.config["client_id"])
    assert engine.hold(acquired["hold"])["name"] == "byo"

    # A second engine on its own connection finds the lock busy.
    other = dlock.Engine({}, time.monotonic_ns())
    [busy] = run(other, conn, [dict(acquire, op=1)])
    assert busy == {"type": "not-acquired", "op": 1, "reason": "busy"}

    [released] = run(engine, conn, [{"type": "release", "op": 2, "hold": acquired["hold"]}])
    assert released == {"type": "released", "op": 2, "hold": acquired["hold"], "count": 0}
    assert conn.exists("dlock:{byo}:lock") == 0


def test_malformed_input_is_refused_with_the_field_named() -> None:
    engine = dlock.Engine({"client_id": "0" * 31 + "1"}, 0)
    first = engine.poll_output()
    assert first is not None and first["op"]["type"] == "subscribe"
    with pytest.raises(InvalidArgument, match=r"input\.lease_ms: expected a non-negative integer"):
        engine.handle_input(1, {"type": "acquire", "op": 1, "name": "a", "owner": 1, "lease_ms": -1, "wait": "no"})
    with pytest.raises(InvalidArgument, match="config.client_id: expected 32 hex digits"):
        dlock.Engine({"client_id": "xyz"}, 0)
    with pytest.raises(TypeError):
        engine.handle_input(1, {"type": "acquire", "op": object()})
    with pytest.raises(InvalidArgument, match="now must be an integer >= 0"):
        engine.handle_timeout(-1)
    with pytest.raises(InvalidArgument, match="now must be an integer >= 0"):
        dlock.Engine({}, -5)
    with pytest.raises(InvalidArgument, match="no script named"):
        dlock.Engine.script_source("nope")
    # Nothing reached the engine: no request, no event.
    assert engine.poll_output() is None
