//! The tenure index: each lock an owner of the engine holds or waits for, found by hold id
//! (its sequence number), by (kind, name, owner) for reentrancy, and by op id while its
//! acquire is pending.

use core::time::Duration;
use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};

use crate::fx::Fx;
use crate::lock::Backend;
use crate::status::HoldInfo;
use crate::time::Instant;
use crate::types::{Kind, OpId, Wait};

/// One tenure (or attempted tenure) of a lock by one owner of the engine.
#[derive(Clone, Debug)]
pub(crate) struct Tenure<B: Backend> {
    pub(crate) name: String,
    /// Its sequence number: its hold id once held, and with the client id its owner token on
    /// the server ([`Backend::token`](super::Backend::token)), which is built when a request
    /// needs it rather than kept.
    pub(crate) seq: u64,
    pub(crate) owner: u64,
    /// What the application asked for.
    pub(crate) kind: Kind,
    /// The lease the server grants (on ZooKeeper: the session timeout).
    pub(crate) lease: Duration,
    pub(crate) max_hold: Option<Duration>,
    /// When its state began: the acquire's start while pending, the grant once held.
    pub(crate) since: Instant,
    /// What the backend keeps for it (keys, a directory).
    pub(crate) data: B::Tenure,
    pub(crate) state: State<B>,
}

#[derive(Clone, Debug)]
pub(crate) enum State<B: Backend> {
    /// Boxed: a tenure is held far longer than it is pending, and a held one stays small.
    Pending(Box<Waiting<B::Pending>>),
    Held(Held<B::Held>),
}

/// A pending acquire: its op, how long it may wait, whether it waited for a holder, and where
/// the backend's protocol stands.
#[derive(Clone, Debug)]
pub(crate) struct Waiting<P> {
    pub(crate) op: OpId,
    pub(crate) wait: Wait,
    /// It found the lock held and waits for the holder ([`Lifecycle::waits`](super::Lifecycle::waits)).
    pub(crate) waited: bool,
    pub(crate) state: P,
}

#[derive(Clone, Debug)]
pub(crate) struct Held<H> {
    pub(crate) fencing_token: u64,
    /// Granted levels: acquisitions reported to the application minus releases.
    pub(crate) count: u32,
    pub(crate) valid_until: Instant,
    /// Where its renewal stands.
    pub(crate) watch: Watch,
    /// What the backend keeps for a hold (a node's path, reentries under way).
    pub(crate) data: H,
}

/// Where a hold's renewal stands. With its validity, this gives the hold's one timer: the
/// next renewal, or else the end of its validity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Watch {
    /// No renewal is due: its backend keeps it without them (a ZooKeeper session's node), it
    /// is not yet granted, or its validity ran out before one was sent.
    Idle,
    /// Its next renewal is due then.
    Due(Instant),
    /// A renewal of it is under way.
    Sent,
}

impl<H> Held<H> {
    /// A tenure just granted with these levels, valid until `valid_until`.
    pub(crate) fn new(fencing_token: u64, count: u32, valid_until: Instant, data: H) -> Self {
        Self {
            fencing_token,
            count,
            valid_until,
            watch: Watch::Idle,
            data,
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Tenures<B: Backend> {
    /// Boxed: a map's nodes keep room for entries they do not hold, and a tenure is large.
    by_seq: BTreeMap<u64, Box<Tenure<B>>>,
    /// (kind, name, owner) → tenure, for reentrancy and for "already waiting": the hash of
    /// the three and the tenure, which a lookup checks against the tenure itself, so that the
    /// index keeps no copy of the name.
    slots: BTreeSet<(u64, u64)>,
    /// Pending acquire op → tenure, for cancel.
    acquires: BTreeMap<OpId, u64>,
}

impl<B: Backend> Tenures<B> {
    pub(crate) fn new() -> Self {
        Self {
            by_seq: BTreeMap::new(),
            slots: BTreeSet::new(),
            acquires: BTreeMap::new(),
        }
    }

    /// A new pending tenure. A lock's or a read-write hold's is found by (kind, name, owner)
    /// from now on; a permit is never reentered.
    pub(crate) fn insert(&mut self, seq: u64, tenure: Tenure<B>) {
        if let Some(slot) = slot(&tenure) {
            self.slots.insert((slot, seq));
        }
        if let State::Pending(w) = &tenure.state {
            self.acquires.insert(w.op, seq);
        }
        self.by_seq.insert(seq, Box::new(tenure));
    }

    pub(crate) fn get(&self, seq: u64) -> Option<&Tenure<B>> {
        self.by_seq.get(&seq).map(|t| &**t)
    }

    pub(crate) fn get_mut(&mut self, seq: u64) -> Option<&mut Tenure<B>> {
        self.by_seq.get_mut(&seq).map(|t| &mut **t)
    }

    /// Every tenure, pending or held.
    pub(crate) fn all(&self) -> impl Iterator<Item = &Tenure<B>> {
        self.by_seq.values().map(|t| &**t)
    }

    pub(crate) fn seqs(&self) -> Vec<u64> {
        self.by_seq.keys().copied().collect()
    }

    /// The held tenures, in sequence order.
    pub(crate) fn holds(&self) -> Vec<u64> {
        self.by_seq
            .iter()
            .filter(|(_, t)| matches!(t.state, State::Held(_)))
            .map(|(seq, _)| *seq)
            .collect()
    }

    /// Whether any pending tenure is in a state `f` picks.
    pub(crate) fn any_pending(&self, f: impl Fn(&B::Pending) -> bool) -> bool {
        self.by_seq
            .values()
            .any(|t| matches!(&t.state, State::Pending(w) if f(&w.state)))
    }

    /// The pending tenures in a state `f` picks, in sequence order.
    pub(crate) fn pending_where(&self, f: impl Fn(&B::Pending) -> bool) -> Vec<u64> {
        self.by_seq
            .iter()
            .filter(|(_, t)| matches!(&t.state, State::Pending(w) if f(&w.state)))
            .map(|(seq, _)| *seq)
            .collect()
    }

    /// The tenure of `owner` of `kind` on `name`, pending or held.
    pub(crate) fn slot(&self, kind: Kind, name: &str, owner: u64) -> Option<u64> {
        let hash = slot_hash(kind, name, owner);
        self.slots
            .range((hash, 0)..=(hash, u64::MAX))
            .map(|&(_, seq)| seq)
            .find(|seq| {
                self.get(*seq)
                    .is_some_and(|t| t.kind == kind && t.owner == owner && t.name == name)
            })
    }

    /// The tenure whose acquire `op` is pending.
    pub(crate) fn pending_op(&self, op: OpId) -> Option<u64> {
        self.acquires.get(&op).copied()
    }

    pub(crate) fn pending(&self, seq: u64) -> Option<&Waiting<B::Pending>> {
        match self.get(seq) {
            Some(Tenure {
                state: State::Pending(w),
                ..
            }) => Some(w),
            _ => None,
        }
    }

    pub(crate) fn pending_mut(&mut self, seq: u64) -> Option<&mut Waiting<B::Pending>> {
        match self.get_mut(seq) {
            Some(Tenure {
                state: State::Pending(w),
                ..
            }) => Some(w),
            _ => None,
        }
    }

    pub(crate) fn held(&self, seq: u64) -> Option<&Held<B::Held>> {
        match self.get(seq) {
            Some(Tenure {
                state: State::Held(h),
                ..
            }) => Some(h),
            _ => None,
        }
    }

    pub(crate) fn held_mut(&mut self, seq: u64) -> Option<&mut Held<B::Held>> {
        match self.get_mut(seq) {
            Some(Tenure {
                state: State::Held(h),
                ..
            }) => Some(h),
            _ => None,
        }
    }

    /// Removes a tenure and everything in the index that points at it.
    pub(crate) fn remove(&mut self, seq: u64) -> Option<Tenure<B>> {
        let t = *self.by_seq.remove(&seq)?;
        if let Some(slot) = slot(&t) {
            self.slots.remove(&(slot, seq));
        }
        if let State::Pending(w) = &t.state {
            self.acquires.remove(&w.op);
        }
        Some(t)
    }

    /// A pending tenure becomes held. Returns the acquire's op, `None` if `seq` is not pending.
    /// Pending `seq` is held from `now` on: its acquire's op, when the acquire started and
    /// whether it waited for a holder.
    pub(crate) fn grant(
        &mut self,
        seq: u64,
        held: Held<B::Held>,
        now: Instant,
    ) -> Option<(OpId, Instant, bool)> {
        let t = self.by_seq.get_mut(&seq)?;
        let State::Pending(w) = &t.state else {
            return None;
        };
        let granted = (w.op, t.since, w.waited);
        t.state = State::Held(held);
        t.since = now;
        self.acquires.remove(&granted.0);
        Some(granted)
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
fn slot<B: Backend>(t: &Tenure<B>) -> Option<u64> {
    (!matches!(t.kind, Kind::Semaphore { .. })).then(|| slot_hash(t.kind, &t.name, t.owner))
}

/// The slot of (kind, name, owner) in the index: a hash without a random key, so that the
/// engine stays deterministic (two slots may share one; [`Tenures::slot`] tells them apart).
/// [`Fx`]: the index needs spread, not resistance to names chosen to collide (names that
/// share a slot cost one more comparison each in [`Tenures::slot`], never a wrong tenure),
/// and SipHash took a tenth of the engine's instructions per acquire and release.
fn slot_hash(kind: Kind, name: &str, owner: u64) -> u64 {
    let mut h = Fx::default();
    (kind, name, owner).hash(&mut h);
    h.finish()
}
