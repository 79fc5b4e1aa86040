"""The exceptions dlock raises. Every one is a :class:`DlockError`."""

from __future__ import annotations

__all__ = ["DlockError", "LockTimeout", "LockLost", "NotHeld", "InvalidArgument", "BackendError"]


class DlockError(Exception):
    """Base class of every dlock error."""


class LockTimeout(DlockError, TimeoutError):
    """The wait ran out before the lock could be acquired."""


class LockLost(DlockError):
    """The lock was lost: its lease ran out, the server gave it to someone else, or max_hold passed."""


class NotHeld(DlockError):
    """The lock is not held by this object (already released)."""


class InvalidArgument(DlockError, ValueError):
    """Bad input (name, lease, wait, URL), refused before anything was sent."""


class BackendError(DlockError, ConnectionError):
    """The backend could not be reached, timed out, or answered badly."""
