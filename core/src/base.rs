//! What every backend's machine shares: the clock, op bookkeeping, requests in flight with
//! their timeouts, the timer table and the output queue.

use core::time::Duration;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::error::{Error, MAX_LEASE, MAX_NAME_LEN, MAX_PERMITS, MAX_VALUE_LEN, MIN_LEASE};
use crate::time::Instant;
use crate::timers::{Timer, Timers};
use crate::types::{
    Acquire, Event, Kind, Op, OpId, Output, Primitive, Reply, Request, RequestId, Response,
};

/// A request under way: when it was sent and what the machine wanted of it.
#[derive(Clone, Debug)]
pub(crate) struct InFlight<P> {
    pub(crate) sent_at: Instant,
    pub(crate) purpose: P,
}

#[derive(Clone, Debug)]
pub(crate) struct Base<P, T> {
    pub(crate) now: Instant,
    pub(crate) request_timeout: Duration,
    next_request: u64,
    pub(crate) requests: BTreeMap<RequestId, InFlight<P>>,
    pub(crate) timers: Timers<T>,
    out: VecDeque<Output>,
    /// Ops that have not had their terminal event yet.
    ops: BTreeSet<OpId>,
    /// Sticky: set by [`Notice::Closed`](crate::Notice::Closed).
    pub(crate) closed: bool,
}

impl<P, T: Copy + Ord> Base<P, T> {
    pub(crate) fn new(now: Instant, request_timeout: Duration) -> Self {
        Self {
            now,
            request_timeout,
            next_request: 1,
            requests: BTreeMap::new(),
            timers: Timers::default(),
            out: VecDeque::new(),
            ops: BTreeSet::new(),
            closed: false,
        }
    }

    /// Moves the clock forward (never back) and returns the next timer due, if any.
    pub(crate) fn due(&mut self, now: Instant) -> Option<Timer<T>> {
        self.now = self.now.max(now);
        self.timers.pop_due(self.now)
    }

    /// Takes the request a reply answers, `None` for an unknown or timed-out id.
    pub(crate) fn answered(&mut self, id: RequestId) -> Option<InFlight<P>> {
        let req = self.requests.remove(&id)?;
        self.timers.clear(Timer::Request(id.0));
        Some(req)
    }

    /// Whether a command with this op id is under way.
    pub(crate) fn in_use(&self, op: OpId) -> bool {
        self.ops.contains(&op)
    }

    /// Registers a command's op id: a duplicate or a closed machine ends it at once.
    /// Returns whether the command may proceed.
    pub(crate) fn begin(&mut self, op: OpId) -> bool {
        if self.ops.contains(&op) {
            self.event(Event::Failed {
                op,
                error: Error::DuplicateOp { op },
            });
            return false;
        }
        self.ops.insert(op);
        if self.closed {
            self.finish(Event::Failed {
                op,
                error: Error::Closed,
            });
            return false;
        }
        true
    }

    pub(crate) fn send(&mut self, op: Op, purpose: P) {
        self.send_within(op, purpose, self.request_timeout);
    }

    /// [`send`](Self::send) with a timeout of its own.
    pub(crate) fn send_within(&mut self, op: Op, purpose: P, timeout: Duration) {
        let id = RequestId(self.next_request);
        self.next_request += 1;
        self.requests.insert(
            id,
            InFlight {
                sent_at: self.now,
                purpose,
            },
        );
        self.timers.set(Timer::Request(id.0), self.now + timeout);
        self.out.push_back(Output::Request(Request { id, op }));
    }

    /// Emits a terminal event and frees its op id.
    pub(crate) fn finish(&mut self, event: Event) {
        if let Some(op) = event.terminal_op() {
            self.ops.remove(&op);
        }
        self.event(event);
    }

    pub(crate) fn event(&mut self, event: Event) {
        self.out.push_back(Output::Event(event));
    }

    pub(crate) fn poll_output(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    /// Ends the machine: every request under way is dropped (returned so that the machine
    /// can fail the commands waiting on them) and every timer cleared.
    pub(crate) fn close(&mut self) -> Vec<InFlight<P>> {
        self.closed = true;
        self.timers = Timers::default();
        std::mem::take(&mut self.requests).into_values().collect()
    }
}

/// Checks a lock name: 1 to [`MAX_NAME_LEN`] bytes.
pub fn check_name(name: &str) -> Result<(), Error> {
    match name.len() {
        0 => Err(Error::EmptyName),
        len if len > MAX_NAME_LEN => Err(Error::NameTooLong { len }),
        _ => Ok(()),
    }
}

/// Checks an election leader's value: at most [`MAX_VALUE_LEN`] bytes.
pub fn check_value(value: &str) -> Result<(), Error> {
    if value.len() > MAX_VALUE_LEN {
        return Err(Error::InvalidArgument(format!(
            "a leader's value is {} bytes long; at most {MAX_VALUE_LEN} are allowed",
            value.len()
        )));
    }
    Ok(())
}

/// Checks an acquire before anything is sent: its name, its lease and max hold, and that it
/// takes a primitive `backend` offers. Returns the lease and max hold in whole milliseconds.
pub(crate) fn check_acquire(
    a: &Acquire,
    backend: &str,
    offers: &[Primitive],
) -> Result<(Duration, Option<Duration>), Error> {
    check_name(&a.name)?;
    let lease = check_lease(a.lease)?;
    let max_hold = a.max_hold.map(check_lease).transpose()?;
    check_kind(a.kind, backend, offers)?;
    Ok((lease, max_hold))
}

/// Checks what an acquire takes: a primitive `backend` offers, and a semaphore of 1 to
/// [`MAX_PERMITS`] permits.
fn check_kind(kind: Kind, backend: &str, offers: &[Primitive]) -> Result<(), Error> {
    let primitive = kind.primitive();
    if !offers.contains(&primitive) {
        let what = match primitive {
            Primitive::Lock => "locks",
            Primitive::Semaphore => "semaphores",
            Primitive::RwLock => "read-write locks",
        };
        return Err(Error::InvalidArgument(format!(
            "{backend} offers no {what}"
        )));
    }
    match kind {
        Kind::Semaphore { permits } if !(1..=MAX_PERMITS).contains(&permits) => {
            Err(Error::InvalidArgument(format!(
                "a semaphore has 1 to {MAX_PERMITS} permits, not {permits}"
            )))
        }
        _ => Ok(()),
    }
}

/// Refuses a new write hold to an owner that holds or waits for a read hold of the same lock
/// (`reads`): it would wait for itself. An owner that already has the write hold (`writes`)
/// reenters it.
pub(crate) fn refuse_upgrade(a: &Acquire, reads: bool, writes: bool) -> Result<(), Error> {
    if a.kind == Kind::Write && reads && !writes {
        return Err(Error::InvalidArgument(format!(
            "owner {} holds or waits for a read hold of {:?}: release it before writing (a \
             read hold is never upgraded; it would wait for itself)",
            a.owner, a.name
        )));
    }
    Ok(())
}

/// Accepts a lease in range and truncates it to whole milliseconds, the unit the servers
/// count in, so that local validity never assumes more than the server grants.
pub(crate) fn check_lease(lease: Duration) -> Result<Duration, Error> {
    if !(MIN_LEASE..=MAX_LEASE).contains(&lease) {
        return Err(Error::InvalidLease { lease });
    }
    Ok(Duration::from_millis(lease.as_millis() as u64))
}

/// A reply in the protocol a machine speaks, or the error it stands for: a transport error,
/// or a reply in another protocol (malformed).
pub(crate) fn unpack<T>(
    reply: Reply,
    protocol: &str,
    pick: impl FnOnce(Response) -> Result<T, Response>,
) -> Result<T, Error> {
    match reply {
        Ok(r) => pick(r)
            .map_err(|other| Error::MalformedReply(format!("a {protocol} request got {other:?}"))),
        Err(e) => Err(Error::from(e)),
    }
}

/// How long to wait before trying a failed request again.
pub(crate) fn retry_delay(scale: Duration) -> Duration {
    (scale / 10).min(Duration::from_millis(250))
}
