"""The exceptions dlock raises. Every one is a :class:`DlockError` with a stable ``code``.

The Rust crate sorts every error into one code (``dlock::ErrorCode``); :data:`BY_CODE` maps
each code to its class here, as Node maps it to ``err.code``.
"""

from __future__ import annotations

from typing import Dict, Type

__all__ = [
    "BY_CODE",
    "BackendError",
    "ClientClosed",
    "DlockError",
    "InvalidArgument",
    "LockLost",
    "LockTimeout",
    "NotHeld",
]


class DlockError(Exception):
    """Base class of every dlock error. ``code`` is its stable class: ``"timeout"``,
    ``"lost"``, ``"not-held"``, ``"invalid-argument"``, ``"backend"`` or ``"closed"``."""

    code: str = ""


class LockTimeout(DlockError, TimeoutError):
    """The wait ran out before the lock could be acquired."""

    code = "timeout"


class LockLost(DlockError):
    """The lock was lost: its lease ran out, the server gave it to someone else, max_hold
    passed, or the ZooKeeper session broke (see ``dlock.LOST_REASONS``)."""

    code = "lost"


class NotHeld(DlockError):
    """The lock is not held by this object (already released)."""

    code = "not-held"


class InvalidArgument(DlockError, ValueError):
    """Bad input (name, lease, wait, URL), refused before anything was sent."""

    code = "invalid-argument"


class BackendError(DlockError, ConnectionError):
    """The backend could not be reached, timed out, or answered badly."""

    code = "backend"


class ClientClosed(DlockError):
    """The client is closed (or was created in another process, before a fork)."""

    code = "closed"


#: The exception class of each error code.
BY_CODE: Dict[str, Type[DlockError]] = {
    cls.code: cls for cls in (LockTimeout, LockLost, NotHeld, InvalidArgument, BackendError, ClientClosed)
}
