//! The tenures of a machine on Redis keys (one Redis, Redlock): each lock an owner of the
//! engine holds or waits for, found by hold id, by (kind, name, owner) for reentrancy, and by op id
//! while its acquire is pending — and what a held tenure does the same way on either: its
//! timers, its validity, its renewal batches and its snapshot.

use core::time::Duration;
use std::collections::BTreeMap;

use crate::status::HoldInfo;
use crate::redis::{self, Fairness, LockKeys, Mode, RedisOp, RwHold, RwKeys, SemaphoreKeys};
use crate::time::{Instant, drift};
use crate::timers::{Timer, Timers};
use crate::types::{Kind, OpId};

/// One tenure (or attempted tenure) of a lock by one owner of the engine. `P` is what the
/// machine keeps while the acquire is pending.
#[derive(Debug)]
pub(crate) struct Tenure<P> {
    pub(crate) name: String,
    pub(crate) owner: u64,
    /// The lock's keys; for a permit or a read-write hold, `lock` is the hold's own hash.
    pub(crate) keys: LockKeys,
    /// What the tenure holds.
    pub(crate) target: Target,
    pub(crate) token: String,
    pub(crate) lease: Duration,
    pub(crate) max_hold: Option<Duration>,
    /// How its acquires and its final release treat waiters (one Redis; Redlock never queues).
    pub(crate) fairness: Fairness,
    pub(crate) state: State<P>,
}

/// What a tenure holds: a lock, a permit of a semaphore, or a hold of a read-write lock (one
/// Redis for the last two).
#[derive(Debug)]
pub(crate) enum Target {
    Lock,
    Permit {
        keys: SemaphoreKeys,
        permits: u32,
    },
    Rw {
        keys: RwKeys,
        write: bool,
        /// A read hold beside the same owner's write hold: that hold's owner token.
        downgrade: Option<String>,
    },
}

impl Target {
    /// What the application asked for.
    pub(crate) fn kind(&self) -> Kind {
        match self {
            Target::Lock => Kind::Mutex,
            Target::Permit { permits, .. } => Kind::Semaphore { permits: *permits },
            Target::Rw { write: true, .. } => Kind::Write,
            Target::Rw { write: false, .. } => Kind::Read,
        }
    }
}

impl<P> Tenure<P> {
    /// The (PERMIT- or RW-)ACQUIRE of this tenure at `count` levels.
    pub(crate) fn acquire(
        &self,
        lease: Duration,
        count: u32,
        mode: Mode,
        waiter_lease: Duration,
    ) -> RedisOp {
        let token = &self.token;
        match &self.target {
            Target::Lock => redis::acquire(
                &self.keys,
                token,
                lease,
                count,
                mode,
                waiter_lease,
                self.fairness,
            ),
            Target::Permit { keys, permits } => redis::permit_acquire(
                keys,
                token,
                lease,
                *permits,
                mode,
                waiter_lease,
                self.fairness,
            ),
            Target::Rw { .. } => {
                redis::rw_acquire(&self.rw_hold(), lease, count, mode, waiter_lease)
            }
        }
    }

    /// The RELEASE down to `count` levels (a permit has one).
    pub(crate) fn release(&self, count: u32) -> RedisOp {
        match &self.target {
            Target::Lock => redis::release(&self.keys, &self.token, count, self.fairness),
            Target::Permit { keys, .. } => redis::permit_release(keys, &self.token, self.fairness),
            Target::Rw { .. } => redis::rw_release(&self.rw_hold(), count),
        }
    }

    /// The DEQUEUE of a waiter that gives up.
    pub(crate) fn dequeue(&self) -> RedisOp {
        match &self.target {
            Target::Lock => redis::dequeue(&self.keys, &self.token),
            Target::Permit { keys, .. } => redis::permit_dequeue(keys, &self.token),
            Target::Rw { .. } => redis::rw_dequeue(&self.rw_hold()),
        }
    }

    fn rw_hold(&self) -> RwHold<'_> {
        let Target::Rw {
            keys,
            write,
            downgrade,
        } = &self.target
        else {
            unreachable!("only a read-write tenure has a read-write hold")
        };
        RwHold {
            keys,
            token: &self.token,
            write: *write,
            downgrade: downgrade.as_deref(),
        }
    }
}

#[derive(Debug)]
pub(crate) enum State<P> {
    Pending(P),
    Held(Held),
}

/// The pending state names the acquire it belongs to.
pub(crate) trait Pending {
    fn op(&self) -> OpId;
}

#[derive(Debug)]
pub(crate) struct Held {
    pub(crate) fencing_token: u64,
    /// Granted levels: acquisitions reported to the application minus releases.
    pub(crate) count: u32,
    /// Reentrant acquires sent and not yet answered (one Redis; Redlock counts locally).
    pub(crate) reentering: u32,
    pub(crate) valid_until: Instant,
    pub(crate) renewing: bool,
}

impl Held {
    /// A tenure just granted with these levels, valid until `valid_until`.
    pub(crate) fn new(fencing_token: u64, count: u32, valid_until: Instant) -> Self {
        Self {
            fencing_token,
            count,
            reentering: 0,
            valid_until,
            renewing: false,
        }
    }
}

#[derive(Debug)]
pub(crate) struct Tenures<P> {
    by_seq: BTreeMap<u64, Tenure<P>>,
    /// (kind, name, owner) → tenure, for reentrancy and for "already waiting".
    slots: BTreeMap<(Kind, String, u64), u64>,
    /// Pending acquire op → tenure, for cancel.
    acquires: BTreeMap<OpId, u64>,
}

impl<P: Pending> Tenures<P> {
    pub(crate) fn new() -> Self {
        Self {
            by_seq: BTreeMap::new(),
            slots: BTreeMap::new(),
            acquires: BTreeMap::new(),
        }
    }

    /// A new pending tenure. A lock's or a read-write hold's is found by (kind, name, owner)
    /// from now on; a permit is never reentered.
    pub(crate) fn insert(&mut self, seq: u64, tenure: Tenure<P>) {
        if let Some(slot) = slot(&tenure) {
            self.slots.insert(slot, seq);
        }
        if let State::Pending(p) = &tenure.state {
            self.acquires.insert(p.op(), seq);
        }
        self.by_seq.insert(seq, tenure);
    }

    pub(crate) fn get(&self, seq: u64) -> Option<&Tenure<P>> {
        self.by_seq.get(&seq)
    }

    pub(crate) fn get_mut(&mut self, seq: u64) -> Option<&mut Tenure<P>> {
        self.by_seq.get_mut(&seq)
    }

    pub(crate) fn seqs(&self) -> Vec<u64> {
        self.by_seq.keys().copied().collect()
    }

    /// The tenure of `owner` of `kind` on `name`, pending or held.
    pub(crate) fn slot(&self, kind: Kind, name: &str, owner: u64) -> Option<u64> {
        self.slots.get(&(kind, name.to_owned(), owner)).copied()
    }

    /// The tenure whose acquire `op` is pending.
    pub(crate) fn pending_op(&self, op: OpId) -> Option<u64> {
        self.acquires.get(&op).copied()
    }

    pub(crate) fn pending_mut(&mut self, seq: u64) -> Option<&mut P> {
        match self.by_seq.get_mut(&seq) {
            Some(Tenure {
                state: State::Pending(p),
                ..
            }) => Some(p),
            _ => None,
        }
    }

    pub(crate) fn held(&self, seq: u64) -> Option<&Held> {
        match self.by_seq.get(&seq) {
            Some(Tenure {
                state: State::Held(h),
                ..
            }) => Some(h),
            _ => None,
        }
    }

    pub(crate) fn held_mut(&mut self, seq: u64) -> Option<&mut Held> {
        match self.by_seq.get_mut(&seq) {
            Some(Tenure {
                state: State::Held(h),
                ..
            }) => Some(h),
            _ => None,
        }
    }

    /// Removes a tenure, everything that points at it and its timers.
    pub(crate) fn forget(&mut self, seq: u64, timers: &mut Timers) -> Option<Tenure<P>> {
        let t = self.by_seq.remove(&seq)?;
        if let Some(slot) = slot(&t) {
            self.slots.remove(&slot);
        }
        if let State::Pending(p) = &t.state {
            self.acquires.remove(&p.op());
        }
        for timer in [
            Timer::Renew,
            Timer::Expire,
            Timer::MaxHold,
            Timer::WaitDeadline,
            Timer::Refresh,
        ] {
            timers.clear(timer(seq));
        }
        Some(t)
    }

    /// A pending tenure becomes `held`, renewed at `renew_at`: its timers are set and the
    /// acquire's op is returned for the terminal event.
    pub(crate) fn grant(
        &mut self,
        seq: u64,
        held: Held,
        renew_at: Instant,
        now: Instant,
        timers: &mut Timers,
    ) -> Option<OpId> {
        let t = self.by_seq.get_mut(&seq)?;
        let State::Pending(p) = &t.state else {
            return None;
        };
        let op = p.op();
        let valid_until = held.valid_until;
        t.state = State::Held(held);
        self.acquires.remove(&op);
        timers.clear(Timer::WaitDeadline(seq));
        timers.clear(Timer::Refresh(seq));
        timers.set(Timer::Expire(seq), valid_until);
        timers.set(Timer::Renew(seq), renew_at.max(now));
        if let Some(max) = t.max_hold {
            timers.set(Timer::MaxHold(seq), now + max);
        }
        Some(op)
    }

    /// The server (a majority) kept `seq` for `lease` from a request sent at `sent`: the
    /// validity moves on (never back) and the next renewal is due a third of a lease after
    /// `sent`. Returns the validity, `None` if `seq` is not held.
    pub(crate) fn renewed(
        &mut self,
        seq: u64,
        sent: Instant,
        lease: Duration,
        now: Instant,
        timers: &mut Timers,
    ) -> Option<Instant> {
        let h = self.held_mut(seq)?;
        h.valid_until = h.valid_until.max(sent + lease - drift(lease));
        timers.set(Timer::Expire(seq), h.valid_until);
        if !h.renewing {
            timers.set(Timer::Renew(seq), (sent + lease / 3).max(now));
        }
        Some(h.valid_until)
    }

    /// The holds to renew with `seq`: it and every other hold due within a sixth of its lease
    /// — but none whose validity has already run out (after a pause, say): its expiry, due
    /// as well, reports it lost, and a renewal would only keep the lock from others. Each is
    /// marked as renewing, with the lease it asks for.
    pub(crate) fn due_renewals(
        &mut self,
        seq: u64,
        now: Instant,
        timers: &mut Timers,
    ) -> Vec<(u64, Duration)> {
        let Some(t) = self.by_seq.get(&seq) else {
            return Vec::new();
        };
        let mut due = vec![seq];
        due.extend(timers.take_until(now + t.lease / 6, |timer| match timer {
            Timer::Renew(s) => Some(s),
            _ => None,
        }));
        let mut items = Vec::with_capacity(due.len());
        for s in due {
            if let Some(Tenure {
                state: State::Held(h),
                lease,
                ..
            }) = self.by_seq.get_mut(&s)
                && !h.renewing
                && h.valid_until > now
            {
                h.renewing = true;
                items.push((s, *lease));
            }
        }
        items
    }

    /// One EXTEND for `items` (hold, lease), each asking the server to keep its lock for the
    /// lease plus `lock_delay`.
    pub(crate) fn extend(&self, items: &[(u64, Duration)], lock_delay: Duration) -> RedisOp {
        redis::extend(items.iter().map(|(s, lease)| {
            let t = &self.by_seq[s];
            (t.keys.lock.as_str(), t.token.as_str(), *lease + lock_delay)
        }))
    }

    /// A snapshot of a held lock.
    pub(crate) fn info(&self, seq: u64) -> Option<HoldInfo> {
        let t = self.by_seq.get(&seq)?;
        let State::Held(h) = &t.state else {
            return None;
        };
        Some(HoldInfo {
            name: t.name.clone(),
            owner: t.owner,
            fencing_token: h.fencing_token,
            count: h.count,
            lease: t.lease,
            valid_until: h.valid_until,
        })
    }
}

/// Where a reentrant tenure is found; a permit has no place (every acquire is a new one).
fn slot<P>(t: &Tenure<P>) -> Option<(Kind, String, u64)> {
    let kind = t.target.kind();
    (!matches!(kind, Kind::Semaphore { .. })).then(|| (kind, t.name.clone(), t.owner))
}
