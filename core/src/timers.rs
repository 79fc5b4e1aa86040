//! The engine's timer table: at most one deadline per timer, earliest first.

use std::collections::{BTreeMap, BTreeSet};

use crate::time::Instant;

/// What a timer is for: the lifecycle's own, or one of the backend's (`T`). The `u64` is a
/// tenure's sequence number or a request id.
///
/// Timers due at the same instant run in this order (the derived `Ord`): requests first, then
/// the holds' timers, then the backend's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Timer<T> {
    /// A request got no reply in time.
    Request(u64),
    /// A held lock is due for renewal. A hold has this timer or `Expire`, never both: the
    /// earlier of its two deadlines (its validity is kept with it, and the expiry is set when
    /// the renewal is sent).
    Renew(u64),
    /// A held lock's local validity runs out.
    Expire(u64),
    /// A held lock reaches its max-hold bound.
    MaxHold(u64),
    /// A pending acquire's wait deadline.
    WaitDeadline(u64),
    /// One of the backend's own.
    Backend(T),
}

#[derive(Clone, Debug)]
pub(crate) struct Timers<T> {
    by_time: BTreeSet<(Instant, Timer<T>)>,
    by_timer: BTreeMap<Timer<T>, Instant>,
}

impl<T> Default for Timers<T> {
    fn default() -> Self {
        Self {
            by_time: BTreeSet::new(),
            by_timer: BTreeMap::new(),
        }
    }
}

impl<T: Copy + Ord> Timers<T> {
    pub(crate) fn set(&mut self, timer: Timer<T>, at: Instant) {
        if let Some(old) = self.by_timer.insert(timer, at) {
            self.by_time.remove(&(old, timer));
        }
        self.by_time.insert((at, timer));
    }

    pub(crate) fn clear(&mut self, timer: Timer<T>) {
        if let Some(old) = self.by_timer.remove(&timer) {
            self.by_time.remove(&(old, timer));
        }
    }

    pub(crate) fn is_set(&self, timer: Timer<T>) -> bool {
        self.by_timer.contains_key(&timer)
    }

    /// The earliest timer and when it is due.
    pub(crate) fn first(&self) -> Option<(Instant, Timer<T>)> {
        self.by_time.first().copied()
    }

    /// Removes and returns the earliest timer due at `now`.
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<Timer<T>> {
        let &(at, timer) = self.by_time.first()?;
        if at > now {
            return None;
        }
        self.by_time.remove(&(at, timer));
        self.by_timer.remove(&timer);
        Some(timer)
    }

    /// Removes the first `limit` timers due by `horizon` that `pick` maps to a value,
    /// earliest first.
    pub(crate) fn take_until<V>(
        &mut self,
        horizon: Instant,
        limit: usize,
        pick: impl Fn(Timer<T>) -> Option<V>,
    ) -> Vec<V> {
        let picked: Vec<(Instant, Timer<T>, V)> = self
            .by_time
            .iter()
            .take_while(|(at, _)| *at <= horizon)
            .filter_map(|&(at, timer)| pick(timer).map(|v| (at, timer, v)))
            .take(limit)
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
