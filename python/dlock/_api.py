"""One implementation of the behaviour that :mod:`dlock` and :mod:`dlock.aio` share.

Each native operation returns a :class:`dlock._dlock.Call`, which the sync API runs with
``wait()`` (blocking, GIL released) and the asyncio API with ``then(callback)``. Everything
else — the options of each primitive and the spec the native acquire takes, the held
lock's state, the client's factories — lives here once. The two APIs add only where
awaiting differs: running calls, context managers, decorators, whose owner an acquire is
(a thread's, or a task's), and where ``on_lost`` runs (a thread, or a task).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, Dict, Generic, Iterable, List, Optional, Protocol, Tuple, TypeVar

from ._dlock import DEFAULT_LEASE, Call, NativeClient, NativeHeld, redact

HeldT = TypeVar("HeldT", bound="HeldBase")
LockT = TypeVar("LockT")
MultiT = TypeVar("MultiT")
RwT = TypeVar("RwT")
SemT = TypeVar("SemT")

#: What an acquire takes: ``(name, names, permits, rw)``, a name (with ``permits`` for a
#: semaphore's permit, ``rw`` for a read-write lock's hold) or ``names`` (a multi-lock).
Target = Tuple[Optional[str], Optional[List[str]], Optional[int], Optional[str]]
#: What the native acquire takes: the target, then ``(lease, wait, max_hold, owner, fair,
#: compat)``. A tuple, built and read on every acquire: a dict of the same costs several
#: times as much on both sides.
Spec = Tuple[
    Optional[str], Optional[List[str]], Optional[int], Optional[str],
    float, Optional[float], Optional[float], Optional[int], bool, Optional[str],
]

#: ``on_lost(held, reason)``: the sync API calls it from a thread, the asyncio API on the
#: loop (awaiting it if it returns a coroutine).
OnLost = Callable[[Any, str], Any]


class Owners(Protocol):
    """Whose acquires are whose: one owner per thread (sync) or per task (asyncio)."""

    def owner(self) -> int: ...


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


@dataclass(frozen=True)
class Leader:
    """An election's leader: its term (the fencing token of the tenure that leads, larger than
    every earlier term's) and the value it proclaimed."""

    term: int
    value: str


def leader(raw: "Optional[Tuple[int, str]]") -> Optional[Leader]:
    return None if raw is None else Leader(*raw)


@dataclass(frozen=True)
class Histogram:
    """A distribution of durations in seconds: how many, their sum and maximum, and the
    cumulative count at each bucket's upper bound, as Prometheus keeps it: ``(("0.001", n),
    …, ("+Inf", count))``."""

    count: int
    sum: float
    max: float
    buckets: Tuple[Tuple[str, int], ...]


@dataclass(frozen=True)
class LockStats:
    """What a client counted about one lock name and kind (``lock``, ``semaphore``, ``read``
    or ``write``). A multi-lock counts as its members; names past the first 1,024 are counted
    together under the name ``""``."""

    name: str
    kind: str
    #: New holds granted (reentries apart).
    acquired: int
    #: Of those, the holds that waited for another holder first.
    handed_off: int
    reentered: int
    #: Holds released by their owner (the last level).
    released: int
    #: Try-acquires that found the lock held.
    busy: int
    timed_out: int
    cancelled: int
    #: Acquires that ended with an error.
    failed: int
    #: Holds renewed by the watchdog (one per hold per renewal sent).
    renewals: int
    renewals_failed: int
    #: Holds lost, per reason (``expired``, ``not-owner``, ``max-hold``, ``closed``,
    #: ``disconnected``, ``session-expired``).
    lost: Dict[str, int]
    #: Holds now.
    held: int
    #: Acquires waiting now.
    waiting: int
    #: From an acquire's start to its grant.
    wait: Histogram
    #: From a grant to its release or loss.
    hold: Histogram
    #: A semaphore's number of permits.
    permits: Optional[int] = None


def _histogram(raw: Dict[str, Any]) -> Histogram:
    buckets = tuple((le, n) for le, n in raw["buckets"])
    return Histogram(raw["count"], raw["sum_seconds"], raw["max_seconds"], buckets)


def stats(raw: Dict[str, Any]) -> List[LockStats]:
    """The native snapshot (``dlock::json::stats_to_json``) as :class:`LockStats`."""
    return [
        LockStats(**{**s, "wait": _histogram(s["wait"]), "hold": _histogram(s["hold"])})
        for s in raw["locks"]
    ]


class ElectionBase:
    """An election's name and options: the lock of that name, whose holder publishes a value
    (docs/PROTOCOL.md §20)."""

    def __init__(self, client: "ClientBase[Any, Any, Any, Any]", name: str, *, lease: float, wait: Optional[float]) -> None:
        self.client = client
        self.name = name
        self.lease = lease
        self.wait = wait

    def _campaign(self, value: str) -> "Call[NativeHeld]":
        return self.client._native.campaign(self.name, value, self.lease, self.wait)

    def __repr__(self) -> str:
        kind = f"{type(self).__module__}.{type(self).__qualname__}"
        return f"<{kind} {self.name!r} lease={self.lease}s wait={self.wait}>"


def status(name: str, raw: "tuple[Optional[str], int, int, Optional[float], int, List[str]]") -> LockStatus:
    owner, count, fencing_token, ttl, latest_token, waiters = raw
    return LockStatus(name, owner, count, fencing_token, ttl, latest_token, tuple(waiters))


def connect_options(
    waiter_lease: Optional[float], request_timeout: Optional[float], lock_delay: Optional[float]
) -> Dict[str, Optional[float]]:
    return {"waiter_lease": waiter_lease, "request_timeout": request_timeout, "lock_delay": lock_delay}


class Acquirable(ABC, Generic[HeldT]):
    """A lock, multi-lock or semaphore with its options: what its acquire asks for."""

    #: The held object an acquire gives, set by each API.
    _held_class: Callable[[NativeHeld, Optional[OnLost]], HeldT]
    #: Whether acquires by one owner nest: a lock's do. A multi-lock and a semaphore's
    #: permits are not reentrant: they acquire with no owner.
    _reentrant = True

    def __init__(
        self,
        client: "ClientBase[Any, Any, Any, Any]",
        *,
        lease: float,
        wait: Optional[float],
        max_hold: Optional[float],
        on_lost: Optional[OnLost],
        fair: bool,
        owners: Owners,
        compat: Optional[str] = None,
    ) -> None:
        self.client = client
        self.lease = lease
        self.wait = wait
        self.max_hold = max_hold
        self.on_lost = on_lost
        self.fair = fair
        self.compat = compat
        self._owners = owners

    @abstractmethod
    def _target(self) -> Target:
        """What is acquired."""

    def _spec(self) -> Spec:
        owner = self._owners.owner() if self._reentrant else None
        return self._target() + (self.lease, self.wait, self.max_hold, owner, self.fair, self.compat)

    def _acquired(self, native: NativeHeld) -> HeldT:
        return self._held_class(native, self.on_lost)

    def _maybe(self, native: Optional[NativeHeld]) -> Optional[HeldT]:
        return None if native is None else self._acquired(native)

    def _options(self) -> str:
        return f"lease={self.lease}s wait={self.wait}"

    @abstractmethod
    def _what(self) -> str:
        """The primitive as its repr shows it: its name(s) and kind."""

    def __repr__(self) -> str:
        return f"<{type(self).__module__}.{type(self).__qualname__} {self._what()} {self._options()}>"


class LockBase(Acquirable[HeldT]):
    """One lock name (or a read-write lock's hold). Acquires by the same owner — the same
    thread or task, through the same object — are reentrant."""

    def __init__(self, client: "ClientBase[Any, Any, Any, Any]", name: str, *, rw: Optional[str] = None, **options: Any) -> None:
        super().__init__(client, **options)
        self.name = name
        #: ``"read"`` or ``"write"``: a hold of a read-write lock; None for a lock.
        self.rw = rw

    def _target(self) -> Target:
        return (self.name, None, None, self.rw)

    def _what(self) -> str:
        return repr(self.name) + (f" {self.rw}" if self.rw else "")


class MultiLockBase(Acquirable[HeldT]):
    """Several lock names acquired as one (not reentrant)."""

    _reentrant = False

    def __init__(self, client: "ClientBase[Any, Any, Any, Any]", names: "list[str]", **options: Any) -> None:
        super().__init__(client, **options)
        self.names = names

    def _target(self) -> Target:
        return (None, self.names, None, None)

    def _what(self) -> str:
        return repr(self.names)


class SemaphoreBase(Acquirable[HeldT]):
    """A semaphore's name and number of permits; each acquire takes one permit."""

    _reentrant = False

    def __init__(self, client: "ClientBase[Any, Any, Any, Any]", name: str, *, permits: int, **options: Any) -> None:
        if isinstance(permits, bool) or not isinstance(permits, int):
            raise TypeError(f"permits must be an int, got {type(permits).__name__}")
        super().__init__(client, **options)
        self.name = name
        self.permits = permits

    def _target(self) -> Target:
        return (self.name, None, self.permits, None)

    def _what(self) -> str:
        return f"{self.name!r} permits={self.permits}"


class RwLockBase(Generic[LockT]):
    """A read-write lock's name: :meth:`read` and :meth:`write` give its holds. The holds of
    one object share their owners (per thread, or per task): a writer may read beside its
    write hold (downgrade)."""

    _lock_class: Callable[..., LockT]

    def __init__(self, client: "ClientBase[Any, Any, Any, Any]", name: str, owners: Owners) -> None:
        self.client = client
        self.name = name
        self._owners = owners

    def read(
        self,
        *,
        lease: float = DEFAULT_LEASE,
        wait: Optional[float] = None,
        max_hold: Optional[float] = None,
        on_lost: Optional[OnLost] = None,
    ) -> LockT:
        """The read hold, with options as for :meth:`dlock.Client.lock`."""
        return self._hold("read", lease=lease, wait=wait, max_hold=max_hold, on_lost=on_lost)

    def write(
        self,
        *,
        lease: float = DEFAULT_LEASE,
        wait: Optional[float] = None,
        max_hold: Optional[float] = None,
        on_lost: Optional[OnLost] = None,
    ) -> LockT:
        """The write hold, with options as for :meth:`dlock.Client.lock`."""
        return self._hold("write", lease=lease, wait=wait, max_hold=max_hold, on_lost=on_lost)

    def _hold(self, rw: str, **options: Any) -> LockT:
        return self._lock_class(self.client, self.name, rw=rw, fair=True, owners=self._owners, **options)

    def __repr__(self) -> str:
        return f"<{type(self).__module__}.{type(self).__qualname__} {self.name!r}>"


class HeldBase:
    """The state of a held lock: its name, fencing tokens and whether it was lost."""

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
        """One of ``dlock.LOST_REASONS`` once lost, else None."""
        return self._native.lost_reason

    @property
    def valid_for(self) -> float:
        """Seconds left of the local validity: the server cannot give the lock to another
        before it runs out, and renewals move it on. Work that must not overlap the next
        holder's stops by then (0 once it has passed; the lock is then reported lost)."""
        return self._native.valid_for

    def __repr__(self) -> str:
        if self.lost_reason is not None:
            state = f"lost ({self.lost_reason})"
        else:
            state = "held" if self._native.held else "released"
        kind = f"{type(self).__module__}.{type(self).__qualname__}"
        return f"<{kind} {self.name!r} fencing_token={self.fencing_token} {state}>"


class ClientBase(Generic[LockT, MultiT, RwT, SemT]):
    """A connection to one lock backend and the primitives it makes."""

    _lock_class: Callable[..., LockT]
    _multi_lock_class: Callable[..., MultiT]
    _rw_lock_class: Callable[..., RwT]
    _semaphore_class: Callable[..., SemT]
    #: A fresh owner map: per thread (sync) or per task (asyncio).
    _owners: Callable[[], Owners]

    def __init_subclass__(cls, *, primitives: "Tuple[Any, Any, Any, Any]", owners: Callable[[], Owners]) -> None:
        """Each API names its classes: ``primitives`` are its lock, multi-lock, read-write
        lock and semaphore classes."""
        super().__init_subclass__()
        cls._lock_class, cls._multi_lock_class, cls._rw_lock_class, cls._semaphore_class = primitives
        cls._owners = owners

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
        compat: Optional[str] = None,
    ) -> LockT:
        """A lock to acquire. ``lease`` is renewed while held; ``wait`` bounds its acquire
        (None: as long as it takes); ``max_hold`` stops renewal; ``on_lost(held, reason)`` is
        called once if it is lost (from a background thread; with :mod:`dlock.aio`, on the
        loop, awaited if it is a coroutine function). ``fair=False`` (Redis): take the lock
        when it is free even if others queue, and on release free it for anyone instead of
        handing it to the next in line: more throughput when some contenders are slow to
        answer, no order (ZooKeeper refuses it). ``compat="redisson"`` (redis:// and
        redis-cluster://): lay this lock out as Redisson's ``RLock``, shared with Java services,
        as every lock of a ``?compat=redisson`` client is (the first such lock connects a
        second client beside this one). The lock is also a decorator::

            @client.lock("nightly-report", wait=0)
            def report() -> None: ...
        """
        return self._lock_class(
            self,
            name,
            lease=lease,
            wait=wait,
            max_hold=max_hold,
            on_lost=on_lost,
            fair=fair,
            owners=self._owners(),
            compat=compat,
        )

    def multi_lock(
        self,
        names: Iterable[str],
        *,
        lease: float = DEFAULT_LEASE,
        wait: Optional[float] = None,
        max_hold: Optional[float] = None,
        on_lost: Optional[OnLost] = None,
    ) -> MultiT:
        """Several locks to acquire as one: all of them or none, in one canonical order (names
        sorted) so that overlapping sets never deadlock; losing one loses them all. Options as
        for :meth:`lock`; ``wait`` bounds the whole set. Not reentrant. The held object's
        ``fencing_tokens`` maps each name to its token::

            with client.multi_lock(["stock/1", "stock/2"]) as held:
                move(held.fencing_tokens)
        """
        return self._multi_lock_class(
            self, list(names), lease=lease, wait=wait, max_hold=max_hold, on_lost=on_lost, fair=True, owners=self._owners()
        )

    def rw_lock(self, name: str) -> RwT:
        """A read-write lock: ``read()`` and ``write()`` give its holds, acquired like locks.
        Many readers hold it at once, or one writer alone; a reader that arrives while a writer
        waits queues behind it (writer preference). In one thread (or task), the read and write
        holds of one object belong to one owner: each is reentrant, and a writer may read
        beside its write hold, then release the write (downgrade); asking to write while
        reading raises :class:`InvalidArgument` (no upgrade). Redis, Redis Cluster and
        ZooKeeper::

            doc = client.rw_lock("doc/42")
            with doc.read():
                show()
            with doc.write():
                edit()
        """
        return self._rw_lock_class(self, name, self._owners())

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
    ) -> SemT:
        """A semaphore with ``permits`` permits (1 to 1024): at most that many holders at a
        time, across every client (Redisson's ``PermitExpirableSemaphore``). Each acquire takes
        a permit of its own, with its own lease, renewal, fencing token and release; options
        as for :meth:`lock`. Not reentrant. Every client must give the same ``permits``: on
        Redis, while anyone holds or waits, another number raises :class:`InvalidArgument`.
        Redis, Redis Cluster and ZooKeeper (Redlock refuses it)::

            with client.semaphore("pdf-render", permits=4):
                render()
        """
        return self._semaphore_class(
            self,
            name,
            permits=permits,
            lease=lease,
            wait=wait,
            max_hold=max_hold,
            on_lost=on_lost,
            fair=fair,
            owners=self._owners(),
        )

    @property
    def closed(self) -> bool:
        return self._native.closed

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"id={self._native.id}"
        return f"<{type(self).__module__}.{type(self).__qualname__} {redact(self._url)} {state}>"
