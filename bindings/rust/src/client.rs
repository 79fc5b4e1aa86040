//! The public API: [`Client`], [`LockBuilder`], [`Guard`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use dlock_core::redis::FencedWrite;
use dlock_core::{
    Acquire, AcquireMulti, ClientId, Command, Config, HoldId, Instant, Kind, LostReason, Member,
    Op, OpId, Protocol, Response, Wait,
};
use dlock_core::{LockStatus, Stats};
use tokio::sync::{mpsc, oneshot};
use tracing::Instrument;

use crate::Error;
use crate::driver::{Call, Driver, Granted, HoldSignal, Inbox, Mail, Waiter};
use crate::machine::MachineFactory;
use crate::transport::{Backend, Transport};

/// The lease a lock gets when none is set: renewed every 10 s while held, gone 30 s after
/// its holder dies (Redisson's watchdog default).
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// A connection to one lock backend. Cheap to clone; all clones share one engine and one
/// connection. The engine runs on a tokio task until the last clone and guard are dropped.
#[derive(Debug, Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// The driver's channel; dropping the last handle sends it [`Mail::Closed`].
    mail: mpsc::UnboundedSender<Mail>,
    transport: Transport,
    protocol: Protocol,
    ids: Arc<AtomicU64>,
    client_id: ClientId,
    /// How long a request the client makes itself (status) may take.
    request_timeout: Duration,
    /// The origin of the engine's clock (the driver's too).
    base: tokio::time::Instant,
    /// On redis:// and redis-cluster://: how to connect the client's Redisson-compatible
    /// companion (the same URL with `compat=redisson`, the same options but lock-delay), for
    /// the locks that ask for Redisson's layout, and the companion once connected.
    redisson: Option<(ClientBuilder, tokio::sync::OnceCell<Client>)>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The transport holds a sender of the driver's channel too: it never closes while
        // the driver runs, so the driver hears of the last handle from here.
        let _ = self.mail.send(Mail::Closed);
    }
}

/// Options for [`Client`]; start with [`Client::builder`].
#[derive(Clone)]
pub struct ClientBuilder {
    url: String,
    waiter_lease: Option<Duration>,
    request_timeout: Option<Duration>,
    lock_delay: Option<Duration>,
    machine: MachineFactory,
}

impl std::fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("url", &crate::redact(&self.url))
            .field("waiter_lease", &self.waiter_lease)
            .field("request_timeout", &self.request_timeout)
            .finish_non_exhaustive()
    }
}

/// Sends the ACL probe (PROTOCOL.md §7): a Redis user that may not run every command the
/// scripts run fails here, not half-way through a lock script.
async fn probe_acl(transport: &Transport, timeout: Duration) -> Result<(), Error> {
    let probe = transport.execute(Op::Redis(dlock_core::redis::acl_probe()));
    let reply = tokio::time::timeout(timeout, probe).await.map_err(|_| {
        Error::Connect("the ACL probe got no reply within the request timeout".into())
    })?;
    let refused = |e: dlock_core::Error| Error::Connect(crate::redact(&e.to_string()));
    match reply.map_err(dlock_core::Error::from).map_err(refused)? {
        Response::Redis(value) => dlock_core::redis::parse_acl_probe(&value).map_err(refused),
        other => Err(refused(dlock_core::Error::MalformedReply(format!(
            "ACL probe replied {other:?}"
        )))),
    }
}

/// A fresh client id from the OS's CSPRNG.
pub(crate) fn random_client_id() -> Result<ClientId, Error> {
    let mut id = [0u8; 16];
    getrandom::fill(&mut id)
        .map_err(|e| Error::Connect(format!("no randomness for the client id: {e}")))?;
    Ok(ClientId(u128::from_le_bytes(id)))
}

impl ClientBuilder {
    /// How long a queued waiter keeps its place without renewing it (default 3 s; on Redis
    /// never longer than the lease it waits for).
    pub fn waiter_lease(mut self, d: Duration) -> Self {
        self.waiter_lease = Some(d);
        self
    }

    /// How long a backend request may take before it counts as failed (default 2 s).
    pub fn request_timeout(mut self, d: Duration) -> Self {
        self.request_timeout = Some(d);
        self
    }

    /// Lock-delay (Redis only, default off): a lock whose holder stops renewing without
    /// releasing stays taken for `d` after its lease, so that a paused holder that wakes up
    /// cannot clash with a new holder in that window. Costs availability: a crashed holder
    /// blocks the lock for lease + `d`. On zk:// connecting fails with a clear error.
    pub fn lock_delay(mut self, d: Duration) -> Self {
        self.lock_delay = Some(d);
        self
    }

    /// Runs another implementation of the engine, e.g. the Wasm component through
    /// `dlock_wasmtime` (default: dlock-core's engine, natively).
    pub fn machine(mut self, factory: MachineFactory) -> Self {
        self.machine = factory;
        self
    }

    /// Connects. Fails on a malformed or unsupported URL, or an unreachable backend.
    pub async fn connect(self) -> Result<Client, Error> {
        let backend = Backend::parse(&self.url)?;
        let redisson = matches!(backend, Backend::Redis(_) | Backend::RedisCluster(_)).then(|| {
            let separator = if self.url.contains('?') { '&' } else { '?' };
            let companion = ClientBuilder {
                url: format!("{}{separator}compat=redisson", self.url),
                lock_delay: None,
                ..self.clone()
            };
            (companion, tokio::sync::OnceCell::new())
        });
        let client_id = random_client_id()?;
        let mut config = Config::new(client_id);
        if let Some(d) = self.waiter_lease {
            config.waiter_lease = d;
        }
        if let Some(d) = self.request_timeout {
            config.request_timeout = d;
        }
        if let Some(d) = self.lock_delay {
            config.lock_delay = d;
        }
        if matches!(
            backend,
            Backend::RedisCluster(_) | Backend::RedissonCluster(_)
        ) {
            // A script's keys must share one hash slot, and the locks of a batched renewal
            // do not: on a cluster each renewal carries one lock (they still go out at once).
            config.max_batch = 1;
        }
        let (mail, mail_rx) = mpsc::unbounded_channel();
        let (transport, protocol) = Transport::connect(&backend, Inbox(mail.clone())).await?;
        if backend.probes_acl()
            && let Err(e) = probe_acl(&transport, config.request_timeout).await
        {
            transport.close();
            return Err(e);
        }
        config.protocol = protocol.clone();
        let request_timeout = config.request_timeout;
        let base = tokio::time::Instant::now();
        let engine = match (self.machine)(config, Instant::from_nanos(0)) {
            Ok(engine) => engine,
            Err(e) => {
                transport.close();
                return Err(e);
            }
        };
        let ids = Arc::new(AtomicU64::new(1));
        let driver = Driver::new(engine, transport.clone(), base, mail_rx, ids.clone());
        tokio::spawn(
            driver.run().instrument(
                tracing::debug_span!("dlock", client = %format!("{:032x}", client_id.0)),
            ),
        );
        Ok(Client {
            inner: Arc::new(Inner {
                mail,
                transport,
                protocol,
                ids,
                client_id,
                request_timeout,
                base,
                redisson,
            }),
        })
    }
}

impl Client {
    /// Connects with default options to a URL of one of [`crate::BACKENDS`]: `redis://…`,
    /// `rediss://…`, `redis-cluster://…`, `redlock://…`, `zk://…` or `memory://[name]`.
    /// Errors never show the URL's password.
    pub async fn connect(url: &str) -> Result<Client, Error> {
        Self::builder(url).connect().await
    }

    pub fn builder(url: &str) -> ClientBuilder {
        ClientBuilder {
            url: url.to_owned(),
            waiter_lease: None,
            request_timeout: None,
            lock_delay: None,
            machine: Arc::new(crate::machine::native),
        }
    }

    /// This client's random 128-bit id; its owner tokens start with it in hex.
    pub fn id(&self) -> ClientId {
        self.inner.client_id
    }

    /// A lock named `name`, to configure and acquire.
    pub fn lock(&self, name: impl Into<String>) -> LockBuilder {
        LockBuilder {
            client: self.clone(),
            name: name.into(),
            lease: DEFAULT_LEASE,
            wait: None,
            max_hold: None,
            owner: None,
            fair: true,
            kind: Kind::Mutex,
            redisson: false,
        }
    }

    /// A semaphore named `name` with `permits` permits (1 to [`dlock_core::MAX_PERMITS`]),
    /// configured and acquired like a lock: each acquire takes one permit for a [`Guard`] of
    /// its own, with its own lease, renewal and fencing token; at most `permits` guards are
    /// held at a time across every client (Redisson's `PermitExpirableSemaphore`). Not
    /// reentrant, and [`LockBuilder::owner`] does not apply. Every client must give the same
    /// `permits` (on Redis, while anyone holds or waits, another number fails the acquire).
    /// Waiters are served first come, first served. On redis://, redis-cluster://, zk:// and
    /// memory://; Redlock refuses semaphores.
    pub fn semaphore(&self, name: impl Into<String>, permits: u32) -> LockBuilder {
        LockBuilder {
            kind: Kind::Semaphore { permits },
            ..self.lock(name)
        }
    }

    /// A read-write lock named `name`: [`RwLockBuilder::read`] and [`RwLockBuilder::write`]
    /// give its holds, configured and acquired like a lock. Many readers hold it at once, or
    /// one writer alone; a reader that arrives while a writer waits queues behind it (writer
    /// preference). Both holds of one `RwLockBuilder` belong to one owner: each is reentrant,
    /// and the writer may take a read hold beside its write hold, then release the write
    /// (downgrade); asking to write while holding a read fails (no upgrade). On redis://,
    /// redis-cluster://, zk:// and memory:// (PROTOCOL.md §17).
    ///
    /// ```no_run
    /// # async fn f(client: dlock::Client) -> Result<(), dlock::Error> {
    /// let doc = client.rw_lock("doc/42");
    /// let write = doc.write().acquire().await?;
    /// let read = doc.read().acquire().await?; // downgrade: read beside the write hold
    /// write.release().await?;
    /// // ... still reading, and nobody wrote in between
    /// read.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn rw_lock(&self, name: impl Into<String>) -> RwLockBuilder {
        RwLockBuilder {
            owner: self.next_id(),
            lock: self.lock(name),
        }
    }

    /// The election `name` (PROTOCOL.md §20): the lock of that name, whose holder publishes
    /// a value. [`Election::campaign`](crate::Election::campaign) waits to lead,
    /// [`Election::leader`](crate::Election::leader) reads who leads and
    /// [`Election::observe`](crate::Election::observe) follows each change. On redis://,
    /// redis-cluster:// and memory://.
    ///
    /// ```no_run
    /// # async fn f(client: dlock::Client) -> Result<(), dlock::Error> {
    /// let election = client.election("scheduler");
    /// let leadership = election.campaign("worker-1:8080").await?;
    /// tokio::select! {
    ///     reason = leadership.lost() => eprintln!("no longer leading: {reason:?}"),
    ///     () = async { /* schedule jobs, each fenced by leadership.term() */ } => {}
    /// }
    /// leadership.resign().await.ok();
    /// # Ok(()) }
    /// ```
    pub fn election(&self, name: impl Into<String>) -> crate::Election {
        crate::Election::new(self.clone(), name.into())
    }

    /// Locks `names` as one; see [`MultiLockBuilder`].
    pub fn multi_lock<I, S>(&self, names: I) -> MultiLockBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        MultiLockBuilder {
            client: self.clone(),
            names: names.into_iter().map(Into::into).collect(),
            lease: DEFAULT_LEASE,
            wait: None,
            max_hold: None,
        }
    }

    /// What this client's engine counted about its locks, per name and kind, with the holds
    /// and waiters of now: acquisitions, hand-offs, wait and hold times, renewals, losses
    /// ([`Stats`]). Locks taken in Redisson's layout are counted by the companion and added in.
    pub async fn stats(&self) -> Result<Stats, Error> {
        let mut stats = self.engine_stats().await?;
        if let Some(companion) = self.inner.redisson.as_ref().and_then(|(_, c)| c.get()) {
            stats.merge(&companion.engine_stats().await?);
        }
        Ok(stats)
    }

    async fn engine_stats(&self) -> Result<Stats, Error> {
        let (tx, rx) = oneshot::channel();
        self.call(Call::Stats(tx))?;
        rx.await.map_err(|_| Error::Closed)?
    }

    /// Who holds `name`, with which token, for how long, and who waits. On Redlock: what a
    /// majority of the nodes agree on ([`dlock_core::redlock::merge_status`]); see
    /// [`Client::node_status`] for each node.
    pub async fn status(&self, name: &str) -> Result<LockStatus, Error> {
        let mut nodes = self.node_status(name).await?;
        match self.inner.protocol {
            Protocol::Redlock { .. } => Ok(dlock_core::redlock::merge_status(&nodes)?),
            _ => Ok(nodes.pop().expect("one status request")?),
        }
    }

    /// The status of `name` on each node, in the URL's order: one entry, or one per Redlock
    /// node (a node that cannot answer gives its error).
    pub async fn node_status(
        &self,
        name: &str,
    ) -> Result<Vec<Result<LockStatus, dlock_core::Error>>, Error> {
        let ops = self.inner.protocol.status_requests(name)?;
        // A node that is down may not fail the request at all: give it the request timeout.
        let replies = futures_util::future::join_all(ops.into_iter().map(|op| {
            let reply = self.inner.transport.execute(op);
            async move {
                tokio::time::timeout(self.inner.request_timeout, reply)
                    .await
                    .unwrap_or_else(|_| {
                        Err(dlock_core::TransportError::Unavailable(
                            "no reply within the request timeout".into(),
                        ))
                    })
            }
        }))
        .await;
        Ok(replies
            .into_iter()
            .map(|reply| self.inner.protocol.parse_status(reply))
            .collect())
    }

    /// Fencing at the resource, in one call: stores `value` in the Redis hash `resource`
    /// (fields `value` and `fence`) only if `token` — the fencing token of the lock that
    /// guards it — is at least the highest token stored there before. A holder that lost its
    /// lock without knowing gets [`FencedWrite::Stale`] and changes nothing. Redis and
    /// memory:// only (not zk:// or redlock://, whose resource has no one Redis to live in);
    /// the protocol is in docs/PROTOCOL.md (fenced writes).
    pub async fn fenced_write(
        &self,
        resource: &str,
        token: u64,
        value: &str,
    ) -> Result<FencedWrite, Error> {
        if matches!(
            self.inner.protocol,
            Protocol::ZooKeeper(_) | Protocol::Redlock { .. }
        ) {
            return Err(Error::Unsupported(
                "fenced writes store the resource in one Redis: use a redis:// client for it"
                    .into(),
            ));
        }
        dlock_core::check_name(resource)?;
        let token = crate::spec::fencing_token(token.into())?;
        let op = Op::Redis(dlock_core::redis::fenced_write(resource, token, value));
        let reply = self.inner.transport.execute(op).await;
        match reply.map_err(dlock_core::Error::from)? {
            Response::Redis(value) => Ok(dlock_core::redis::parse_fenced_write(&value)?),
            other => Err(dlock_core::Error::MalformedReply(format!(
                "fenced write replied {other:?}"
            ))
            .into()),
        }
    }

    /// The client that lays locks out as Redisson's: this one on a `compat=redisson` URL, else
    /// its companion, connected on first use.
    async fn redisson(&self) -> Result<Client, Error> {
        if self.inner.protocol == Protocol::Redisson {
            return Ok(self.clone());
        }
        let Some((builder, companion)) = &self.inner.redisson else {
            return Err(Error::Unsupported(
                "Redisson's lock layout is a Redis one: use a redis:// or redis-cluster:// client"
                    .into(),
            ));
        };
        // Boxed: a connect's future is over 5 KB, and this one is part of every acquire's
        // future (moved, so copied, by each host that hands it to a runtime) though it runs
        // once per client.
        let connect = || Box::pin(builder.clone().connect());
        companion.get_or_try_init(connect).await.cloned()
    }

    pub(crate) fn protocol(&self) -> &Protocol {
        &self.inner.protocol
    }

    pub(crate) fn next_id(&self) -> u64 {
        self.inner.ids.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn send(&self, command: Command, waiter: Option<Waiter>) -> Result<(), Error> {
        self.call(Call::Command { command, waiter })
    }

    fn call(&self, call: Call) -> Result<(), Error> {
        self.inner
            .mail
            .send(Mail::Call(call))
            .map_err(|_| Error::Closed)
    }

    /// How long an acquire called now may wait, as the engine counts it (`None`: as long as it
    /// takes; zero: try once).
    fn deadline(&self, wait: Option<Duration>) -> Wait {
        match wait {
            None => Wait::Forever,
            Some(d) if d.is_zero() => Wait::No,
            // The engine's Instant saturates: a wait of Duration::MAX is "until the end of time",
            // not an overflow.
            Some(d) => {
                let now = Instant::from_nanos(self.inner.base.elapsed().as_nanos() as u64);
                Wait::Until(now + d)
            }
        }
    }
}

/// One lock, being configured: `client.lock(name).lease(..).wait(..).acquire().await`.
#[derive(Debug, Clone)]
#[must_use = "a LockBuilder does nothing until acquired"]
pub struct LockBuilder {
    client: Client,
    name: String,
    lease: Duration,
    wait: Option<Duration>,
    max_hold: Option<Duration>,
    owner: Option<u64>,
    fair: bool,
    kind: Kind,
    redisson: bool,
}

impl LockBuilder {
    /// Time to live on the server, renewed every third of it while held (default 30 s).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// How long [`acquire`](Self::acquire) may wait (default: as long as it takes).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Stop renewing and release this long after acquiring; the guard then reports lost.
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.max_hold = Some(max_hold);
        self
    }

    /// Who acquires. Acquiring again with the same owner while it holds the lock is
    /// reentrant: same fencing token, one more release needed. By default every
    /// `LockBuilder` is an owner of its own.
    pub fn owner(mut self, owner: u64) -> Self {
        self.owner = Some(owner);
        self
    }

    /// Fair (the default): waiters are served first come, first served, each release hands
    /// the lock to the next. Non-fair (`false`, Java's `ReentrantLock(false)`): this acquire
    /// takes a free lock even when others queue, and its release frees the lock and wakes the
    /// first waiter to race for it: more throughput when some contenders are slow to answer
    /// (a fair hand-off waits for them), less when all are near, and no order (PROTOCOL.md §5,
    /// `just bench-fairness`). On redis:// and redis-cluster:// (Redlock never queues;
    /// ZooKeeper refuses non-fair).
    pub fn fair(mut self, fair: bool) -> Self {
        self.fair = fair;
        self
    }

    /// Lays this lock out as Redisson's `RLock` (PROTOCOL.md §19), as every lock of a client
    /// connected with `?compat=redisson` is, so that a Java service on Redisson shares it,
    /// while this client's other locks keep dlock's layout. On redis:// and redis-cluster://
    /// clients: the first such acquire connects a second client beside this one (same URL
    /// and options, no lock-delay), which every later one shares; elsewhere it fails
    /// [`Error::Unsupported`]. Not fair (Redisson's waiters race) and for locks only.
    pub fn redisson(mut self) -> Self {
        self.redisson = true;
        self
    }

    /// Waits for the lock (up to [`wait`](Self::wait)). Dropping the future leaves the queue.
    pub async fn acquire(self) -> Result<Guard, Error> {
        let wait = self.wait;
        self.acquire_within(wait).await.and_then(or_timeout)
    }

    /// Takes the lock if it is free now; `None` if someone holds it or waits for it.
    pub async fn try_acquire(self) -> Result<Option<Guard>, Error> {
        self.acquire_within(Some(Duration::ZERO)).await
    }

    /// Acquires waiting up to `wait` (`None`: as long as it takes; zero: try once, `None` if
    /// busy). This overrides [`wait`](Self::wait); it is how bindings pass a wait through.
    pub async fn acquire_within(self, wait: Option<Duration>) -> Result<Option<Guard>, Error> {
        let span = tracing::debug_span!(
            "acquire",
            lock = %self.name,
            fencing_token = tracing::field::Empty
        );
        let client = match self.redisson {
            true => self.client.redisson().await?,
            false => self.client,
        };
        let owner = self.owner.unwrap_or_else(|| client.next_id());
        let name = self.name;
        let granted = acquire(&client, Waiter::Acquire, |op| {
            Command::Acquire(Acquire {
                op,
                name: name.clone(),
                owner,
                lease: self.lease,
                wait: client.deadline(wait),
                max_hold: self.max_hold,
                fair: self.fair,
                kind: self.kind,
            })
        });
        let granted = granted.instrument(span.clone()).await?;
        Ok(granted.map(|g| {
            span.record("fencing_token", g.tokens);
            let hold = tracing::debug_span!("hold", lock = %name, fencing_token = g.tokens);
            Guard {
                held: Held::new(client, g.hold, g.signal, hold),
                name: name.into(),
                fencing_token: g.tokens,
            }
        }))
    }
}

/// A read-write lock: `client.rw_lock(name).read()` or `.write()`; see [`Client::rw_lock`].
#[derive(Debug, Clone)]
#[must_use = "an RwLockBuilder does nothing until one of its holds is acquired"]
pub struct RwLockBuilder {
    owner: u64,
    lock: LockBuilder,
}

impl RwLockBuilder {
    /// Whose holds these are (default: an owner of this `RwLockBuilder`'s own); see
    /// [`LockBuilder::owner`].
    pub fn owner(mut self, owner: u64) -> Self {
        self.owner = owner;
        self
    }

    /// The read hold, to configure and acquire like a lock.
    pub fn read(&self) -> LockBuilder {
        self.hold(Kind::Read)
    }

    /// The write hold, to configure and acquire like a lock.
    pub fn write(&self) -> LockBuilder {
        self.hold(Kind::Write)
    }

    fn hold(&self, kind: Kind) -> LockBuilder {
        LockBuilder {
            kind,
            ..self.lock.clone().owner(self.owner)
        }
    }
}

/// An acquire that waited and got no guard timed out: the one place that says so, for the
/// builders and [`crate::LockSpec`].
pub(crate) fn or_timeout<T>(guard: Option<T>) -> Result<T, Error> {
    guard.ok_or(Error::WaitTimedOut)
}

/// Sends the acquire `call` makes of its op id and reply channel and waits for its answer;
/// dropping the future leaves the queue.
async fn acquire<T>(
    client: &Client,
    waiter: impl FnOnce(crate::driver::GrantReply<T>) -> Waiter,
    command: impl FnOnce(OpId) -> Command,
) -> Result<Option<Granted<T>>, Error> {
    let op = OpId(client.next_id());
    let (reply, granted) = oneshot::channel();
    client.send(command(op), Some(waiter(reply)))?;
    let mut cancel = CancelOnDrop {
        client: Some(client.clone()),
        op,
    };
    let result = granted.await.map_err(|_| Error::Closed)?;
    cancel.client = None;
    result
}

/// Several locks as one, being configured: `client.multi_lock(names).acquire().await`. All of
/// them or none are acquired, in one canonical order (names sorted by their bytes) so that
/// clients asking for overlapping sets cannot deadlock; losing any one loses them all. Not
/// reentrant. See `dlock_core::multi`.
#[derive(Debug, Clone)]
#[must_use = "a MultiLockBuilder does nothing until acquired"]
pub struct MultiLockBuilder {
    client: Client,
    names: Vec<String>,
    lease: Duration,
    wait: Option<Duration>,
    max_hold: Option<Duration>,
}

impl MultiLockBuilder {
    /// Each lock's time to live on the server, renewed every third of it (default 30 s).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// How long [`acquire`](Self::acquire) may wait for the whole set (default: as long as
    /// it takes).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Stop renewing and release this long after the first lock was acquired.
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.max_hold = Some(max_hold);
        self
    }

    /// Waits for every lock (up to [`wait`](Self::wait)).
    pub async fn acquire(self) -> Result<MultiGuard, Error> {
        let wait = self.wait;
        self.acquire_within(wait).await.and_then(or_timeout)
    }

    /// Takes every lock if all are free now; `None` (and nothing held) otherwise.
    pub async fn try_acquire(self) -> Result<Option<MultiGuard>, Error> {
        self.acquire_within(Some(Duration::ZERO)).await
    }

    /// Acquires waiting up to `wait`, as [`LockBuilder::acquire_within`].
    pub async fn acquire_within(self, wait: Option<Duration>) -> Result<Option<MultiGuard>, Error> {
        let span = tracing::debug_span!("acquire", locks = ?self.names);
        let client = self.client;
        let granted = acquire(&client, Waiter::AcquireMulti, |op| {
            Command::AcquireMulti(AcquireMulti {
                op,
                names: self.names,
                lease: self.lease,
                wait: client.deadline(wait),
                max_hold: self.max_hold,
            })
        });
        let granted = granted.instrument(span).await?;
        Ok(granted.map(|g| {
            let hold = tracing::debug_span!("hold", locks = ?g.tokens);
            MultiGuard {
                held: Held::new(client, g.hold, g.signal, hold),
                members: g.tokens,
            }
        }))
    }
}

/// Leaves the wait queue when an acquire future is dropped before it finished.
struct CancelOnDrop {
    client: Option<Client>,
    op: OpId,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            let _ = client.send(Command::Cancel { op: self.op }, None);
        }
    }
}

/// What every guard shares: its hold in the engine, the loss signal, the release on drop.
#[derive(Debug)]
struct Held {
    client: Client,
    hold: HoldId,
    /// Its validity (moved on by each renewal) and its loss.
    signal: Arc<HoldSignal>,
    released: bool,
    /// The `hold` span: from the grant until the guard goes (its release a child of it).
    /// Boxed, and kept only while a subscriber records it: a span is 40 bytes, most of a
    /// guard otherwise.
    span: Option<Box<tracing::Span>>,
}

impl Held {
    fn new(client: Client, hold: HoldId, signal: Arc<HoldSignal>, span: tracing::Span) -> Self {
        Held {
            client,
            hold,
            signal,
            released: false,
            span: (!span.is_disabled()).then(|| Box::new(span)),
        }
    }

    fn valid_until(&self) -> tokio::time::Instant {
        self.signal.valid_until(self.client.inner.base)
    }

    fn is_lost(&self) -> bool {
        self.signal.lost().is_some()
    }

    fn lost_signal(&self) -> LostSignal {
        LostSignal {
            signal: self.signal.clone(),
            base: self.client.inner.base,
        }
    }

    async fn lost(&self) -> LostReason {
        match self.lost_signal().wait().await {
            Some(reason) => reason,
            // Released: it can no longer be lost.
            None => std::future::pending().await,
        }
    }

    async fn extend(&self, lease: Duration) -> Result<(), Error> {
        let (reply, done) = oneshot::channel();
        let op = OpId(self.client.next_id());
        let command = Command::Extend {
            op,
            hold: self.hold,
            lease,
        };
        self.client.send(command, Some(Waiter::Done(Some(reply))))?;
        done.await.map_err(|_| Error::Closed)?
    }

    async fn release(mut self) -> Result<(), Error> {
        let parent = self.span.as_ref().and_then(|span| span.id());
        let span = tracing::debug_span!(parent: parent, "release");
        self.released = true;
        if let Some(reason) = self.signal.lost() {
            return Err(Error::Lost(reason));
        }
        let (reply, done) = oneshot::channel();
        let op = OpId(self.client.next_id());
        let command = Command::Release {
            op,
            hold: self.hold,
        };
        self.client.send(command, Some(Waiter::Done(Some(reply))))?;
        done.instrument(span).await.map_err(|_| Error::Closed)?
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if !self.released && !self.is_lost() {
            let op = OpId(self.client.next_id());
            let command = Command::Release {
                op,
                hold: self.hold,
            };
            let _ = self.client.send(command, Some(Waiter::Done(None)));
        }
    }
}

/// A held lock. Dropping it releases the lock in the background.
#[derive(Debug)]
#[must_use = "dropping a Guard releases the lock"]
pub struct Guard {
    held: Held,
    name: Box<str>,
    fencing_token: u64,
}

impl Guard {
    pub(crate) fn client(&self) -> &Client {
        &self.held.client
    }

    pub(crate) fn hold(&self) -> HoldId {
        self.held.hold
    }

    /// The tenure's fencing token: larger than every earlier tenure's of this lock. Pass it to
    /// the resource you protect and have it refuse smaller ones.
    pub fn fencing_token(&self) -> u64 {
        self.fencing_token
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// True once the lock is lost.
    pub fn is_lost(&self) -> bool {
        self.held.is_lost()
    }

    /// Completes when the lock is lost, with the reason. Pending forever while it is held.
    pub async fn lost(&self) -> LostReason {
        self.held.lost().await
    }

    /// A handle on this guard's loss that lives apart from the guard (e.g. to watch for loss
    /// on another task while this one works).
    pub fn lost_signal(&self) -> LostSignal {
        self.held.lost_signal()
    }

    /// The local deadline: until when the lock is valid, as its latest confirmed renewal
    /// proves (the lease counted from that request's send, less the drift allowance). The
    /// server cannot give the lock to another before it; work that must not overlap the next
    /// holder's stops by then. Renewals move it on; [`lost`](Self::lost) fires when it
    /// passes without one.
    pub fn valid_until(&self) -> tokio::time::Instant {
        self.held.valid_until()
    }

    /// Renews now with `lease`, which later renewals keep using.
    pub async fn extend(&self, lease: Duration) -> Result<(), Error> {
        self.held.extend(lease).await
    }

    /// Releases the lock (one level of a reentrant hold) and waits for the backend's answer.
    pub async fn release(self) -> Result<(), Error> {
        self.held.release().await
    }
}

/// A held multi-lock: every one of its locks is held. Dropping it releases them all in the
/// background.
#[derive(Debug)]
#[must_use = "dropping a MultiGuard releases the locks"]
pub struct MultiGuard {
    held: Held,
    members: Vec<Member>,
}

impl MultiGuard {
    /// Each lock's name and fencing token, in canonical order (names sorted by their bytes).
    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// Until when every lock is valid (the earliest of theirs); see [`Guard::valid_until`].
    pub fn valid_until(&self) -> tokio::time::Instant {
        self.held.valid_until()
    }

    /// The fencing token of lock `name`, if it is one of this multi-lock's.
    pub fn fencing_token(&self, name: &str) -> Option<u64> {
        let member = self.members.iter().find(|m| m.name == name);
        member.map(|m| m.fencing_token)
    }

    /// True once any of its locks is lost (then all of them are given up).
    pub fn is_lost(&self) -> bool {
        self.held.is_lost()
    }

    /// Completes when the multi-lock is lost, with the reason of the first lock lost.
    pub async fn lost(&self) -> LostReason {
        self.held.lost().await
    }

    /// A handle on this multi-lock's loss that lives apart from the guard.
    pub fn lost_signal(&self) -> LostSignal {
        self.held.lost_signal()
    }

    /// Renews every lock now with `lease`, which later renewals keep using.
    pub async fn extend(&self, lease: Duration) -> Result<(), Error> {
        self.held.extend(lease).await
    }

    /// Releases every lock and waits for the backends' answers.
    pub async fn release(self) -> Result<(), Error> {
        self.held.release().await
    }
}

/// A held lock or multi-lock that many threads or tasks may share and that is released
/// once: what the Python and Node bindings hand out. Cheap to clone.
#[derive(Debug, Clone)]
pub struct SharedGuard {
    held: Arc<tokio::sync::Mutex<Option<Held>>>,
    hold: HoldId,
    lost: LostSignal,
    /// One lock's name and token, or a multi-lock's in canonical order.
    members: Arc<[Member]>,
}

impl From<Guard> for SharedGuard {
    fn from(guard: Guard) -> Self {
        let member = Member {
            name: guard.name.into(),
            fencing_token: guard.fencing_token,
        };
        SharedGuard::new(guard.held, vec![member])
    }
}

impl From<MultiGuard> for SharedGuard {
    fn from(guard: MultiGuard) -> Self {
        SharedGuard::new(guard.held, guard.members)
    }
}

impl SharedGuard {
    fn new(held: Held, members: Vec<Member>) -> Self {
        SharedGuard {
            hold: held.hold,
            lost: held.lost_signal(),
            members: members.into(),
            held: Arc::new(tokio::sync::Mutex::new(Some(held))),
        }
    }

    /// The lock's name (a multi-lock's first, in canonical order).
    pub fn name(&self) -> &str {
        &self.members[0].name
    }

    /// The lock's fencing token (a multi-lock's first lock's; see [`members`](Self::members)).
    pub fn fencing_token(&self) -> u64 {
        self.members[0].fencing_token
    }

    /// Each lock's name and fencing token: one, or a multi-lock's in canonical order.
    pub fn members(&self) -> &[Member] {
        &self.members
    }

    pub fn lost_signal(&self) -> &LostSignal {
        &self.lost
    }

    /// Until when it is valid; see [`Guard::valid_until`].
    pub fn valid_until(&self) -> tokio::time::Instant {
        self.lost.signal.valid_until(self.lost.base)
    }

    /// True while held: not released, not lost.
    pub fn is_held(&self) -> bool {
        self.lost.reason().is_none() && self.held.try_lock().map(|g| g.is_some()).unwrap_or(true)
    }

    /// Releases the lock; a second release fails with [`dlock_core::Error::NotHeld`].
    pub async fn release(&self) -> Result<(), Error> {
        let taken = self.held.lock().await.take();
        taken.ok_or(self.released())?.release().await
    }

    /// Renews now with `lease`; see [`Guard::extend`].
    pub async fn extend(&self, lease: Duration) -> Result<(), Error> {
        let held = self.held.lock().await;
        held.as_ref().ok_or(self.released())?.extend(lease).await
    }

    fn released(&self) -> Error {
        Error::Engine(dlock_core::Error::NotHeld { hold: self.hold })
    }
}

/// Tells when a held lock is lost; see [`Guard::lost_signal`].
#[derive(Debug, Clone)]
pub struct LostSignal {
    signal: Arc<HoldSignal>,
    /// The client's base instant, which the signal's validity counts from.
    base: tokio::time::Instant,
}

impl LostSignal {
    /// Why the lock was lost, if it was.
    pub fn reason(&self) -> Option<LostReason> {
        self.signal.lost()
    }

    /// Completes with the reason when the lock is lost, or with `None` once it has been
    /// released (it can no longer be lost).
    pub async fn wait(&self) -> Option<LostReason> {
        self.signal.ended().await
    }
}
