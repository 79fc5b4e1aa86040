//! The engine's timer table: at most one deadline per (kind, subject), earliest first.

use std::collections::{BTreeMap, BTreeSet};

use crate::time::Instant;

/// What a timer is for. The `u64` is a hold's sequence number or a request id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Timer {
    /// A request got no reply in time.
    Request(u64),
    /// A held lock is due for renewal.
    Renew(u64),
    /// A held lock's local validity runs out.
    Expire(u64),
    /// A held lock reaches its max-hold bound.
    MaxHold(u64),
    /// A pending acquire's wait deadline.
    WaitDeadline(u64),
    /// A queued waiter renews its waiter lease (and learns of a missed hand-off).
    Refresh(u64),
    /// Try the wake-up subscription again.
    Subscribe,
    /// ZooKeeper: the validity of every hold, which the session's latest confirmation
    /// bounds, runs out.
    Session,
    /// ZooKeeper: confirm the session again.
    Heartbeat,
    /// ZooKeeper: try the deletes of abandoned nodes again.
    Cleanup,
}

#[derive(Debug, Default)]
pub(crate) struct Timers {
    by_time: BTreeSet<(Instant, Timer)>,
    by_timer: BTreeMap<Timer, Instant>,
}

impl Timers {
    pub(crate) fn set(&mut self, timer: Timer, at: Instant) {
        if let Some(old) = self.by_timer.insert(timer, at) {
            self.by_time.remove(&(old, timer));
        }
        self.by_time.insert((at, timer));
    }

    pub(crate) fn clear(&mut self, timer: Timer) {
        if let Some(old) = self.by_timer.remove(&timer) {
            self.by_time.remove(&(old, timer));
        }
    }

    pub(crate) fn is_set(&self, timer: Timer) -> bool {
        self.by_timer.contains_key(&timer)
    }

    pub(crate) fn next(&self) -> Option<Instant> {
        self.by_time.first().map(|(at, _)| *at)
    }

    /// Removes and returns the earliest timer due at `now`.
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<Timer> {
        let &(at, timer) = self.by_time.first()?;
        if at > now {
            return None;
        }
        self.by_time.remove(&(at, timer));
        self.by_timer.remove(&timer);
        Some(timer)
    }

    /// Removes every timer due by `horizon` that `pick` maps to a value, earliest first.
    pub(crate) fn take_until<T>(
        &mut self,
        horizon: Instant,
        pick: impl Fn(Timer) -> Option<T>,
    ) -> Vec<T> {
        let picked: Vec<(Instant, Timer, T)> = self
            .by_time
            .iter()
            .take_while(|(at, _)| *at <= horizon)
            .filter_map(|&(at, timer)| pick(timer).map(|v| (at, timer, v)))
            .collect();
        picked
            .into_iter()
            .map(|(at, timer, v)| {
                self.by_time.remove(&(at, timer));
                self.by_timer.remove(&timer);
                v
            })
            .collect()
    }
}
