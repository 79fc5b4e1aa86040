//! What an engine counts about its locks, per lock name and kind, from its own injected time:
//! acquisitions, how long they waited and held, hand-offs, renewals, losses by reason and
//! acquires that ended without the lock. The lifecycle records each at the point where it
//! decides (a grant, a reentry, a release, a loss, an abandoned acquire, a renewal sent or
//! settled), so every backend and every host counts the same way;
//! [`Engine::stats`](crate::Engine::stats) takes a snapshot.

use core::fmt;
use core::time::Duration;
use std::collections::{HashMap, VecDeque};

use crate::fx::FxBuild;
use crate::types::{Kind, LostReason, NotAcquired};

/// Upper bounds of the wait and hold histograms' buckets: 1 ms to 5 min, roughly ×2.5 apart,
/// Prometheus's default buckets widened at both ends (a hold often lasts minutes). A last,
/// unbounded bucket takes the rest.
pub const BUCKETS: [Duration; 15] = [
    Duration::from_millis(1),
    Duration::from_millis(5),
    Duration::from_millis(10),
    Duration::from_millis(25),
    Duration::from_millis(50),
    Duration::from_millis(100),
    Duration::from_millis(250),
    Duration::from_millis(500),
    Duration::from_secs(1),
    Duration::from_millis(2500),
    Duration::from_secs(5),
    Duration::from_secs(10),
    Duration::from_secs(30),
    Duration::from_secs(60),
    Duration::from_secs(300),
];

/// At most this many (name, kind) pairs are counted apart; the rest are counted together under
/// [`OTHER_NAMES`], so that a client taking millions of distinct locks keeps bounded memory
/// (and a metrics system bounded cardinality).
pub const MAX_STATS_NAMES: usize = 1024;

/// The name under which locks past the first [`MAX_STATS_NAMES`] are counted: empty, which no
/// lock name is.
pub const OTHER_NAMES: &str = "";

/// A distribution of durations: how many, their sum and maximum, and how many fell in each of
/// [`BUCKETS`] (`buckets[i]`: at most `BUCKETS[i]` and above the bound before; the last entry:
/// above every bound). Not cumulative.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Histogram {
    pub count: u64,
    pub sum: Duration,
    pub max: Duration,
    pub buckets: [u64; BUCKETS.len() + 1],
}

impl Histogram {
    pub fn observe(&mut self, d: Duration) {
        self.count += 1;
        self.sum = self.sum.saturating_add(d);
        self.max = self.max.max(d);
        let i = BUCKETS.partition_point(|&bound| bound < d);
        self.buckets[i] += 1;
    }

    /// Each bucket's upper bound (`None`: unbounded) with the count at or below it, as
    /// Prometheus keeps a histogram.
    pub fn cumulative(&self) -> impl Iterator<Item = (Option<Duration>, u64)> + '_ {
        let mut total = 0;
        self.buckets.iter().enumerate().map(move |(i, n)| {
            total += n;
            (BUCKETS.get(i).copied(), total)
        })
    }

    /// Adds `other`'s observations.
    pub fn merge(&mut self, other: &Histogram) {
        self.count += other.count;
        self.sum = self.sum.saturating_add(other.sum);
        self.max = self.max.max(other.max);
        for (mine, theirs) in self.buckets.iter_mut().zip(other.buckets) {
            *mine += theirs;
        }
    }
}

/// The counts of one lock name and kind. A multi-lock counts as its members.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LockStats {
    /// The lock's name ([`OTHER_NAMES`] for every name past the first [`MAX_STATS_NAMES`]).
    pub name: String,
    /// What was taken: the lock, a permit of the semaphore, or a read or write hold.
    pub kind: Kind,
    /// New holds granted (reentries apart).
    pub acquired: u64,
    /// Of those, the holds that waited for another holder first: the lock passed from a holder
    /// to this waiter (on FIFO layouts, handed over by the releasing script).
    pub handed_off: u64,
    /// Reentries of a hold by its owner.
    pub reentered: u64,
    /// Holds released by their owner (the last level).
    pub released: u64,
    /// Try-acquires that found the lock held.
    pub busy: u64,
    /// Acquires whose wait ran out.
    pub timed_out: u64,
    /// Acquires cancelled while they waited.
    pub cancelled: u64,
    /// Acquires that ended with an error (the server, the connection, a closed client).
    pub failed: u64,
    /// Holds renewed by the watchdog: one per hold per renewal sent (ZooKeeper renews its
    /// session instead, and counts none).
    pub renewals: u64,
    /// Of those, the renewals that got no answer that tells (tried again soon).
    pub renewals_failed: u64,
    /// Holds lost, per reason, in the order of [`LostReason::ALL`].
    pub lost: [u64; LostReason::ALL.len()],
    /// Holds now.
    pub held: u64,
    /// Acquires waiting now.
    pub waiting: u64,
    /// From an acquire's start to its grant, for every hold granted.
    pub wait: Histogram,
    /// From a grant to its release or loss, for every hold that ended.
    pub hold: Histogram,
}

impl LockStats {
    /// Holds lost for `reason`.
    pub fn lost(&self, reason: &LostReason) -> u64 {
        self.lost[reason.index()]
    }

    /// Adds `other`'s counts (of the same lock, counted by another engine).
    pub fn merge(&mut self, other: &LockStats) {
        let LockStats {
            name: _,
            kind: _,
            acquired,
            handed_off,
            reentered,
            released,
            busy,
            timed_out,
            cancelled,
            failed,
            renewals,
            renewals_failed,
            lost,
            held,
            waiting,
            wait,
            hold,
        } = other;
        self.acquired += acquired;
        self.handed_off += handed_off;
        self.reentered += reentered;
        self.released += released;
        self.busy += busy;
        self.timed_out += timed_out;
        self.cancelled += cancelled;
        self.failed += failed;
        self.renewals += renewals;
        self.renewals_failed += renewals_failed;
        for (mine, theirs) in self.lost.iter_mut().zip(lost) {
            *mine += theirs;
        }
        self.held += held;
        self.waiting += waiting;
        self.wait.merge(wait);
        self.hold.merge(hold);
    }
}

/// A snapshot of an engine's counts: one entry per (name, kind) ever acquired, sorted by name
/// then kind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub locks: Vec<LockStats>,
}

impl Stats {
    /// The counts of lock `name` of `kind`, if it was ever acquired.
    pub fn get(&self, name: &str, kind: Kind) -> Option<&LockStats> {
        self.locks.iter().find(|s| s.name == name && s.kind == kind)
    }

    /// Adds `other`'s counts, lock by lock (several engines' counts as one: a process's
    /// clients, say), keeping the order by name then kind.
    pub fn merge(&mut self, other: &Stats) {
        for theirs in &other.locks {
            let key = (theirs.name.as_str(), theirs.kind);
            match self
                .locks
                .binary_search_by(|s| (s.name.as_str(), s.kind).cmp(&key))
            {
                Ok(i) => self.locks[i].merge(theirs),
                Err(i) => self.locks.insert(i, theirs.clone()),
            }
        }
    }
}

/// What the lifecycle counts, as it decides: one observation of a lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Observed {
    /// A new hold, after waiting `waited` (`handed_off`: it waited for another holder).
    Acquired {
        waited: Duration,
        handed_off: bool,
    },
    Reentered,
    /// The owner released a hold's last level.
    Released,
    /// A hold ended (released or lost) after `held`.
    Ended {
        held: Duration,
    },
    /// An acquire ended without the lock.
    NotAcquired(NotAcquired),
    /// An acquire ended with an error.
    Failed,
    Lost(LostReason),
    /// The watchdog sent a renewal of a hold.
    Renewal,
    /// A renewal got no answer that tells.
    RenewalFailed,
}

/// One observation of lock `name` (of `kind`), as
/// [`Engine::poll_observation`](crate::Engine::poll_observation) hands it out: the name is the
/// one the stats count it under ([`OTHER_NAMES`] past the first [`MAX_STATS_NAMES`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observation {
    pub name: String,
    pub kind: Kind,
    pub what: Observed,
}

/// At most this many observations wait for the host; past it the oldest go (a host that asked
/// for them and stopped polling costs bounded memory).
pub const MAX_OBSERVATIONS: usize = 4096;

/// The engine's counters, keyed by name then kind. Left out of `Debug` (it shows the count of
/// names only): they observe the lifecycle and are no part of its state, so state dumps and
/// the model checker's fingerprints show the protocol alone.
#[derive(Clone, Default)]
pub(crate) struct Counters {
    /// Each name's place in `names`. Hashed: every event of every lock looks its name up,
    /// and a B-tree of a thousand names compared its text with a dozen others each time.
    index: HashMap<String, usize, FxBuild>,
    /// Per name, its counts by kind.
    names: Vec<Vec<LockStats>>,
    entries: usize,
    /// Observations for the host, when it asked for them.
    observations: Option<VecDeque<Observation>>,
}

impl fmt::Debug for Counters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Counters")
            .field("entries", &self.entries)
            .finish_non_exhaustive()
    }
}

impl Counters {
    pub(crate) fn record(&mut self, name: &str, kind: Kind, what: Observed) {
        let keep = self.observations.is_some();
        let s = self.entry(name, kind);
        match &what {
            Observed::Acquired { waited, handed_off } => {
                s.acquired += 1;
                s.handed_off += u64::from(*handed_off);
                s.wait.observe(*waited);
            }
            Observed::Reentered => s.reentered += 1,
            Observed::Released => s.released += 1,
            Observed::Ended { held } => s.hold.observe(*held),
            Observed::NotAcquired(NotAcquired::Busy) => s.busy += 1,
            Observed::NotAcquired(NotAcquired::TimedOut) => s.timed_out += 1,
            Observed::NotAcquired(NotAcquired::Cancelled) => s.cancelled += 1,
            Observed::Failed => s.failed += 1,
            Observed::Lost(reason) => s.lost[reason.index()] += 1,
            Observed::Renewal => s.renewals += 1,
            Observed::RenewalFailed => s.renewals_failed += 1,
        }
        let name = keep.then(|| s.name.clone());
        if let (Some(queue), Some(name)) = (&mut self.observations, name) {
            if queue.len() == MAX_OBSERVATIONS {
                queue.pop_front();
            }
            queue.push_back(Observation { name, kind, what });
        }
    }

    /// From now on (`on`), every observation also waits for [`Counters::poll_observation`];
    /// off, none does.
    pub(crate) fn keep_observations(&mut self, on: bool) {
        match (on, &self.observations) {
            (true, None) => self.observations = Some(VecDeque::new()),
            (false, _) => self.observations = None,
            (true, Some(_)) => {}
        }
    }

    pub(crate) fn poll_observation(&mut self) -> Option<Observation> {
        self.observations.as_mut()?.pop_front()
    }

    fn entry(&mut self, name: &str, kind: Kind) -> &mut LockStats {
        // One look-up for a name seen before (every event of every lock comes this way).
        let at = match self.index.get(name) {
            Some(&at) => at,
            // No room for another name: it counts under `OTHER_NAMES`.
            None if self.entries >= MAX_STATS_NAMES && name != OTHER_NAMES => {
                return self.entry(OTHER_NAMES, kind);
            }
            None => {
                self.index.insert(name.to_owned(), self.names.len());
                self.names.push(Vec::new());
                self.names.len() - 1
            }
        };
        let kinds = &mut self.names[at];
        let i = match kinds.iter().position(|s| s.kind == kind) {
            Some(i) => i,
            None => {
                self.entries += 1;
                kinds.push(LockStats {
                    name: name.to_owned(),
                    kind,
                    ..LockStats::default()
                });
                kinds.sort_by_key(|s| s.kind);
                kinds
                    .iter()
                    .position(|s| s.kind == kind)
                    .expect("pushed above")
            }
        };
        &mut kinds[i]
    }

    /// A snapshot, with the holds and waiters of now (`live`: the name, kind and whether it is
    /// held, of every tenure).
    pub(crate) fn snapshot<'a>(&self, live: impl Iterator<Item = (&'a str, Kind, bool)>) -> Stats {
        let mut counters = Counters {
            index: self.index.clone(),
            names: self.names.clone(),
            entries: self.entries,
            observations: None,
        };
        for (name, kind, held) in live {
            let s = counters.entry(name, kind);
            if held {
                s.held += 1;
            } else {
                s.waiting += 1;
            }
        }
        let mut locks: Vec<LockStats> = counters.names.into_iter().flatten().collect();
        locks.sort_by(|a, b| (&a.name, a.kind).cmp(&(&b.name, b.kind)));
        Stats { locks }
    }
}
