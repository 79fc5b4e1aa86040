//! Leader election on the lock's machinery (PROTOCOL.md §20): an election is the lock of its
//! name, whose holder publishes a value. Its term is the tenure's fencing token.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use dlock_core::{Command, HoldId, Leader, OpId};
use futures_util::Stream;
use tokio::sync::{mpsc, oneshot};

use crate::client::{Client, DEFAULT_LEASE, Guard, LostSignal, SharedGuard};
use crate::driver::Waiter;
use crate::{Error, LostReason};

/// One election, being configured: `client.election(name)`; see [`Client::election`].
#[derive(Debug, Clone)]
#[must_use = "an Election does nothing until it campaigns or observes"]
pub struct Election {
    client: Client,
    name: String,
    lease: Duration,
    wait: Option<Duration>,
}

impl Election {
    pub(crate) fn new(client: Client, name: String) -> Self {
        Election {
            client,
            name,
            lease: DEFAULT_LEASE,
            wait: None,
        }
    }

    /// The leader's lease on the server, renewed every third of it while it leads (default
    /// 30 s): a leader that dies is replaced within about this long.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// How long [`campaign`](Self::campaign) may wait to lead (default: as long as it takes).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Waits to lead (up to [`wait`](Self::wait), then [`Error::WaitTimedOut`]), then
    /// publishes `value` — who this candidate is, where to reach it — and returns the
    /// leadership. Candidates are served first come, first served; each campaign is a
    /// candidate of its own. Dropping the future leaves the queue.
    pub async fn campaign(&self, value: impl Into<String>) -> Result<Leadership, Error> {
        let value = value.into();
        self.client.protocol().check_value(&value)?;
        self.client.protocol().check_elections()?;
        let guard = self
            .client
            .lock(self.name.clone())
            .lease(self.lease)
            .acquire_within(self.wait)
            .await
            .and_then(crate::client::or_timeout)?;
        let leadership = Leadership::new(guard);
        // A failed proclaim drops the leadership, which resigns.
        leadership.proclaim(value).await?;
        Ok(leadership)
    }

    /// The current leader: its term and value; `None` when nobody leads (or the holder has
    /// not proclaimed yet).
    pub async fn leader(&self) -> Result<Option<Leader>, Error> {
        self.observe()?.changed().await
    }

    /// Every change of leader, as it happens: the current leader first, then each new term
    /// or value, and `None` when the lock is left free (a leader resigned with nobody
    /// waiting, or died and its lease ran out). Terms only grow. Pushed by the leaders'
    /// messages, and read again when a leader's lease would run out, so a leader that dies
    /// silently is noticed within its lease. Dropping the stream stops observing.
    pub fn observe(&self) -> Result<Observer, Error> {
        self.client.protocol().check_name(&self.name)?;
        self.client.protocol().check_elections()?;
        let op = OpId(self.client.next_id());
        let (tx, rx) = mpsc::unbounded_channel();
        let command = Command::Observe {
            op,
            name: self.name.clone(),
        };
        self.client.send(command, Some(Waiter::Observe(tx)))?;
        Ok(Observer {
            client: self.client.clone(),
            op,
            rx,
        })
    }
}

/// Leading an election, for one term. Cheap to clone, and shared between tasks; when the
/// last clone is dropped without [`resign`](Self::resign), it resigns in the background.
#[derive(Debug, Clone)]
#[must_use = "dropping a Leadership resigns"]
pub struct Leadership {
    guard: SharedGuard,
    client: Client,
    hold: HoldId,
}

impl Leadership {
    fn new(guard: Guard) -> Self {
        let (client, hold) = (guard.client().clone(), guard.hold());
        Leadership {
            guard: guard.into(),
            client,
            hold,
        }
    }

    /// The term: the fencing token of the tenure that leads, larger than every earlier
    /// term's. Hand it to what the leader writes to, and have that refuse smaller ones.
    pub fn term(&self) -> u64 {
        self.guard.fencing_token()
    }

    pub fn name(&self) -> &str {
        self.guard.name()
    }

    /// True once leadership is lost.
    pub fn is_lost(&self) -> bool {
        self.guard.lost_signal().reason().is_some()
    }

    /// Completes, once, when leadership is lost: its local validity ran out before a renewal
    /// got through (this fires before the server could give the lock to another), the server
    /// said it is someone else's, or the client closed. Stop leading then. Pending forever
    /// while it leads, and after it resigned.
    pub async fn lost(&self) -> LostReason {
        match self.guard.lost_signal().wait().await {
            Some(reason) => reason,
            None => std::future::pending().await,
        }
    }

    /// The local deadline: until when this term is valid, as its latest confirmed renewal
    /// proves. No other candidate can lead before it; work that must not overlap the next
    /// leader's stops by then. Renewals move it on; [`lost`](Self::lost) fires when it
    /// passes without one.
    pub fn valid_until(&self) -> tokio::time::Instant {
        self.guard.valid_until()
    }

    /// A handle on the loss that lives apart from the leadership.
    pub fn lost_signal(&self) -> LostSignal {
        self.guard.lost_signal().clone()
    }

    /// The held lock the leadership is, as the bindings share it.
    pub fn guard(&self) -> &SharedGuard {
        &self.guard
    }

    /// Publishes a new value under the same term.
    pub async fn proclaim(&self, value: impl Into<String>) -> Result<(), Error> {
        let value = value.into();
        self.client.protocol().check_value(&value)?;
        let (reply, done) = oneshot::channel();
        let command = Command::Proclaim {
            op: OpId(self.client.next_id()),
            hold: self.hold,
            value,
        };
        self.client.send(command, Some(Waiter::Proclaim(reply)))?;
        done.await.map_err(|_| Error::Closed)?.map(|_term| ())
    }

    /// Steps down, for this term only: the next candidate leads at once, and observers hear
    /// of it. Fails [`Error::Lost`] if leadership was lost meanwhile, and with
    /// `dlock_core::Error::NotHeld` if it resigned already.
    pub async fn resign(&self) -> Result<(), Error> {
        self.guard.release().await
    }
}

/// The changes of an election's leader: see [`Election::observe`]. Dropping it stops.
#[derive(Debug)]
pub struct Observer {
    client: Client,
    op: OpId,
    rx: mpsc::UnboundedReceiver<Result<Option<Leader>, Error>>,
}

impl Observer {
    /// The next change (what the stream yields next): the leader, or `None` once nobody
    /// leads; [`Error::Closed`] when the client is gone.
    pub async fn changed(&mut self) -> Result<Option<Leader>, Error> {
        std::future::poll_fn(|cx| self.rx.poll_recv(cx))
            .await
            .unwrap_or(Err(Error::Closed))
    }
}

impl Stream for Observer {
    type Item = Result<Option<Leader>, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx)
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        let _ = self.client.send(Command::Cancel { op: self.op }, None);
    }
}
