"""dlock: distributed locks with fencing tokens, FIFO hand-off and a lost-lock signal.

The lock semantics are one engine written in Rust, shared with the Rust crate, the Node
package and the Wasm component, so all of them contend for the same locks safely::

    import dlock

    client = dlock.connect("redis://127.0.0.1:6379")
    with client.lock("orders/42", lease=10.0, wait=5.0) as held:
        write(fence=held.fencing_token)

Durations are seconds (floats). See :mod:`dlock.aio` for asyncio.

:class:`Engine` is the sans-IO engine itself, for bringing your own I/O (an existing redis-py
or kazoo connection): dicts in, dicts out, time passed in as ``time.monotonic_ns()``. Its
inputs and outputs are the JSON form described in docs/PROTOCOL.md.
"""

from __future__ import annotations

import atexit
import threading
from dataclasses import dataclass
from types import TracebackType
from typing import Callable, Iterable, Optional, Tuple, Type

from ._dlock import DEFAULT_LEASE, Engine, NativeClient, NativeHeld, _shutdown, new_owner
from .errors import BackendError, DlockError, InvalidArgument, LockLost, LockTimeout, NotHeld

__all__ = [
    "DEFAULT_LEASE",
    "BackendError",
    "Client",
    "DlockError",
    "Engine",
    "Held",
    "InvalidArgument",
    "Lock",
    "LockLost",
    "LockStatus",
    "LockTimeout",
    "MultiLock",
    "NotHeld",
    "RwLock",
    "Semaphore",
    "connect",
]

OnLost = Callable[["Held", str], None]

# Runtime threads must be out of Python before the interpreter finalizes.
atexit.register(_shutdown)


def _fencing_token(token: int) -> int:
    """A fencing token as the native layer takes it, or InvalidArgument (before anything is sent)."""
    if isinstance(token, bool) or not isinstance(token, int) or token < 1:
        raise InvalidArgument(f"a fencing token is an integer >= 1, got {token!r}")
    return token


def _redact(url: str) -> str:
    """The URL without its password, for reprs and messages."""
    scheme, sep, rest = url.partition("://")
    creds, at, host = rest.rpartition("@")
    if not sep or not at or ":" not in creds:
        return url
    return f"{scheme}://{creds.split(':', 1)[0]}:***@{host}"


@dataclass(frozen=True)
class LockStatus:
    """Who holds a lock, with which fencing token, for how long, and who waits."""

    name: str
    owner: Optional[str]
    count: int
    fencing_token: int
    ttl: Optional[float]
    latest_token: int
    waiters: Tuple[str, ...]


def _status(name: str, raw: dict) -> LockStatus:  # type: ignore[type-arg]
    return LockStatus(
        name=name,
        owner=raw["owner"],
        count=raw["count"],
        fencing_token=raw["fencing_token"],
        ttl=raw["ttl"],
        latest_token=raw["latest_token"],
        waiters=tuple(raw["waiters"]),
    )


def connect(
    url: str,
    *,
    waiter_lease: Optional[float] = None,
    request_timeout: Optional[float] = None,
    lock_delay: Optional[float] = None,
) -> "Client":
    """Connects to ``redis://host:port[/db]``, ``rediss://…`` (TLS), ``redis-cluster://host:port[,host:port…]``,
    ``redlock://host:port,host:port[,…]`` (independent servers, locked by majority),
    ``zk://host:port[,host:port…][/chroot]`` or ``memory://[name]``.

    ``waiter_lease`` (seconds, Redis only, default 3): how long a queued waiter keeps its place
    without renewing it (it renews every third of it); never longer than the lease it waits for.

    ``request_timeout`` (seconds, default 2): a backend request with no reply after this long
    counts as failed.

    ``lock_delay`` (seconds, Redis only, default off): a lock whose holder stops renewing
    without releasing stays taken that long after its lease, so that a paused holder that
    wakes up cannot clash with a new holder; a crashed holder then blocks the lock for
    lease + lock_delay.

    Raises :class:`InvalidArgument` for a malformed URL and :class:`BackendError` when the
    backend cannot be reached.
    """
    native = NativeClient.connect(url, waiter_lease, request_timeout, lock_delay)
    return Client(native, url)


class _LockOptions:
    """What ``Lock`` and ``dlock.aio.AsyncLock`` share: the name and its options."""

    _KIND = "dlock.Lock"

    def __init__(
        self,
        name: str,
        *,
        lease: float,
        wait: Optional[float],
        max_hold: Optional[float],
        fair: bool = True,
        permits: Optional[int] = None,
        rw: Optional[str] = None,
    ) -> None:
        self.name = name
        self.lease = lease
        self.wait = wait
        self.max_hold = max_hold
        self.fair = fair
        #: A semaphore's number of permits; None for a lock.
        self.permits = _permits(permits)
        #: ``"read"`` or ``"write"``: a hold of a read-write lock; None for a lock.
        self.rw = rw

    def __repr__(self) -> str:
        rw = f" {self.rw}" if self.rw else ""
        return f"<{self._KIND} {self.name!r}{rw} lease={self.lease}s wait={self.wait}>"


def _permits(permits: Optional[int]) -> Optional[int]:
    if permits is not None and (isinstance(permits, bool) or not isinstance(permits, int)):
        raise TypeError(f"permits must be an int, got {type(permits).__name__}")
    return permits


class _HeldState:
    """What ``Held`` and ``dlock.aio.AsyncHeld`` share: the read-only state of a held lock."""

    _KIND = "dlock.Held"

    def __init__(self, native: NativeHeld) -> None:
        self._native = native

    @property
    def name(self) -> str:
        return self._native.name

    @property
    def fencing_token(self) -> int:
        """Larger than every earlier holder's token of this lock: pass it to the resource
        you protect and have it refuse smaller ones."""
        return self._native.fencing_token

    @property
    def fencing_tokens(self) -> "dict[str, int]":
        """Each lock's fencing token by name: one, or every lock of a multi-lock."""
        return dict(self._native.members)

    @property
    def is_lost(self) -> bool:
        return self._native.lost_reason is not None

    @property
    def lost_reason(self) -> Optional[str]:
        """``"expired"``, ``"not-owner"``, ``"max-hold"`` or ``"closed"`` once lost."""
        return self._native.lost_reason

    def __repr__(self) -> str:
        if self.lost_reason is not None:
            state = f"lost ({self.lost_reason})"
        else:
            state = "held" if self._native.held else "released"
        return f"<{self._KIND} {self.name!r} fencing_token={self.fencing_token} {state}>"


class Client:
    """A connection to one lock backend, safe to share between threads."""

    def __init__(self, native: NativeClient, url: str) -> None:
        self._native = native
        self._url = url

    def lock(
        self,
        name: str,
        *,
        lease: float = DEFAULT_LEASE,
        wait: Optional[float] = None,
        max_hold: Optional[float] = None,
        on_lost: Optional[OnLost] = None,
        fair: bool = True,
    ) -> "Lock":
        """A lock to acquire. ``lease`` is renewed while held; ``wait`` bounds
        :meth:`Lock.acquire` (None: as long as it takes); ``max_hold`` stops renewal;
        ``on_lost(held, reason)`` is called once, from a background thread, if it is lost.
        ``fair=False`` (Redis): take the lock when it is free even if others queue, and on
        release free it for anyone instead of handing it to the next in line: more throughput
        when some contenders are slow to answer, no order (ZooKeeper refuses it)."""
        return Lock(self, name, lease=lease, wait=wait, max_hold=max_hold, on_lost=on_lost, fair=fair)

    def multi_lock(
        self,
        names: "Iterable[str]",
        *,
        lease: float = DEFAULT_LEASE,
        wait: Optional[float] = None,
        max_hold: Optional[float] = None,
        on_lost: Optional[OnLost] = None,
    ) -> "MultiLock":
        """Several locks to acquire as one: all of them or none, in one canonical order (names
        sorted) so that overlapping sets never deadlock; losing one loses them all. Options as
        for :meth:`lock`; ``wait`` bounds the whole set. Not reentrant. The held object's
        :attr:`Held.fencing_tokens` maps each name to its token::

            with client.multi_lock(["stock/1", "stock/2"]) as held:
                move(held.fencing_tokens)
        """
        return MultiLock(self, list(names), lease=lease, wait=wait, max_hold=max_hold, on_lost=on_lost)

    def rw_lock(self, name: str) -> "RwLock":
        """A read-write lock: :meth:`RwLock.read` and :meth:`RwLock.write` give its holds,
        acquired like locks. Many readers hold it at once, or one writer alone; a reader that
        arrives while a writer waits queues behind it (writer preference). In one thread, the
        read and write holds of one ``RwLock`` belong to one owner: each is reentrant, and a
        writer may read beside its write hold, then release the write (downgrade); asking to
        write while reading raises :class:`InvalidArgument` (no upgrade). Redis, Redis Cluster
        and ZooKeeper::

            doc = client.rw_lock("doc/42")
            with doc.read():
                show()
            with doc.write():
                edit()
        """
        return RwLock(self, name)

    def semaphore(
        self,
        name: str,
        *,
        permits: int,
        lease: float = DEFAULT_LEASE,
        wait: Optional[float] = None,
        max_hold: Optional[float] = None,
        on_lost: Optional[OnLost] = None,
        fair: bool = True,
    ) -> "Semaphore":
        """A semaphore with ``permits`` permits (1 to 1024): at most that many holders at a
        time, across every client (Redisson's ``PermitExpirableSemaphore``). Each acquire takes
        a permit of its own, a :class:`Held` with its own lease, renewal, fencing token and
        release; options as for :meth:`lock`. Not reentrant. Every client must give the same
        ``permits``: on Redis, while anyone holds or waits, another number raises
        :class:`InvalidArgument`. Redis, Redis Cluster and ZooKeeper (Redlock refuses it)::

            with client.semaphore("pdf-render", permits=4):
                render()
        """
        return Semaphore(
            self, name, permits=permits, lease=lease, wait=wait, max_hold=max_hold, on_lost=on_lost, fair=fair
        )

    def status(self, name: str) -> LockStatus:
        """Who holds ``name`` now, and who waits for it."""
        return _status(name, self._native.status(name))

    def fenced_write(self, resource: str, token: int, value: str) -> bool:
        """Fencing at the resource, in one call: stores ``value`` in the Redis hash
        ``resource`` (fields ``value`` and ``fence``) only if ``token`` — the fencing token of
        the lock that guards it — is at least the highest token stored there before. Returns
        False, changing nothing, for a holder whose lock was lost and taken by someone else::

            with client.lock("stock/42") as held:
                if not client.fenced_write("stock:42", held.fencing_token, "17"):
                    raise RuntimeError("lost the lock: a newer holder wrote first")
        """
        return self._native.fenced_write(resource, _fencing_token(token), value)

    @property
    def closed(self) -> bool:
        return self._native.closed

    def close(self) -> None:
        """Stops taking calls. Locks still held stay held until released."""
        self._native.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"id={self._native.id}"
        return f"<dlock.Client {_redact(self._url)} {state}>"


class Lock(_LockOptions):
    """One lock name with its options. Acquiring the same ``Lock`` again from the same thread
    while it holds is reentrant (same fencing token, one more release needed); other threads
    and other ``Lock`` objects contend normally."""

    def __init__(
        self,
        client: Client,
        name: str,
        *,
        lease: float,
        wait: Optional[float],
        max_hold: Optional[float],
        on_lost: Optional[OnLost],
        fair: bool = True,
        permits: Optional[int] = None,
        rw: Optional[str] = None,
        owners: Optional[threading.local] = None,
    ) -> None:
        super().__init__(name, lease=lease, wait=wait, max_hold=max_hold, fair=fair, permits=permits, rw=rw)
        self.client = client
        self.on_lost = on_lost
        self._local = threading.local()
        # Each thread's owner; the holds of one RwLock share theirs.
        self._owners = self._local if owners is None else owners

    def _owner(self) -> int:
        owner: Optional[int] = getattr(self._owners, "owner", None)
        if owner is None:
            owner = self._owners.owner = new_owner()
        return owner

    def _held_stack(self) -> "list[Held]":
        stack: Optional[list[Held]] = getattr(self._local, "held", None)
        if stack is None:
            stack = self._local.held = []
        return stack

    def _acquire(self, wait: Optional[float]) -> Optional["Held"]:
        native = self.client._native.acquire(
            self.name, self._owner(), self.lease, wait, self.max_hold, self.fair, self.permits, self.rw
        )
        return None if native is None else Held(native, self.on_lost)

    def acquire(self) -> "Held":
        """Blocks until acquired, up to ``wait`` seconds (raises :class:`LockTimeout`). The GIL
        is released while waiting, and Ctrl-C interrupts the wait (leaving the queue)."""
        held = self._acquire(self.wait)
        if held is None:
            raise LockTimeout(f"lock {self.name!r} is held by someone else")
        return held

    def try_acquire(self) -> Optional["Held"]:
        """Takes the lock if it is free now, else returns None."""
        return self._acquire(0.0)

    def __enter__(self) -> "Held":
        held = self.acquire()
        self._held_stack().append(held)
        return held

    def __exit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self._held_stack().pop()._exit(exc)

class MultiLock(Lock):
    """Several lock names acquired as one (see :meth:`Client.multi_lock`)."""

    _KIND = "dlock.MultiLock"

    def __init__(
        self,
        client: Client,
        names: "list[str]",
        *,
        lease: float,
        wait: Optional[float],
        max_hold: Optional[float],
        on_lost: Optional[OnLost],
    ) -> None:
        super().__init__(client, ",".join(names), lease=lease, wait=wait, max_hold=max_hold, on_lost=on_lost)
        self.names = names

    def _acquire(self, wait: Optional[float]) -> Optional["Held"]:
        native = self.client._native.acquire_multi(self.names, self.lease, wait, self.max_hold)
        return None if native is None else Held(native, self.on_lost)


class Semaphore(Lock):
    """A semaphore's name, number of permits and options (see :meth:`Client.semaphore`): each
    acquire takes a permit of its own; ``with`` releases the one it took."""

    _KIND = "dlock.Semaphore"

    def __repr__(self) -> str:
        return f"<{self._KIND} {self.name!r} permits={self.permits} lease={self.lease}s wait={self.wait}>"


class RwLock:
    """A read-write lock's name (see :meth:`Client.rw_lock`)."""

    def __init__(self, client: Client, name: str) -> None:
        self.client = client
        self.name = name
        self._owners = threading.local()

    def read(
        self,
        *,
        lease: float = DEFAULT_LEASE,
        wait: Optional[float] = None,
        max_hold: Optional[float] = None,
        on_lost: Optional[OnLost] = None,
    ) -> Lock:
        """The read hold, with options as for :meth:`Client.lock`."""
        return self._hold("read", lease, wait, max_hold, on_lost)

    def write(
        self,
        *,
        lease: float = DEFAULT_LEASE,
        wait: Optional[float] = None,
        max_hold: Optional[float] = None,
        on_lost: Optional[OnLost] = None,
    ) -> Lock:
        """The write hold, with options as for :meth:`Client.lock`."""
        return self._hold("write", lease, wait, max_hold, on_lost)

    def _hold(
        self, rw: str, lease: float, wait: Optional[float], max_hold: Optional[float], on_lost: Optional[OnLost]
    ) -> Lock:
        return Lock(
            self.client,
            self.name,
            lease=lease,
            wait=wait,
            max_hold=max_hold,
            on_lost=on_lost,
            rw=rw,
            owners=self._owners,
        )

    def __repr__(self) -> str:
        return f"<dlock.RwLock {self.name!r}>"


class Held(_HeldState):
    """A held lock. Release it once (or leave its ``with`` block); safe to use from any thread."""

    def __init__(self, native: NativeHeld, on_lost: Optional[OnLost] = None) -> None:
        super().__init__(native)
        if on_lost is not None:
            threading.Thread(target=self._watch, args=(on_lost,), name=f"dlock-on-lost-{native.name}", daemon=True).start()

    def _watch(self, on_lost: OnLost) -> None:
        reason = self._native.wait_lost()
        if reason is not None:
            on_lost(self, reason)

    def extend(self, lease: float) -> None:
        """Renews now with ``lease`` seconds, which later renewals keep using."""
        self._native.extend(lease)

    def release(self) -> None:
        """Releases the lock (one level of a reentrant hold). Raises :class:`LockLost` if it
        was lost meanwhile, :class:`NotHeld` if already released."""
        self._native.release()

    def wait_lost(self, timeout: Optional[float] = None) -> Optional[str]:
        """Blocks until the lock is lost (returns the reason), released, or ``timeout``
        seconds pass (returns None)."""
        return self._native.wait_lost(timeout)

    def _exit(self, exc: Optional[BaseException]) -> None:
        try:
            self.release()
        except LockLost:
            if exc is None:
                raise

    def __enter__(self) -> "Held":
        return self

    def __exit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self._exit(exc)
