//! dlock's fault suite, after Jepsen's lock checkers: worker processes (`fault-worker`) take
//! one lock in turn and make fenced writes to a resource while a nemesis pauses, kills or
//! cuts off the holder, slows the link, restarts the server or kills the ZooKeeper leader.
//! The workers log every step with CLOCK_MONOTONIC times; [`run`] reads the logs back and
//! counts:
//!
//! - **stale writes**: writes a worker sent after the lock service had granted a later
//!   tenure to another worker (in the order the workers saw their acquisitions), and how
//!   many of those the resource accepted. Accepted stale writes are the violations: the
//!   fencing token exists to make that number 0.
//! - **recovery**: how long after a holder died (paused, killed, cut off) the lock was
//!   acquired again; it must stay within the lease (ZooKeeper: the session timeout, plus any
//!   lock-delay) + 1 s — under lock-delay, from the later of the fault and the paused
//!   holder's last renewal reaching the server.
//! - **told lost**: whether the holder that was paused or cut off heard that its lock was lost.
//!
//! Set `DLOCK_FAULTS_KEEP=1` to keep each run's worker logs.
//!
//! `tests/reduced.rs` runs every scenario once in `just test`; `just faults` runs them for
//! several rounds and writes the table to `tests/faults/results/latest.md`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use dlock_testkit::{MariadbServer, PostgresServer, RedisServer, TcpProxy, ZkEnsemble};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// CLOCK_MONOTONIC in nanoseconds: the one clock the harness and every worker read.
pub fn monotonic_ns() -> u64 {
    let ts = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).expect("a clock");
    u64::try_from(ts.tv_sec()).expect("after boot") * 1_000_000_000
        + u64::try_from(ts.tv_nsec()).expect("in range")
}

/// Where a scenario's lock lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// One redis-server without persistence.
    Redis,
    /// One redis-server with `appendonly yes`, `appendfsync always`.
    RedisAof,
    /// A redis-server primary and a replica, behind one address that a failover moves.
    RedisReplicated,
    /// One ZooKeeper server.
    ZooKeeper,
    /// A three-server ZooKeeper ensemble.
    ZkEnsemble,
    /// Redlock over five redis-servers without persistence.
    Redlock,
    /// One PostgreSQL server (the SQL backend).
    Postgres,
    /// One MariaDB server (the SQL backend).
    Mariadb,
}

/// What the nemesis does in each round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nemesis {
    /// SIGSTOP the holder mid-tenure, past its lease; then SIGCONT.
    Pause,
    /// SIGKILL the holder mid-tenure (and start a fresh worker in its place).
    Kill,
    /// SIGKILL every queued waiter while a holder works (and start fresh workers, which queue
    /// behind the dead): the release hands the lock to a dead waiter, whose tenure must lapse
    /// within its waiter lease (ZooKeeper: its session) for the next live one to get it.
    WaiterKill,
    /// Hold all traffic between the holder and the server past its lease; then let it flow.
    Partition,
    /// Every client's link gets 5 ms of latency each way and stalls of 250 ms now and then,
    /// the way lost packets stall a TCP stream until they are sent again.
    SlowLink,
    /// SIGKILL the lock server mid-tenure and start it again on the same port and directory
    /// (on Redlock: three of the five nodes, a majority, at once).
    Restart,
    /// SIGKILL the ZooKeeper leader while the lock is held; start it again later.
    LeaderKill,
    /// Kill every client connection at the database mid-tenure (`pg_terminate_backend`,
    /// `KILL`): the clients reconnect, the holder keeps its lock if it renews in time.
    KillConnections,
    /// Fail over to a replica that missed the latest writes: the replica is detached just
    /// before a tenure starts, then the primary is killed mid-tenure and the replica takes its
    /// address (a new replica is attached for the next round).
    Failover,
}

/// One line of the table.
#[derive(Debug, Clone, Copy)]
pub struct Scenario {
    pub name: &'static str,
    pub backend: Backend,
    pub nemesis: Nemesis,
    /// False for the control: every write goes to a key of its own tenure, so no fence ever
    /// compares two tokens — and the checker must then see stale writes get through.
    pub fenced: bool,
    /// The workers' lock-delay (Redis). With one, a paused holder must meet no new holder
    /// when it resumes within lease + delay: no stale write may even be attempted.
    pub lock_delay: Duration,
    /// The workers campaign in an election (PROTOCOL.md §20) instead of acquiring the lock:
    /// each tenure is a term, its writes fenced by the term, and it ends by resigning.
    pub election: bool,
}

const fn scenario(name: &'static str, backend: Backend, nemesis: Nemesis) -> Scenario {
    Scenario {
        name,
        backend,
        nemesis,
        fenced: true,
        lock_delay: Duration::ZERO,
        election: false,
    }
}

/// A scenario whose workers are candidates of an election.
const fn election(name: &'static str, backend: Backend, nemesis: Nemesis) -> Scenario {
    Scenario {
        election: true,
        ..scenario(name, backend, nemesis)
    }
}

/// Every scenario, in the order of the table.
pub const SCENARIOS: [Scenario; 29] = [
    scenario("redis-pause", Backend::Redis, Nemesis::Pause),
    scenario("redis-kill", Backend::Redis, Nemesis::Kill),
    scenario("redis-waiter-kill", Backend::Redis, Nemesis::WaiterKill),
    scenario("redis-partition", Backend::Redis, Nemesis::Partition),
    scenario("redis-slow-link", Backend::Redis, Nemesis::SlowLink),
    scenario("redis-restart", Backend::Redis, Nemesis::Restart),
    scenario("redis-restart-aof", Backend::RedisAof, Nemesis::Restart),
    scenario(
        "redis-failover",
        Backend::RedisReplicated,
        Nemesis::Failover,
    ),
    scenario("zk-pause", Backend::ZooKeeper, Nemesis::Pause),
    scenario("zk-kill", Backend::ZooKeeper, Nemesis::Kill),
    scenario("zk-waiter-kill", Backend::ZooKeeper, Nemesis::WaiterKill),
    scenario("zk-session-expiry", Backend::ZooKeeper, Nemesis::Partition),
    scenario("zk-leader-kill", Backend::ZkEnsemble, Nemesis::LeaderKill),
    scenario(
        "redlock-majority-restart",
        Backend::Redlock,
        Nemesis::Restart,
    ),
    scenario("postgres-pause", Backend::Postgres, Nemesis::Pause),
    scenario("postgres-kill", Backend::Postgres, Nemesis::Kill),
    scenario("postgres-partition", Backend::Postgres, Nemesis::Partition),
    scenario("postgres-restart", Backend::Postgres, Nemesis::Restart),
    scenario(
        "postgres-kill-connections",
        Backend::Postgres,
        Nemesis::KillConnections,
    ),
    scenario("mariadb-pause", Backend::Mariadb, Nemesis::Pause),
    scenario("mariadb-restart", Backend::Mariadb, Nemesis::Restart),
    scenario(
        "mariadb-kill-connections",
        Backend::Mariadb,
        Nemesis::KillConnections,
    ),
    Scenario {
        lock_delay: Duration::from_secs(3),
        ..scenario("redis-pause-lock-delay", Backend::Redis, Nemesis::Pause)
    },
    election("redis-election-pause", Backend::Redis, Nemesis::Pause),
    election("redis-election-kill", Backend::Redis, Nemesis::Kill),
    election("zk-election-kill", Backend::ZooKeeper, Nemesis::Kill),
    election("postgres-election-pause", Backend::Postgres, Nemesis::Pause),
    election("mariadb-election-kill", Backend::Mariadb, Nemesis::Kill),
    Scenario {
        fenced: false,
        ..scenario("control-unfenced-pause", Backend::Redis, Nemesis::Pause)
    },
];

/// Scenarios the suite cannot run yet, with the reason printed in the table.
pub const NOT_RUN: [(&str, &str); 1] = [(
    "netem latency and loss",
    "needs the kernel's sch_netem in a network namespace; redis-slow-link emulates it in a proxy",
)];

/// How long and how hard.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Nemesis rounds per scenario.
    pub rounds: usize,
    /// Worker processes contending at any time.
    pub workers: usize,
    /// Each tenure's lease (Redis).
    pub lease: Duration,
    /// The ZooKeeper session timeout (ZooKeeper's lease).
    pub session_timeout: Duration,
    /// Time between a tenure's two fenced writes.
    pub hold: Duration,
    /// The `fault-worker` executable.
    pub worker: PathBuf,
}

impl Settings {
    /// One round per scenario, for `just test`.
    pub fn reduced(worker: PathBuf) -> Self {
        Settings {
            rounds: 1,
            workers: 3,
            lease: Duration::from_millis(1000),
            session_timeout: Duration::from_millis(2000),
            hold: Duration::from_millis(200),
            worker,
        }
    }

    /// Five rounds per scenario, for `just faults`.
    pub fn full(worker: PathBuf) -> Self {
        Settings {
            rounds: 5,
            ..Self::reduced(worker)
        }
    }
}

/// What one scenario showed.
#[derive(Debug)]
pub struct Report {
    pub scenario: Scenario,
    pub rounds: usize,
    pub acquisitions: usize,
    /// Acquire calls that failed (the server was down or unreachable).
    pub failed_acquires: usize,
    pub stale_attempted: usize,
    pub stale_accepted: usize,
    /// Per round: time from the fault to the next acquisition.
    pub recovery: Vec<Option<Duration>>,
    /// The bound `recovery` must meet, for faults that end a holder.
    pub bound: Option<Duration>,
    /// Rounds whose recovery is timed from the paused holder's resume, because a renewal it
    /// had sent before the pause reached the server only then (lock-delay scenarios).
    pub late_renewals: usize,
    /// Holders hit by the fault who should hear their lock was lost, and how many did.
    pub victims: usize,
    pub told_lost: usize,
    /// Every report of a lost lock, by any worker.
    pub lost_events: usize,
}

impl Report {
    /// What went wrong: stale writes accepted, a lock not usable again in time, a paused or
    /// cut-off holder never told.
    pub fn violations(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.scenario.fenced && self.stale_accepted > 0 {
            out.push(format!("{} stale writes accepted", self.stale_accepted));
        }
        if !self.scenario.lock_delay.is_zero() && self.stale_attempted > 0 {
            out.push(format!(
                "{} writes met a new holder inside the lock-delay",
                self.stale_attempted
            ));
        }
        if !self.scenario.fenced && self.stale_accepted < self.rounds {
            out.push(format!(
                "the checker saw {} stale writes get through without a fence in {} rounds",
                self.stale_accepted, self.rounds
            ));
        }
        for (round, recovery) in self.recovery.iter().enumerate() {
            match (recovery, self.bound) {
                (None, _) => out.push(format!("round {round}: the lock was never taken again")),
                (Some(r), Some(bound)) if *r > bound => out.push(format!(
                    "round {round}: usable again after {} ms, over the bound of {} ms",
                    r.as_millis(),
                    bound.as_millis()
                )),
                _ => {}
            }
        }
        if self.told_lost < self.victims {
            out.push(format!(
                "{} of {} holders hit were never told their lock was lost",
                self.victims - self.told_lost,
                self.victims
            ));
        }
        out
    }
}

/// Runs `scenarios`, `jobs` at a time, and returns their reports in the order given. Each
/// scenario has its servers, workers, ports and directory of its own, and mostly waits (on
/// leases, sessions and restarts), so several share a machine; `just faults`, whose table
/// records how long recovery takes, runs one at a time.
pub fn run_each(scenarios: &[Scenario], settings: &Settings, jobs: usize) -> Vec<Report> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let next = AtomicUsize::new(0);
    let mut reports: Vec<(usize, Report)> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..jobs.clamp(1, scenarios.len().max(1)))
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(&scenario) = scenarios.get(i) else {
                            return done;
                        };
                        eprintln!("{}: {} rounds", scenario.name, settings.rounds);
                        let report = run(scenario, settings);
                        eprintln!("{report:?}");
                        done.push((i, report));
                    }
                })
            })
            .collect();
        threads
            .into_iter()
            .flat_map(|t| t.join().expect("a scenario's thread panicked"))
            .collect()
    });
    reports.sort_by_key(|&(i, _)| i);
    reports.into_iter().map(|(_, report)| report).collect()
}

/// Runs one scenario and reads its logs back.
pub fn run(scenario: Scenario, settings: &Settings) -> Report {
    let mut world = World::start(scenario, settings);
    world.wait_ready();
    std::thread::sleep(Duration::from_secs(1));
    for _ in 0..settings.rounds {
        world.round();
    }
    world.stop();
    world.report()
}

/// The scenarios' results as a Markdown table.
pub fn table(reports: &[Report]) -> String {
    let mut out = String::from(
        "| scenario | rounds | acquisitions | failed acquires | stale writes attempted \
         | stale writes accepted | usable again after (max) | bound | holders told lost \
         | lost events | result |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n",
    );
    for r in reports {
        let recovery = r
            .recovery
            .iter()
            .map(|d| d.map_or(u128::MAX, |d| d.as_millis()))
            .max()
            .map_or("–".into(), |ms| {
                if ms == u128::MAX {
                    "never".into()
                } else {
                    format!("{ms} ms")
                }
            });
        let bound = r
            .bound
            .map_or("–".into(), |b| format!("{} ms", b.as_millis()));
        let told = if r.victims == 0 {
            "–".into()
        } else {
            format!("{}/{}", r.told_lost, r.victims)
        };
        let violations = r.violations();
        let result = if !violations.is_empty() {
            violations.join("; ")
        } else if r.late_renewals > 0 {
            format!(
                "ok ({} timed from the holder's resume: a renewal it sent before the pause \
                 reached the server then)",
                r.late_renewals
            )
        } else {
            "ok".to_owned()
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {recovery} | {bound} | {told} | {} | {result} |",
            r.scenario.name,
            r.rounds,
            r.acquisitions,
            r.failed_acquires,
            r.stale_attempted,
            r.stale_accepted,
            r.lost_events,
        );
    }
    for (name, why) in NOT_RUN {
        let _ = writeln!(
            out,
            "| {name} | – | – | – | – | – | – | – | – | – | not run: {why} |"
        );
    }
    out
}

enum LockServer {
    Redis(RedisServer),
    /// Clients use `front`'s address, which leads to `primary`.
    Replicated {
        primary: RedisServer,
        replica: Option<RedisServer>,
        front: TcpProxy,
    },
    Zk(ZkEnsemble),
    Redlock(Vec<RedisServer>),
    Postgres(PostgresServer),
    Mariadb(MariadbServer),
}

impl LockServer {
    fn replicated() -> Self {
        let primary = RedisServer::start();
        let front = TcpProxy::start(primary.port());
        let replica = Some(replica_of(&primary));
        LockServer::Replicated {
            primary,
            replica,
            front,
        }
    }
}

/// A new replica of `primary`, once it has synchronised.
fn replica_of(primary: &RedisServer) -> RedisServer {
    let port = primary.port().to_string();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !redis_cli(replica.port(), &["INFO", "replication"]).contains("master_link_status:up") {
        assert!(
            Instant::now() < deadline,
            "the replica did not sync in 30 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    replica
}

fn redis_cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

struct Worker {
    label: String,
    child: Child,
    /// The worker's own proxy in front of the lock server, for faults on its link alone.
    proxy: Option<TcpProxy>,
}

/// The lock every worker takes.
const LOCK: &str = "faults/job";

/// A fault the nemesis injected: when, and which tenure it hit (if any).
struct Event {
    at: u64,
    /// When the lock's recovery starts: the fault, or (a paused holder under lock-delay) the
    /// resume if a renewal the holder had sent only reached the server then — it restarted
    /// lease + lock-delay there (docs/PROTOCOL.md §4).
    recover_from: u64,
    victim: Option<(String, u64)>,
    /// Whether the victim must hear that its lock was lost.
    must_tell: bool,
}

struct World {
    scenario: Scenario,
    settings: Settings,
    dir: PathBuf,
    resource: RedisServer,
    lock: LockServer,
    workers: Vec<Worker>,
    spawned: usize,
    events: Vec<Event>,
    rng: dlock_testkit::Rng,
}

impl World {
    fn start(scenario: Scenario, settings: &Settings) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "dlock-faults-{}-{}-{}",
            scenario.name,
            std::process::id(),
            monotonic_ns()
        ));
        std::fs::create_dir_all(&dir).expect("a temp dir");
        let lock = match scenario.backend {
            Backend::Redis => LockServer::Redis(RedisServer::start()),
            Backend::RedisAof => LockServer::Redis(RedisServer::start_with(&[
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
            ])),
            Backend::RedisReplicated => LockServer::replicated(),
            Backend::ZooKeeper => LockServer::Zk(ZkEnsemble::start(1)),
            Backend::ZkEnsemble => LockServer::Zk(ZkEnsemble::start(3)),
            Backend::Redlock => LockServer::Redlock((0..5).map(|_| RedisServer::start()).collect()),
            Backend::Postgres => LockServer::Postgres(PostgresServer::start()),
            Backend::Mariadb => LockServer::Mariadb(MariadbServer::start()),
        };
        let mut world = World {
            scenario,
            settings: settings.clone(),
            dir,
            resource: RedisServer::start(),
            lock,
            workers: Vec::new(),
            spawned: 0,
            events: Vec::new(),
            rng: dlock_testkit::Rng(monotonic_ns() | 1),
        };
        for _ in 0..settings.workers {
            world.spawn_worker();
        }
        world
    }

    fn proxied(&self) -> bool {
        matches!(
            self.scenario.nemesis,
            Nemesis::Partition | Nemesis::SlowLink
        )
    }

    /// The lock server's URL, through `port` when given.
    fn lock_url(&self, port: Option<u16>) -> String {
        match &self.lock {
            LockServer::Redis(redis) => {
                format!("redis://127.0.0.1:{}", port.unwrap_or(redis.port()))
            }
            LockServer::Replicated { front, .. } => format!("redis://127.0.0.1:{}", front.port()),
            LockServer::Redlock(nodes) => dlock_testkit::redlock_url(nodes),
            LockServer::Zk(zk) => {
                let hosts = port.map_or_else(|| zk.hosts(), |p| format!("127.0.0.1:{p}"));
                format!(
                    "zk://{hosts}?session_timeout_ms={}",
                    self.settings.session_timeout.as_millis()
                )
            }
            LockServer::Postgres(pg) => format!(
                "postgres://postgres@127.0.0.1:{}/postgres",
                port.unwrap_or(pg.port())
            ),
            LockServer::Mariadb(db) => {
                format!("mysql://root@127.0.0.1:{}/dlock", port.unwrap_or(db.port()))
            }
        }
    }

    fn lock_port(&self) -> u16 {
        match &self.lock {
            LockServer::Redis(redis) => redis.port(),
            LockServer::Replicated { front, .. } => front.port(),
            LockServer::Zk(zk) => zk.port(0),
            LockServer::Redlock(nodes) => nodes[0].port(),
            LockServer::Postgres(pg) => pg.port(),
            LockServer::Mariadb(db) => db.port(),
        }
    }

    fn spawn_worker(&mut self) {
        let label = format!("w{}", self.spawned);
        self.spawned += 1;
        let proxy = self.proxied().then(|| TcpProxy::start(self.lock_port()));
        if let Some(proxy) = &proxy
            && self.scenario.nemesis == Nemesis::SlowLink
        {
            proxy.delay(Duration::from_millis(5));
        }
        let url = self.lock_url(proxy.as_ref().map(TcpProxy::port));
        let child = Command::new(&self.settings.worker)
            .args([
                url,
                self.resource.url(),
                LOCK.into(),
                self.dir.to_string_lossy().into_owned(),
                label.clone(),
                self.settings.lease.as_millis().to_string(),
                self.hold().as_millis().to_string(),
                if self.scenario.fenced {
                    "fenced"
                } else {
                    "unfenced"
                }
                .into(),
                self.scenario.lock_delay.as_millis().to_string(),
                if self.scenario.election {
                    "election"
                } else {
                    "lock"
                }
                .into(),
            ])
            .stdin(Stdio::null())
            .spawn()
            .expect("the fault-worker starts");
        self.workers.push(Worker {
            label,
            child,
            proxy,
        });
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self
            .workers
            .iter()
            .all(|w| self.dir.join(format!("{}.ready", w.label)).exists())
        {
            for w in &mut self.workers {
                if let Some(status) = w.child.try_wait().expect("waitable") {
                    panic!("worker {} exited before it was ready: {status}", w.label);
                }
            }
            assert!(Instant::now() < deadline, "workers not ready after 60 s");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// How long a dead holder may keep the lock: its lease, or on ZooKeeper its session.
    fn lease(&self) -> Duration {
        match self.scenario.backend {
            Backend::Redis
            | Backend::RedisAof
            | Backend::RedisReplicated
            | Backend::Redlock
            | Backend::Postgres
            | Backend::Mariadb => self.settings.lease,
            Backend::ZooKeeper | Backend::ZkEnsemble => self.settings.session_timeout,
        }
    }

    /// Time between a tenure's two writes. A fault that leaves the holder running (cut off,
    /// or its server restarted) strikes as a tenure starts, and the holder's second write
    /// comes two leases later: after a new holder can have taken the lock, so it tests the
    /// fence.
    fn hold(&self) -> Duration {
        match self.scenario.nemesis {
            Nemesis::Partition | Nemesis::Restart | Nemesis::Failover => self.lease() * 2,
            // The pause (lease + 1.5 s) ends inside the lock-delay; the second write comes
            // half a second later, still inside it.
            Nemesis::Pause if !self.scenario.lock_delay.is_zero() => {
                self.lease() + Duration::from_secs(2)
            }
            _ => self.settings.hold,
        }
    }

    fn round(&mut self) {
        let lease = self.lease();
        match self.scenario.nemesis {
            Nemesis::Pause => {
                // Under lock-delay, pause a tenure as it starts, so that it resumes inside
                // the delay with half a second of work left.
                let fresh = !self.scenario.lock_delay.is_zero();
                let (i, token, at) = self.stop_holder(fresh);
                std::thread::sleep(lease + Duration::from_millis(1500));
                let expiry = fresh.then(|| self.lock_tenure().1);
                let resumed = monotonic_ns();
                signal(&self.workers[i].child, Signal::SIGCONT);
                self.hit(i, token, at, true);
                // A renewal the holder's engine sent just before the stop, but that its
                // socket only wrote on resuming, lands now: the lock still exists within its
                // lock-delay, so the server keeps it for lease + lock-delay from here. Once
                // the holder's tenure is over (its connection answers in order), the lock's
                // expiry on the server says whether that happened.
                if let Some(expiry) = expiry {
                    self.tenure_over_wait(i, token);
                    let (fence, later) = self.lock_tenure();
                    if fence == Some(token) && later > expiry {
                        self.events.last_mut().expect("just hit").recover_from = resumed;
                    }
                }
            }
            Nemesis::Kill => {
                let (i, token, at) = self.stop_holder(false);
                let mut worker = self.workers.remove(i);
                signal(&worker.child, Signal::SIGKILL);
                let _ = worker.child.wait();
                self.spawn_worker();
                self.events.push(Event {
                    at,
                    recover_from: at,
                    victim: Some((worker.label, token)),
                    must_tell: false,
                });
                std::thread::sleep(lease + Duration::from_millis(1500));
            }
            Nemesis::WaiterKill => {
                let (holder, _) = self.holder_mid_tenure_wait();
                let holder = self.workers[holder].child.id();
                let at = monotonic_ns();
                let (kept, waiters) = std::mem::take(&mut self.workers)
                    .into_iter()
                    .partition(|w| w.child.id() == holder);
                self.workers = kept;
                for mut waiter in waiters {
                    signal(&waiter.child, Signal::SIGKILL);
                    let _ = waiter.child.wait();
                    self.spawn_worker();
                }
                self.events.push(Event {
                    at,
                    recover_from: at,
                    victim: None,
                    must_tell: false,
                });
                std::thread::sleep(lease + Duration::from_millis(1500));
            }
            Nemesis::Partition => {
                let (i, token) = self.fresh_holder_wait();
                let at = monotonic_ns();
                let proxy = self.workers[i].proxy.as_ref().expect("proxied");
                proxy.stall(true);
                std::thread::sleep(lease + Duration::from_millis(1500));
                proxy.stall(false);
                self.hit(i, token, at, true);
            }
            Nemesis::SlowLink => {
                let at = monotonic_ns();
                for _ in 0..8 {
                    let i = self.rng.below(self.workers.len() as u64) as usize;
                    let proxy = self.workers[i].proxy.as_ref().expect("proxied");
                    proxy.stall(true);
                    std::thread::sleep(Duration::from_millis(250));
                    proxy.stall(false);
                    std::thread::sleep(Duration::from_millis(self.rng.range(100, 400)));
                }
                self.events.push(Event {
                    at,
                    recover_from: at,
                    victim: None,
                    must_tell: false,
                });
            }
            Nemesis::Restart => {
                let (i, token) = self.fresh_holder_wait();
                let at = monotonic_ns();
                match &mut self.lock {
                    LockServer::Redis(redis) => redis.restart(),
                    // A majority forgets the lock: another client can form a majority while
                    // the holder's validity runs, and only the fence stops its late write.
                    LockServer::Redlock(nodes) => {
                        nodes[..3].iter_mut().for_each(RedisServer::restart)
                    }
                    // The databases keep every committed row: the holder keeps its lock.
                    LockServer::Postgres(pg) => pg.restart(),
                    LockServer::Mariadb(db) => db.restart(),
                    _ => unreachable!("restarts are for Redis and the databases"),
                }
                // Without persistence the holder's lock is gone and its next renewal must
                // tell it so; with AOF, or on a database, it keeps the lock.
                let must_tell = !matches!(
                    self.scenario.backend,
                    Backend::RedisAof | Backend::Postgres | Backend::Mariadb
                );
                self.hit(i, token, at, must_tell);
                std::thread::sleep(lease + Duration::from_millis(1500));
            }
            Nemesis::KillConnections => {
                let (i, token) = self.fresh_holder_wait();
                let at = monotonic_ns();
                match &self.lock {
                    LockServer::Postgres(pg) => {
                        pg.psql("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'dlock'");
                    }
                    LockServer::Mariadb(db) => {
                        let ids = db.sql("SELECT id FROM information_schema.PROCESSLIST WHERE db = 'dlock' AND id <> CONNECTION_ID()");
                        for id in ids.lines().filter(|l| !l.is_empty()) {
                            let _ = db.sql(&format!("KILL {id}"));
                        }
                    }
                    _ => unreachable!("connection kills are for the databases"),
                }
                self.hit(i, token, at, false);
                std::thread::sleep(lease + Duration::from_millis(1500));
            }
            Nemesis::Failover => {
                let LockServer::Replicated { replica, .. } = &mut self.lock else {
                    unreachable!("failovers are for a replicated Redis")
                };
                let promoted = replica.take().expect("a replica to fail over to");
                // From here on the replica misses every write: the tenure below, its fence.
                redis_cli(promoted.port(), &["REPLICAOF", "NO", "ONE"]);
                let (i, token) = self.fresh_holder_wait();
                let at = monotonic_ns();
                let LockServer::Replicated {
                    primary,
                    replica,
                    front,
                } = &mut self.lock
                else {
                    unreachable!()
                };
                front.retarget(promoted.port());
                let mut old = std::mem::replace(primary, promoted);
                old.stop();
                *replica = Some(replica_of(primary));
                self.hit(i, token, at, true);
                std::thread::sleep(lease + Duration::from_millis(1500));
            }
            Nemesis::LeaderKill => {
                let _ = self.holder_mid_tenure_wait();
                let LockServer::Zk(zk) = &mut self.lock else {
                    unreachable!("leader kills are for ZooKeeper ensembles")
                };
                let leader = zk.leader().expect("the ensemble has a leader");
                let at = monotonic_ns();
                zk.kill(leader);
                self.events.push(Event {
                    at,
                    recover_from: at,
                    victim: None,
                    must_tell: false,
                });
                std::thread::sleep(Duration::from_secs(5));
                zk.restart(leader);
            }
        }
        // Let the victim finish its tenure (and any lock-delay run out), and the others
        // settle, before the next fault.
        std::thread::sleep(lease + self.scenario.lock_delay);
    }

    /// Records a fault at `at` that hit worker `i`'s tenure `token`.
    fn hit(&mut self, i: usize, token: u64, at: u64, must_tell: bool) {
        let label = self.workers[i].label.clone();
        self.events.push(Event {
            at,
            recover_from: at,
            victim: Some((label, token)),
            must_tell,
        });
    }

    /// The lock's tenure on a single redis-server, read at once: its fencing token (`None`
    /// when nobody holds it) and its expiry in the server's Unix ms (PEXPIRETIME; -2 when
    /// there is no lock). Within one tenure the expiry moves later only when a renewal
    /// reaches the server.
    fn lock_tenure(&self) -> (Option<u64>, i64) {
        let LockServer::Redis(redis) = &self.lock else {
            unreachable!("lock-delay scenarios run on one redis-server")
        };
        let key = format!("dlock:{{{LOCK}}}:lock");
        let script = "return {redis.call('HGET', KEYS[1], 'fence') or '', \
                      redis.call('PEXPIRETIME', KEYS[1])}";
        let out = redis_cli(redis.port(), &["EVAL", script, "1", &key]);
        let mut lines = out.lines();
        let fence = lines.next().and_then(|l| l.trim().parse().ok());
        let expiry = lines
            .next()
            .and_then(|l| l.trim().parse().ok())
            .expect("PEXPIRETIME answers a number");
        (fence, expiry)
    }

    /// Waits until worker `i` has logged the release of tenure `token`.
    fn tenure_over_wait(&self, i: usize, token: u64) {
        let done = format!("rel {token} ");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !std::fs::read_to_string(self.log_path(&self.workers[i].label))
            .unwrap_or_default()
            .lines()
            .any(|l| l.starts_with(&done))
        {
            assert!(
                Instant::now() < deadline,
                "tenure {token} not over after 30 s"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Index and token of a worker in the middle of a tenure (acquired, and not yet done
    /// waiting for its second write), or `None`.
    fn holder_mid_tenure(&self) -> Option<(usize, u64)> {
        let holder = std::fs::read_to_string(self.dir.join("holder")).ok()?;
        let (pid, token) = holder.split_once(' ')?;
        let (pid, token): (u32, u64) = (pid.parse().ok()?, token.parse().ok()?);
        let i = self.workers.iter().position(|w| w.child.id() == pid)?;
        let log = std::fs::read_to_string(self.log_path(&self.workers[i].label)).ok()?;
        let tail: Vec<&str> = log
            .lines()
            .rev()
            .take_while(|l| !l.starts_with("acq "))
            .collect();
        let acq = log.lines().rev().nth(tail.len())?;
        let woke = tail.iter().any(|l| l.starts_with("woke "));
        (acq.split(' ').nth(1) == Some(token.to_string().as_str()) && !woke).then_some((i, token))
    }

    /// Waits for a worker mid-tenure (see [`Self::holder_mid_tenure`]).
    fn holder_mid_tenure_wait(&self) -> (usize, u64) {
        self.holder_wait(|_| true)
    }

    /// Waits for a tenure that starts from now on and returns as soon as it has: for faults
    /// that must outlast the holder's lease before its second write.
    fn fresh_holder_wait(&self) -> (usize, u64) {
        let current = self.holder_mid_tenure();
        self.holder_wait(|found| Some(found) != current)
    }

    fn holder_wait(&self, wanted: impl Fn((usize, u64)) -> bool) -> (usize, u64) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(found) = self.holder_mid_tenure().filter(|f| wanted(*f)) {
                return found;
            }
            assert!(
                Instant::now() < deadline,
                "no worker held the lock for 30 s"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Stops (SIGSTOP) a worker in the middle of a tenure (one that starts from now on, if
    /// `fresh`): its index, token and the time.
    fn stop_holder(&mut self, fresh: bool) -> (usize, u64, u64) {
        loop {
            let (i, token) = if fresh {
                self.fresh_holder_wait()
            } else {
                self.holder_mid_tenure_wait()
            };
            let at = monotonic_ns();
            let child = &self.workers[i].child;
            signal(child, Signal::SIGSTOP);
            wait_stopped(child.id());
            // Stopped; was it still mid-tenure when it stopped?
            if self.holder_mid_tenure() == Some((i, token)) {
                return (i, token, at);
            }
            signal(child, Signal::SIGCONT);
            std::thread::sleep(Duration::from_millis(self.rng.range(1, 20)));
        }
    }

    fn log_path(&self, label: &str) -> PathBuf {
        self.dir.join(format!("{label}.log"))
    }

    fn stop(&mut self) {
        std::fs::write(self.dir.join("stop"), "").expect("writable dir");
        let deadline = Instant::now() + Duration::from_secs(20);
        for w in &mut self.workers {
            loop {
                if w.child.try_wait().expect("waitable").is_some() {
                    break;
                }
                if Instant::now() > deadline {
                    let _ = w.child.kill();
                    let _ = w.child.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    fn report(&self) -> Report {
        let history = History::read(&self.dir);
        let mut report = Report {
            scenario: self.scenario,
            rounds: self.settings.rounds,
            acquisitions: history.tenures.len(),
            failed_acquires: history.failed_acquires,
            stale_attempted: 0,
            stale_accepted: 0,
            recovery: Vec::new(),
            bound: match self.scenario.nemesis {
                Nemesis::Pause | Nemesis::Kill | Nemesis::Partition => {
                    Some(self.lease() + self.scenario.lock_delay + Duration::from_secs(1))
                }
                // The holder finishes its tenure, then a dead waiter's handed tenure lapses
                // within its waiter lease (at most the lease; ZooKeeper: the session).
                Nemesis::WaiterKill => Some(self.hold() + self.lease() + Duration::from_secs(1)),
                _ => None,
            },
            late_renewals: self
                .events
                .iter()
                .filter(|e| e.recover_from != e.at)
                .count(),
            victims: 0,
            told_lost: 0,
            lost_events: history.lost.len(),
        };
        for write in &history.writes {
            if history.is_stale(write) {
                report.stale_attempted += 1;
                report.stale_accepted += usize::from(write.accepted);
            }
        }
        for event in &self.events {
            // Any tenure that starts after the fault, the victim's own next one included (a
            // paused worker that resumes may be the next to get the lock).
            let next = history.tenures.iter().find(|t| t.at > event.at);
            report
                .recovery
                .push(next.map(|t| Duration::from_nanos(t.at.saturating_sub(event.recover_from))));
            if let (true, Some((label, token))) = (event.must_tell, &event.victim) {
                report.victims += 1;
                let told = history
                    .lost
                    .iter()
                    .any(|(l, t, at)| l == label && t == token && *at > event.at);
                report.told_lost += usize::from(told);
            }
        }
        report
    }
}

impl Drop for World {
    fn drop(&mut self) {
        for w in &mut self.workers {
            signal(&w.child, Signal::SIGCONT);
            let _ = w.child.kill();
            let _ = w.child.wait();
        }
        if std::env::var_os("DLOCK_FAULTS_KEEP").is_some() {
            eprintln!(
                "{}: logs kept in {}",
                self.scenario.name,
                self.dir.display()
            );
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn signal(child: &Child, signal: Signal) {
    let pid = Pid::from_raw(i32::try_from(child.id()).expect("a pid"));
    let _ = kill(pid, signal);
}

/// Waits until the kernel shows process `pid` stopped (state `T` in /proc/PID/stat): a
/// SIGSTOP is delivered when the process is next scheduled, not when kill returns.
fn wait_stopped(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // The state follows the parenthesised command name.
        if stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('T'))
        {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("process {pid} did not stop within 5 s");
}

struct Tenure {
    label: String,
    token: u64,
    at: u64,
}

struct Write {
    label: String,
    token: u64,
    sent: u64,
    accepted: bool,
}

/// Every worker's log, merged.
struct History {
    /// In the order the workers saw their acquisitions.
    tenures: Vec<Tenure>,
    writes: Vec<Write>,
    lost: Vec<(String, u64, u64)>,
    failed_acquires: usize,
}

impl History {
    fn read(dir: &Path) -> Self {
        let mut history = History {
            tenures: Vec::new(),
            writes: Vec::new(),
            lost: Vec::new(),
            failed_acquires: 0,
        };
        let mut logs: BTreeMap<String, String> = BTreeMap::new();
        for entry in std::fs::read_dir(dir).expect("the run's directory") {
            let path = entry.expect("a directory entry").path();
            if path.extension().is_some_and(|e| e == "log") {
                let label = path.file_stem().expect("a name").to_string_lossy().into();
                logs.insert(label, std::fs::read_to_string(&path).expect("a log"));
            }
        }
        for (label, log) in logs {
            for line in log.lines() {
                let f: Vec<&str> = line.split(' ').collect();
                let num = |i: usize| -> u64 {
                    f[i].parse()
                        .unwrap_or_else(|_| panic!("{label}.log: bad line {line:?}"))
                };
                match f[0] {
                    "acq" => history.tenures.push(Tenure {
                        label: label.clone(),
                        token: num(1),
                        at: num(2),
                    }),
                    "write" => history.writes.push(Write {
                        label: label.clone(),
                        token: num(1),
                        sent: num(2),
                        accepted: f[3] == "1",
                    }),
                    "lost" => history.lost.push((label.clone(), num(1), num(2))),
                    "fail" => history.failed_acquires += 1,
                    "rel" | "woke" => {}
                    other => panic!("{label}.log: unknown line kind {other:?}"),
                }
            }
        }
        history.tenures.sort_by_key(|t| t.at);
        history
    }

    /// A write is stale when another worker's tenure began after the writer's own and
    /// before the write was sent: the lock service had moved on.
    fn is_stale(&self, write: &Write) -> bool {
        let own = self
            .tenures
            .iter()
            .rposition(|t| t.label == write.label && t.at <= write.sent)
            .expect("every write follows its tenure's acquisition");
        assert_eq!(
            self.tenures[own].token, write.token,
            "a write under another token"
        );
        self.tenures[own + 1..]
            .iter()
            .take_while(|t| t.at < write.sent)
            .any(|t| t.label != write.label)
    }
}
