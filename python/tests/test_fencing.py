"""Fencing at the resource: the Redis fenced write, and the SQL pattern on a real PostgreSQL.

A lease is not mutual exclusion: a holder paused past its lease still believes it holds the
lock. Only the resource can refuse its late write, by remembering the highest fencing token
it has seen. Here the old holder's tenure ends (max_hold) while it still works and a new
holder takes over; the old holder's write comes last and is refused.
"""

from __future__ import annotations

import time

import psycopg
import pytest

import dlock
from conftest import PostgresServer, RedisServer


def test_redis_fenced_write_refuses_a_stale_token(redis: RedisServer) -> None:
    old, new = dlock.connect(redis.url), dlock.connect(redis.url)
    stale = old.lock("stock/42", max_hold=0.15).acquire()
    assert old.fenced_write("stock:42", stale.fencing_token, "10")
    with new.lock("stock/42", wait=5.0) as fresh:
        assert fresh.fencing_token > stale.fencing_token
        assert new.fenced_write("stock:42", fresh.fencing_token, "9")
        # The old holder wakes up and writes: refused, nothing changes.
        assert not old.fenced_write("stock:42", stale.fencing_token, "11")
    assert redis.cli("HGET", "stock:42", "value") == "9"
    for bad in (0, -1, 1.5, True):
        with pytest.raises(dlock.InvalidArgument):
            old.fenced_write("stock:42", bad, "x")  # type: ignore[arg-type]


# The SQL pattern: the row remembers the token of its last write, and an UPDATE only applies
# under a newer (or the same) token. `rowcount == 0` means the writer's lock was lost.
FENCED_UPDATE = """
    UPDATE stock SET quantity = %(quantity)s, fence = %(token)s
    WHERE item = %(item)s AND fence <= %(token)s
"""


def test_sql_fenced_update_refuses_a_stale_token(redis: RedisServer, postgres: PostgresServer) -> None:
    with psycopg.connect(postgres.dsn, autocommit=True) as db:
        db.execute("CREATE TABLE stock (item text PRIMARY KEY, quantity int NOT NULL, fence bigint NOT NULL DEFAULT 0)")
        db.execute("INSERT INTO stock (item, quantity) VALUES ('widget', 10)")
        old, new = dlock.connect(redis.url), dlock.connect(redis.url)

        stale = old.lock("stock/widget", max_hold=0.15).acquire()
        time.sleep(0.3)  # paused past its tenure
        with new.lock("stock/widget", wait=5.0) as fresh:
            done = db.execute(FENCED_UPDATE, {"quantity": 9, "token": fresh.fencing_token, "item": "widget"})
            assert done.rowcount == 1
        done = db.execute(FENCED_UPDATE, {"quantity": 11, "token": stale.fencing_token, "item": "widget"})
        assert done.rowcount == 0, "the stale holder's update must not apply"
        row = db.execute("SELECT quantity, fence FROM stock WHERE item = 'widget'").fetchone()
        assert row is not None and row[0] == 9 and row[1] == fresh.fencing_token
