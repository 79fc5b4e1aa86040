"""Fencing at a row of your own database, in one call: the seed's optimistic lock, with the
lock's fencing token as the row's version (docs/PROTOCOL.md §13).

The row keeps the token of its last write in a column (``fence`` by default). An update
applies only under a token at least as new as that one, in the caller's connection and
transaction, so a holder whose lock was lost (and taken by a newer holder who wrote) changes
nothing::

    with client.lock("stock/widget") as held, db.transaction():
        if not dlock.sql.fenced_update(db, "stock", {"item": "widget"}, {"quantity": 9}, held.fencing_token):
            raise RuntimeError("lost the lock: a newer holder wrote")

Works with any DB-API connection or cursor whose driver uses ``%s`` or ``?`` placeholders
(psycopg, PyMySQL, mysqlclient, sqlite3, …). Table and column names must be plain
identifiers (``[A-Za-z_][A-Za-z0-9_]*``, optionally ``schema.table``); anything else is
refused before a statement is sent.

On MySQL and MariaDB a row counts as updated only if a value changed: writing the same
values again under the same token reports ``False`` there (PostgreSQL counts matched rows).
"""

from __future__ import annotations

import importlib
from typing import Any, Mapping

from ._dlock import fenced_update_sql
from .errors import InvalidArgument

__all__ = ["fenced_update"]

# DB-API paramstyles and the placeholder each stands for.
_STYLES = {"format": "format", "pyformat": "format", "qmark": "question"}


def _placeholder(db: Any) -> str:
    """The driver's placeholder style, from its module's DB-API ``paramstyle``."""
    module = type(getattr(db, "connection", None) or db).__module__.split(".")[0]
    style = getattr(importlib.import_module(module), "paramstyle", "format")
    if style not in _STYLES:
        raise InvalidArgument(f"the {module} driver's paramstyle {style!r} is not supported (use %s or ? drivers)")
    return _STYLES[style]


def fenced_update(
    db: Any,
    table: str,
    key: Mapping[str, Any],
    values: Mapping[str, Any],
    token: int,
    fence_column: str = "fence",
) -> bool:
    """``UPDATE table SET values…, fence = token WHERE key… AND fence <= token`` on ``db`` (a
    DB-API connection or cursor, in whatever transaction it is in). True if a row was
    updated; False if none was — the row's fence is newer than ``token`` (this holder's lock
    was lost and a newer holder wrote), or no row has that key. The statement is the Rust
    crate's (``dlock::fenced_update_sql``), as every host builds it."""
    if isinstance(token, bool) or not isinstance(token, int) or token <= 0:
        raise InvalidArgument(f"a fencing token is a positive integer, not {token!r}")
    for name in [*key, *values]:
        if not isinstance(name, str):
            raise InvalidArgument(f"column {name!r} is not a plain SQL identifier")
    statement = fenced_update_sql(table, list(key), list(values), fence_column, _placeholder(db))
    params = [*values.values(), token, *key.values(), token]
    cursor = db.cursor() if hasattr(db, "cursor") else db
    cursor.execute(statement, params)
    return bool(cursor.rowcount and cursor.rowcount > 0)
