//! Exhaustive bounded model checking of the real engines against the reference servers: one
//! Redis (with dlock's layout, and with Redisson's), Redlock over three, the SQL database
//! (PostgreSQL with NOTIFY, MySQL polling) and ZooKeeper (sessions on connections that break,
//! expired by the server).
//!
//! The simulation draws interleavings at random; this explores *every* interleaving of a small
//! configuration, breadth first, up to a depth: two clients, each with a fixed script
//! (acquire, then release), contend for one lock (fair, non-fair), one semaphore or one
//! read-write lock; or they are candidates of an election (acquire, proclaim, release),
//! which client 0 also observes from the start. At every state each of these moves is a
//! choice:
//!
//! - a client's application takes its script's next step;
//! - the server (on Redlock: the node it is for) runs a client's oldest request in flight (a
//!   client's requests and replies keep their order, as on its connection; its wake-ups come
//!   on a connection of their own);
//! - a client receives its oldest reply, or its oldest wake-up;
//! - a client's oldest request or reply is lost (on ZooKeeper, whose TCP loses nothing alone:
//!   its connection breaks), or a client crashes (together at most `faults` times); or, in
//!   the configurations with pauses instead, a holder's process stops and later goes on;
//! - ZooKeeper: the server runs a request sent before the connection broke; the library
//!   connects again (to a new session if the old one expired); the server expires the session
//!   of a disconnected, crashed or stopped client, time moving to the first instant it may
//!   (the server counts none of the library's pings);
//! - time moves on to the earliest timer of any client, which fires (every client whose timer
//!   is due runs it), so time passes while messages are in flight (at most `ticks` times).
//!
//! The server's clock is true time, in ms; clients' clocks are exact too, except in the
//! configurations whose clocks run 0.5% slow and 0.5% fast (SAFETY.md's bound: rates within
//! 1%), where every engine reads its own clock and the checks convert to true time. After every move the checks of the simulation hold (numbers as there):
//! at most one holder (permits: N; read-write: one writer or readers) whose validity has not
//! run out (1, 6, 7); new tenures' fencing tokens strictly grow (2); a running client has been
//! told it lost a hold by the end of its validity (3); one Redis keeps no lock longer than
//! the lease plus the waiter lease (9); a proclaim's term is its hold's token, and the
//! observer reports only values proclaimed under their term, terms never going back (10). A state where a client still has work but no move is
//! possible is a hang. States are deduplicated by a hash of their full contents; a violation
//! prints the shortest path to it.
//!
//! Within those bounds the search is exhaustive: it ends when no new state is left. `just test`
//! runs the configurations of [`models`]; `just model-check` gives every path one more tick,
//! about 1.2 million states each on one Redis (`DLOCK_MC_MORE_TICKS`; `DLOCK_MC_ONLY=MySQL`
//! runs the configurations so named, `DLOCK_MC_LEVELS=1` prints the states per depth,
//! `DLOCK_MC_STATES` caps the search). With
//! the `plants` feature, `DLOCK_PLANT` plants a bug: on Redis `long-hand-off` is caught in 7
//! moves and `lost-late` in 13; `sql-grant-beside-holder` in 6 on PostgreSQL and MySQL,
//! `lost-late` in 13 on PostgreSQL, `redlock-smallest-counter` in 13 on Redlock,
//! `zk-readers-ignore-writers` in 14, `zk-long-validity` in 16, `zk-validity-from-reply` and
//! `lost-late` in 18 on ZooKeeper (a stopped holder whose session expires), `no-drift` and
//! `zk-no-drift` in 16 with skewed clocks, `observer-forgets-term` in 16 on Redis's
//! election; the others need messages that take time, which the simulation has.

use std::cell::{Cell, RefCell};
use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BTreeSet, HashSet, VecDeque};
use std::hash::{Hash, Hasher};
use std::time::Duration;

use dlock_core::redis::reference::Store;
use dlock_core::redis::{LockKeys, RedisOp, Value};
use dlock_core::sql::reference::Store as SqlStore;
use dlock_core::sql::{Dialect, SqlOp, SqlSettings};
use dlock_core::zk::reference::{SessionId, Store as ZkStore};
use dlock_core::{
    Acquire, ClientId, Command, Config, Engine, Event, HoldId, Input, Instant, Kind, Leader,
    Notice, Op, OpId, Output, Protocol, Request, RequestId, Response, TransportError, Wait,
    ZkSettings,
};

const MS: u64 = 1_000_000;
const EPOCH_MS: u64 = 1_764_000_000_000;
const LEASE: Duration = Duration::from_millis(100);
const WAITER_LEASE: Duration = Duration::from_millis(60);
/// ZooKeeper's session timeout: the lease there.
const SESSION_TIMEOUT: Duration = Duration::from_millis(90);

/// What the configuration contends for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Lock {
        fair: bool,
    },
    Semaphore {
        permits: u32,
    },
    /// Client 0 writes, the others read.
    RwLock,
    /// An election (PROTOCOL.md §20): the lock, whose holders proclaim before they release;
    /// client 0 observes it from the start.
    Election,
}

/// Where the lock lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    /// One Redis server (the reference store).
    Redis,
    /// One Redis server, locks laid out as Redisson's (`Protocol::Redisson`): waiters hear
    /// the lock's channel, which both subscribe to, or look again at the holder's TTL.
    Redisson,
    /// Redlock over this many Redis servers, each a reference store.
    Redlock(u32),
    /// A SQL database (the reference tables): PostgreSQL wakes waiters by NOTIFY, MySQL's
    /// waiters look again every poll interval.
    Sql(Dialect),
    /// One ZooKeeper server (the reference tree): each client has a session on a connection
    /// that may break; the server expires a session it has not heard from for the timeout.
    ZooKeeper,
}

/// The server side of a state.
#[derive(Debug, Clone)]
enum Server {
    Redis(Store),
    Redlock(Vec<Store>),
    Sql(SqlStore),
    ZooKeeper(ZkStore),
}

/// A client's ZooKeeper session and connection.
#[derive(Debug, Clone)]
struct ZkConn {
    session: SessionId,
    connected: bool,
    /// When the server last heard from the session (ns): it counts none of the library's
    /// pings, so expiry comes as early as the engine's own requests allow.
    heard: u64,
    /// Requests sent on a connection that broke: the server may still run them (their replies
    /// go nowhere) until the client connects again.
    orphans: VecDeque<Request>,
    /// A break the paused process has not noticed yet: the requests it must fail.
    untold: Option<Vec<RequestId>>,
}

/// A client's view of its hold: the fencing token, and until when it is valid.
#[derive(Debug, Clone, Hash)]
struct Hold {
    id: HoldId,
    token: u64,
    valid_until: u64,
    kind: Kind,
}

/// A client's engine (none once its process crashed), and the hash of its `Debug` text, which
/// the state's fingerprint uses: kept until the engine is next borrowed mutably, since most
/// moves leave most engines as they were.
#[derive(Clone)]
struct Live {
    engine: Option<Engine>,
    hash: Cell<Option<u64>>,
}

impl Live {
    fn new(engine: Engine) -> Self {
        Live {
            engine: Some(engine),
            hash: Cell::new(None),
        }
    }

    fn crash(&mut self) {
        *self = Live {
            engine: None,
            hash: Cell::new(None),
        };
    }

    fn is_some(&self) -> bool {
        self.engine.is_some()
    }

    fn is_none(&self) -> bool {
        self.engine.is_none()
    }

    fn as_ref(&self) -> Option<&Engine> {
        self.engine.as_ref()
    }

    fn as_mut(&mut self) -> Option<&mut Engine> {
        self.hash.set(None);
        self.engine.as_mut()
    }

    fn hash(&self) -> u64 {
        if let Some(hash) = self.hash.get() {
            return hash;
        }
        thread_local!(static TEXT: RefCell<String> = const { RefCell::new(String::new()) });
        let hash = TEXT.with_borrow_mut(|text| hash_debug(text, &self.engine));
        self.hash.set(Some(hash));
        hash
    }
}

/// Shows the engine's hash: what the state's fingerprint needs of it.
impl std::fmt::Debug for Live {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:016x}", self.hash())
    }
}

/// The hash of `value`'s `Debug` text, written into `text` (a buffer reused from call to call).
fn hash_debug(text: &mut String, value: &dyn std::fmt::Debug) -> u64 {
    use std::fmt::Write;
    text.clear();
    write!(text, "{value:?}").expect("a String takes any text");
    let mut h = DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}

#[derive(Debug, Clone)]
struct Proc {
    engine: Live,
    /// In flight on its connection, oldest first: requests, replies, wake-ups.
    requests: VecDeque<Request>,
    replies: VecDeque<Input>,
    wake_ups: VecDeque<Input>,
    /// Acquires still to make; each is released once granted (in an election, once its
    /// value is proclaimed).
    acquires: u32,
    held: Option<Hold>,
    acquiring: bool,
    releasing: bool,
    proclaiming: bool,
    /// The hold's value was proclaimed.
    proclaimed: bool,
    /// The last leader this client's observer reported.
    seen: Option<Leader>,
    next_op: u64,
    zk: Option<ZkConn>,
    /// The process is stopped (a GC pause, a stopped VM): it reads nothing, its timers wait,
    /// and on ZooKeeper its library's pings stop too.
    paused: bool,
}

#[derive(Debug, Clone)]
struct State {
    now: u64,
    server: Server,
    procs: Vec<Proc>,
    subscribers: BTreeMap<String, BTreeSet<usize>>,
    /// The largest fencing token any client learned of a new tenure.
    last_token: u64,
    /// Every (term, value) a client asked to proclaim.
    proclaimed: BTreeSet<(u64, String)>,
    faults: u32,
    ticks: u32,
}

#[derive(Debug, Clone, Copy)]
enum Move {
    App(usize),
    Serve(usize),
    Reply(usize),
    WakeUp(usize),
    LoseRequest(usize),
    LoseReply(usize),
    Crash(usize),
    Tick,
    /// ZooKeeper: the server runs a request sent before the connection broke.
    ServeOrphan(usize),
    /// ZooKeeper: the connection breaks (a fault).
    Break(usize),
    /// ZooKeeper: the library connects again, to its session if the server still has it.
    Reconnect(usize),
    /// ZooKeeper: time moves to the first instant the server may expire a silent session
    /// (of a disconnected, crashed or paused client), and it does.
    Expire(usize),
    /// ZooKeeper: the client's process stops (a fault).
    Pause(usize),
    /// The paused process goes on; its timers that came due fire.
    Resume(usize),
}

struct Model {
    backend: Backend,
    target: Target,
    clients: usize,
    /// How many losses and crashes a path may have.
    faults: u32,
    /// The faults are pauses of a holder's process instead (ZooKeeper: its session may
    /// expire while it is stopped).
    pauses: bool,
    /// How many times time may move on along a path.
    ticks: u32,
    /// How fast each client's clock runs against true time (the server's), in parts per
    /// million: up to the ±0.5% each that SAFETY.md assumes.
    skew_ppm: [i64; 2],
}

impl Model {
    fn name(&self) -> String {
        let target = match self.target {
            Target::Lock { fair: true } => "lock",
            Target::Lock { fair: false } => "non-fair lock",
            Target::Semaphore { .. } => "semaphore",
            Target::RwLock => "read-write lock",
            Target::Election => "election",
        };
        let backend = match self.backend {
            Backend::Redis => "Redis".to_owned(),
            Backend::Redisson => "Redisson-compatible Redis".to_owned(),
            Backend::Redlock(nodes) => format!("Redlock of {nodes}"),
            Backend::Sql(Dialect::Postgres) => "PostgreSQL".to_owned(),
            Backend::Sql(Dialect::Mysql) => "MySQL".to_owned(),
            Backend::ZooKeeper => "ZooKeeper".to_owned(),
        };
        let skew = match self.skew_ppm {
            [0, 0] => String::new(),
            [a, b] => format!(
                ", clocks {:+.1}% and {:+.1}%",
                a as f64 / 1e4,
                b as f64 / 1e4
            ),
        };
        format!("{target} on {backend}{skew}")
    }

    fn kind(&self, client: usize) -> Kind {
        match self.target {
            Target::Lock { .. } | Target::Election => Kind::Mutex,
            Target::Semaphore { permits } => Kind::Semaphore { permits },
            Target::RwLock if client == 0 => Kind::Write,
            Target::RwLock => Kind::Read,
        }
    }

    fn start(&self) -> State {
        let server = match self.backend {
            Backend::Redis | Backend::Redisson => Server::Redis(Store::new()),
            Backend::Redlock(nodes) => Server::Redlock(vec![Store::new(); nodes as usize]),
            Backend::Sql(dialect) => Server::Sql(SqlStore::new(&SqlSettings::new(dialect))),
            Backend::ZooKeeper => Server::ZooKeeper(ZkStore::new()),
        };
        let mut s = State {
            now: 0,
            server,
            procs: Vec::new(),
            subscribers: BTreeMap::new(),
            last_token: 0,
            proclaimed: BTreeSet::new(),
            faults: 0,
            ticks: 0,
        };
        for c in 0..self.clients {
            let mut config = Config::new(ClientId(0xc0 + c as u128));
            config.waiter_lease = WAITER_LEASE;
            config.request_timeout = Duration::from_millis(40);
            config.protocol = match self.backend {
                Backend::Redis => Protocol::Redis,
                Backend::Redisson => Protocol::Redisson,
                Backend::Redlock(nodes) => Protocol::Redlock { nodes },
                Backend::Sql(dialect) => {
                    let mut settings = SqlSettings::new(dialect);
                    settings.poll_interval = Duration::from_millis(30);
                    Protocol::Sql(settings)
                }
                Backend::ZooKeeper => Protocol::ZooKeeper(ZkSettings::new(SESSION_TIMEOUT)),
            };
            let zk = match &mut s.server {
                Server::ZooKeeper(store) => Some(ZkConn {
                    session: store.open_session(),
                    connected: true,
                    heard: 0,
                    orphans: VecDeque::new(),
                    untold: None,
                }),
                _ => None,
            };
            let engine = Engine::new(config, Instant::from_nanos(0)).expect("config");
            s.procs.push(Proc {
                engine: Live::new(engine),
                requests: VecDeque::new(),
                replies: VecDeque::new(),
                wake_ups: VecDeque::new(),
                acquires: 1,
                held: None,
                acquiring: false,
                releasing: false,
                proclaiming: false,
                proclaimed: false,
                seen: None,
                next_op: 1,
                zk,
                paused: false,
            });
        }
        // Each client subscribes to its wake-up channel first (on every node; MySQL has none),
        // and an election's observer subscribes to its channel and reads: served and answered
        // before the search starts, so that it explores the contention rather than the
        // start-up.
        for c in 0..self.clients {
            let zk = s.procs[c].zk.is_some();
            let engine = s.procs[c].engine.as_mut().expect("live");
            if zk {
                engine.handle_input(Instant::from_nanos(0), Input::Notice(Notice::Connected));
            }
            if self.target == Target::Election && c == 0 {
                let observe = Command::Observe {
                    op: OpId(0),
                    name: "m".into(),
                };
                engine.handle_input(Instant::from_nanos(0), Input::Command(observe));
            }
            self.pump(&mut s, c).expect("a fresh engine breaks nothing");
            while !s.procs[c].requests.is_empty() {
                s = self.apply(&s, Move::Serve(c)).expect("subscribed");
                s = self.apply(&s, Move::Reply(c)).expect("subscribed");
            }
        }
        s
    }

    /// Every move possible in `s`.
    fn moves(&self, s: &State) -> Vec<Move> {
        let mut moves = Vec::new();
        for (c, p) in s.procs.iter().enumerate() {
            let idle =
                p.engine.is_some() && !p.paused && !p.acquiring && !p.releasing && !p.proclaiming;
            if idle && (p.held.is_some() || p.acquires > 0) {
                moves.push(Move::App(c));
            }
        }
        let with = |f: fn(&Proc) -> bool, m: fn(usize) -> Move| {
            s.procs
                .iter()
                .enumerate()
                .filter(move |(_, p)| f(p))
                .map(move |(c, _)| m(c))
        };
        moves.extend(with(|p| !p.requests.is_empty(), Move::Serve));
        moves.extend(with(|p| !p.paused && !p.replies.is_empty(), Move::Reply));
        moves.extend(with(|p| !p.paused && !p.wake_ups.is_empty(), Move::WakeUp));
        moves.extend(with(|p| p.paused, Move::Resume));
        moves.extend(with(
            |p| p.zk.as_ref().is_some_and(|z| !z.orphans.is_empty()),
            Move::ServeOrphan,
        ));
        moves.extend(with(
            |p| p.engine.is_some() && !p.paused && p.zk.as_ref().is_some_and(|z| !z.connected),
            Move::Reconnect,
        ));
        for (c, p) in s.procs.iter().enumerate() {
            if let (Some(z), Server::ZooKeeper(store)) = (&p.zk, &s.server) {
                let silent = !z.connected || p.engine.is_none() || p.paused;
                let at = z.heard + SESSION_TIMEOUT.as_nanos() as u64;
                let before_timers = self.timer(s).is_none_or(|t| at.max(s.now) <= t);
                if silent && store.is_live(z.session) && before_timers {
                    moves.push(Move::Expire(c));
                }
            }
        }
        if s.faults < self.faults && self.pauses {
            moves.extend(with(|p| p.held.is_some() && !p.paused, Move::Pause));
        } else if s.faults < self.faults {
            // On ZooKeeper (TCP) a message is not lost alone: the connection breaks.
            if self.backend == Backend::ZooKeeper {
                moves.extend(with(
                    |p| {
                        p.engine.is_some()
                            && !p.paused
                            && p.zk.as_ref().is_some_and(|z| z.connected)
                    },
                    Move::Break,
                ));
            } else {
                moves.extend(with(|p| !p.requests.is_empty(), Move::LoseRequest));
                moves.extend(with(|p| !p.replies.is_empty(), Move::LoseReply));
            }
            // A holder or a queued waiter dies (the others' liveness is what it tests).
            for (c, p) in s.procs.iter().enumerate() {
                if p.engine.is_some() && (p.held.is_some() || p.acquiring) {
                    moves.push(Move::Crash(c));
                }
            }
        }
        if s.ticks < self.ticks && self.timer(s).is_some() {
            moves.push(Move::Tick);
        }
        moves
    }

    /// When (true time, ns) the earliest timer of any running client comes due.
    fn timer(&self, s: &State) -> Option<u64> {
        s.procs
            .iter()
            .enumerate()
            .filter(|(_, p)| !p.paused)
            .filter_map(|(c, p)| Some(self.true_time(c, p.engine.as_ref()?.poll_timeout()?)))
            .min()
    }

    /// Client `c`'s clock at true time `t` (ns).
    fn local(&self, c: usize, t: u64) -> Instant {
        Instant::from_nanos((u128::from(t) * self.rate(c) / 1_000_000) as u64)
    }

    /// Client `c`'s clock rate, in millionths of true time's.
    fn rate(&self, c: usize) -> u128 {
        (1_000_000 + self.skew_ppm[c]) as u128
    }

    /// The true time (ns) at which client `c`'s clock reads `at`: the first instant it does.
    fn true_time(&self, c: usize, at: Instant) -> u64 {
        (u128::from(at.as_nanos()) * 1_000_000).div_ceil(self.rate(c)) as u64
    }

    fn describe(&self, s: &State, m: Move) -> String {
        match m {
            Move::App(c) => match &s.procs[c].held {
                Some(h) if self.proclaims(&s.procs[c]) => {
                    format!("c{c} proclaims (term {})", h.token)
                }
                Some(h) => format!("c{c} releases {:?} (token {})", h.kind, h.token),
                None => format!("c{c} acquires ({:?})", self.kind(c)),
            },
            Move::Serve(c) => format!("server runs c{c}'s {}", op(&s.procs[c].requests[0].op)),
            Move::Reply(c) => format!("c{c} receives {:?}", s.procs[c].replies[0]),
            Move::WakeUp(c) => format!("c{c} receives {:?}", s.procs[c].wake_ups[0]),
            Move::LoseRequest(c) => format!("c{c}'s {} is lost", op(&s.procs[c].requests[0].op)),
            Move::LoseReply(c) => format!("c{c}'s {:?} is lost", s.procs[c].replies[0]),
            Move::Crash(c) => format!("c{c} crashes"),
            Move::Tick => {
                let at = self.timer(s).unwrap_or(0);
                format!("time moves to {:.3} s", at.max(s.now) as f64 / 1e9)
            }
            Move::ServeOrphan(c) => format!(
                "server runs c{c}'s {} from the broken connection",
                op(&s.procs[c].zk.as_ref().expect("zk").orphans[0].op)
            ),
            Move::Break(c) => format!("c{c}'s connection breaks"),
            Move::Reconnect(c) => format!("c{c} connects again"),
            Move::Expire(c) => format!("the server expires c{c}'s session"),
            Move::Pause(c) => format!("c{c}'s process stops"),
            Move::Resume(c) => format!("c{c}'s process goes on"),
        }
    }

    /// The state after `m`, or the violation it leads to.
    fn apply(&self, s: &State, m: Move) -> Result<State, String> {
        let mut s = s.clone();
        match m {
            Move::App(c) => {
                let p = &mut s.procs[c];
                let op = OpId(p.next_op);
                p.next_op += 1;
                let proclaims = self.proclaims(p);
                // The application stops relying on a hold as it releases it.
                let cmd = match p.held.take() {
                    Some(h) if proclaims => {
                        let value = format!("c{c}:{}", h.token);
                        s.proclaimed.insert((h.token, value.clone()));
                        p.proclaiming = true;
                        let hold = h.id;
                        p.held = Some(h);
                        Command::Proclaim { op, hold, value }
                    }
                    Some(h) => {
                        p.releasing = true;
                        Command::Release { op, hold: h.id }
                    }
                    None => {
                        p.acquires -= 1;
                        p.acquiring = true;
                        Command::Acquire(Acquire {
                            op,
                            name: "m".into(),
                            owner: 1,
                            lease: LEASE,
                            wait: Wait::Forever,
                            max_hold: None,
                            fair: !matches!(self.target, Target::Lock { fair: false }),
                            kind: self.kind(c),
                        })
                    }
                };
                let now = self.local(c, s.now);
                let engine = p.engine.as_mut().expect("live");
                engine.handle_input(now, Input::Command(cmd));
                self.pump(&mut s, c)?;
            }
            Move::Serve(c) => {
                let request = s.procs[c].requests.pop_front().expect("a request");
                let response = self.serve(&mut s, c, request.op)?;
                let input = Input::Reply {
                    id: request.id,
                    reply: Ok(response),
                };
                s.procs[c].replies.push_back(input);
            }
            Move::Reply(c) | Move::WakeUp(c) => {
                let p = &mut s.procs[c];
                let input = match m {
                    Move::Reply(_) => p.replies.pop_front(),
                    _ => p.wake_ups.pop_front(),
                }
                .expect("an input");
                let now = self.local(c, s.now);
                if let Some(engine) = s.procs[c].engine.as_mut() {
                    engine.handle_input(now, input);
                    self.pump(&mut s, c)?;
                }
            }
            Move::LoseRequest(c) => {
                s.procs[c].requests.pop_front();
                s.faults += 1;
            }
            Move::LoseReply(c) => {
                s.procs[c].replies.pop_front();
                s.faults += 1;
            }
            Move::Crash(c) => {
                let p = &mut s.procs[c];
                p.engine.crash();
                if let Some(zk) = p.zk.as_mut() {
                    zk.connected = false;
                }
                p.replies.clear();
                p.wake_ups.clear();
                p.held = None;
                p.acquiring = false;
                p.releasing = false;
                p.proclaiming = false;
                s.faults += 1;
            }
            Move::ServeOrphan(c) => {
                let zk = s.procs[c].zk.as_mut().expect("zk");
                let request = zk.orphans.pop_front().expect("an orphan");
                self.serve(&mut s, c, request.op)?; // its reply goes nowhere
            }
            Move::Break(c) => {
                s.faults += 1;
                self.break_connection(&mut s, c)?;
            }
            Move::Reconnect(c) => {
                let Server::ZooKeeper(store) = &mut s.server else {
                    unreachable!("ZooKeeper only")
                };
                let zk = s.procs[c].zk.as_mut().expect("zk");
                zk.orphans.clear();
                zk.connected = true;
                zk.heard = s.now;
                let expired = !store.is_live(zk.session);
                if expired {
                    zk.session = store.open_session();
                }
                let now = self.local(c, s.now);
                let engine = s.procs[c].engine.as_mut().expect("live");
                if expired {
                    engine.handle_input(now, Input::Notice(Notice::SessionExpired));
                }
                engine.handle_input(now, Input::Notice(Notice::Connected));
                self.pump(&mut s, c)?;
            }
            Move::Expire(c) => {
                let heard = s.procs[c].zk.as_ref().expect("zk").heard;
                s.now = s.now.max(heard + SESSION_TIMEOUT.as_nanos() as u64);
                // The server closes the session's connection: what was sent on it is gone.
                if s.procs[c].zk.as_ref().is_some_and(|z| z.connected)
                    && s.procs[c].engine.is_some()
                {
                    self.break_connection(&mut s, c)?;
                }
                if s.procs[c].engine.is_none() {
                    s.procs[c].requests.clear(); // a crashed process's, on the closed connection
                }
                let zk = s.procs[c].zk.as_mut().expect("zk");
                zk.orphans.clear();
                let Server::ZooKeeper(store) = &mut s.server else {
                    unreachable!("ZooKeeper only")
                };
                let fired = store.expire(zk.session);
                Self::fire(&mut s, fired);
            }
            Move::Pause(c) => {
                s.faults += 1;
                s.procs[c].paused = true;
            }
            Move::Resume(c) => {
                s.procs[c].paused = false;
                if let Some(ids) = s.procs[c].zk.as_mut().and_then(|z| z.untold.take()) {
                    self.tell_break(&mut s, c, ids)?;
                }
                let now = self.local(c, s.now);
                if let Some(engine) = s.procs[c].engine.as_mut()
                    && engine.poll_timeout().is_some_and(|t| t <= now)
                {
                    engine.handle_timeout(now);
                    self.pump(&mut s, c)?;
                }
            }
            Move::Tick => {
                let at = self.timer(&s).expect("a timer");
                s.ticks += 1;
                s.now = s.now.max(at);
                for c in 0..s.procs.len() {
                    if s.procs[c].paused {
                        continue; // its timers wait until it goes on
                    }
                    let now = self.local(c, s.now);
                    let Some(engine) = s.procs[c].engine.as_mut() else {
                        continue;
                    };
                    if engine.poll_timeout().is_some_and(|t| t <= now) {
                        engine.handle_timeout(now);
                        self.pump(&mut s, c)?;
                    }
                }
            }
        }
        self.check(&s)?;
        Ok(s)
    }

    /// ZooKeeper: client `c`'s connection breaks. What it sent may still reach the server;
    /// what was coming to it is gone; its library tells it (once it runs).
    fn break_connection(&self, s: &mut State, c: usize) -> Result<(), String> {
        let p = &mut s.procs[c];
        let zk = p.zk.as_mut().expect("zk");
        zk.connected = false;
        zk.orphans = std::mem::take(&mut p.requests);
        let mut unanswered: Vec<RequestId> = zk.orphans.iter().map(|r| r.id).collect();
        for input in std::mem::take(&mut p.replies) {
            if let Input::Reply { id, .. } = input {
                unanswered.push(id);
            }
        }
        if p.paused {
            zk.untold = Some(unanswered);
            return Ok(());
        }
        self.tell_break(s, c, unanswered)
    }

    /// The library tells its engine the connection broke and fails what is unanswered.
    fn tell_break(
        &self,
        s: &mut State,
        c: usize,
        unanswered: Vec<RequestId>,
    ) -> Result<(), String> {
        let now = self.local(c, s.now);
        let engine = s.procs[c].engine.as_mut().expect("live");
        engine.handle_input(now, Input::Notice(Notice::Disconnected));
        for id in unanswered {
            let reply = Err(TransportError::Unavailable("connection loss".into()));
            engine.handle_input(now, Input::Reply { id, reply });
        }
        self.pump(s, c)
    }

    /// Runs client `c`'s request on the server at the true time: its reply, and its messages
    /// on the way to their subscribers.
    fn serve(&self, s: &mut State, c: usize, op: Op) -> Result<Response, String> {
        let now_ms = EPOCH_MS + s.now / MS;
        let (store, op) = match (&mut s.server, op) {
            (Server::Redis(store), Op::Redis(op)) => (store, op),
            (Server::Redlock(nodes), Op::Redlock { node, op }) => (&mut nodes[node as usize], op),
            (Server::Sql(_), Op::Sql(SqlOp::Listen { channel })) => {
                s.subscribers.entry(channel).or_default().insert(c);
                return Ok(Response::Sql(Vec::new()));
            }
            (Server::Sql(store), Op::Sql(query)) => {
                let outcome = store
                    .exec(now_ms * 1000, &query)
                    .map_err(|e| format!("statement failed: {e}"))?;
                Self::publish(s, outcome.notified);
                return Ok(Response::Sql(outcome.values));
            }
            (Server::ZooKeeper(store), Op::Zk(op)) => {
                let zk = s.procs[c].zk.as_mut().expect("zk");
                let outcome = store
                    .execute(zk.session, &op)
                    .map_err(|e| format!("c{c}'s session is {e:?}, yet it was served"))?;
                zk.heard = s.now;
                Self::fire(s, outcome.fired);
                return Ok(Response::Zk(outcome.reply));
            }
            (server, other) => return Err(format!("{server:?} got {other:?}")),
        };
        let reply = match op {
            RedisOp::Subscribe { channel } => {
                s.subscribers.entry(channel).or_default().insert(c);
                Value::Status("OK".into())
            }
            RedisOp::Eval { script, keys, args } => {
                let outcome = store
                    .eval(now_ms, script, &keys, &args)
                    .map_err(|e| format!("script {} failed: {e}", script.name()))?;
                let published = outcome.published;
                if matches!(self.backend, Backend::Redis | Backend::Redisson) {
                    self.check_ttl(s, now_ms)?;
                }
                Self::publish(s, published);
                outcome.reply
            }
        };
        Ok(Response::Redis(reply))
    }

    /// Fired watches go to their sessions' clients, in order with the replies on the
    /// connection (none while it is broken).
    fn fire(s: &mut State, fired: Vec<(SessionId, String)>) {
        for (session, path) in fired {
            let to = s.procs.iter_mut().find(|p| {
                p.engine.is_some()
                    && p.zk
                        .as_ref()
                        .is_some_and(|z| z.session == session && z.connected)
            });
            if let Some(p) = to {
                p.replies.push_back(Input::Notice(Notice::Watch { path }));
            }
        }
    }

    /// Messages go to whoever subscribed to their channel, as wake-ups.
    fn publish(s: &mut State, messages: Vec<(String, Vec<u8>)>) {
        for (channel, payload) in messages {
            for &to in s.subscribers.get(&channel).into_iter().flatten() {
                let (channel, payload) = (channel.clone(), payload.clone());
                let input = Input::Notice(Notice::Message { channel, payload });
                s.procs[to].wake_ups.push_back(input);
            }
        }
    }

    /// Drains client `c`'s engine: requests go in flight, events reach its application.
    fn pump(&self, s: &mut State, c: usize) -> Result<(), String> {
        while let Some(out) = s.procs[c].engine.as_mut().and_then(Engine::poll_output) {
            match out {
                Output::Request(r) if s.procs[c].zk.as_ref().is_some_and(|z| !z.connected) => {
                    // The library fails a request while it has no connection.
                    let reply = Err(TransportError::Unavailable("connection loss".into()));
                    let input = Input::Reply { id: r.id, reply };
                    let now = self.local(c, s.now);
                    let engine = s.procs[c].engine.as_mut().expect("live");
                    engine.handle_input(now, input);
                }
                Output::Request(r) => s.procs[c].requests.push_back(r),
                Output::Event(e) => self.event(s, c, e)?,
            }
        }
        Ok(())
    }

    fn event(&self, s: &mut State, c: usize, e: Event) -> Result<(), String> {
        let p = &mut s.procs[c];
        match e {
            Event::Acquired {
                hold,
                fencing_token,
                valid_until,
                count,
                ..
            } => {
                p.acquiring = false;
                if count != 1 || p.held.is_some() {
                    return Err(format!(
                        "c{c}: a new tenure with count {count} beside {:?}",
                        p.held
                    ));
                }
                p.proclaimed = false;
                // Check 2: tokens grow (a semaphore's permits and readers overlap: new ones).
                let grows = match self.target {
                    Target::Lock { .. } | Target::Election => fencing_token > s.last_token,
                    _ => fencing_token != s.last_token,
                };
                if !grows {
                    return Err(format!(
                        "c{c}: new tenure got token {fencing_token} after {}",
                        s.last_token
                    ));
                }
                s.last_token = s.last_token.max(fencing_token);
                p.held = Some(Hold {
                    id: hold,
                    token: fencing_token,
                    valid_until: self.true_time(c, valid_until),
                    kind: self.kind(c),
                });
            }
            // Check 10: a proclaim's term is its hold's token; an observer reports only what
            // was proclaimed under that term, and terms that never go back.
            Event::Proclaimed { hold, term, .. } if p.proclaiming => {
                p.proclaiming = false;
                p.proclaimed = true;
                match &p.held {
                    Some(h) if h.id == hold && h.token == term => {}
                    other => return Err(format!("c{c}: proclaimed term {term} holding {other:?}")),
                }
            }
            Event::Failed { .. } if p.proclaiming => p.proclaiming = false,
            Event::Leader { leader, .. } => {
                if let Some(l) = &leader {
                    if !s.proclaimed.contains(&(l.term, l.value.clone())) {
                        return Err(format!("c{c} observed {l:?}, which was never proclaimed"));
                    }
                    if let Some(last) = &p.seen
                        && !(l.term > last.term || (l.term == last.term && l.value != last.value))
                    {
                        return Err(format!("c{c} observed {l:?} after {last:?}"));
                    }
                    p.seen = Some(l.clone());
                }
            }
            Event::NotAcquired { .. } if p.acquiring => p.acquiring = false,
            Event::Failed { .. } if p.acquiring => p.acquiring = false,
            Event::Released { .. } | Event::Failed { .. } if p.releasing => p.releasing = false,
            Event::Renewed { hold, valid_until }
            | Event::Extended {
                hold, valid_until, ..
            } => {
                if let Some(h) = p.held.as_mut().filter(|h| h.id == hold) {
                    h.valid_until = h.valid_until.max(self.true_time(c, valid_until));
                }
            }
            Event::Lost { hold, .. } => {
                if p.held.as_ref().is_some_and(|h| h.id == hold) {
                    p.held = None;
                } else if !p.releasing {
                    return Err(format!("c{c} lost {hold:?}, which it does not hold"));
                }
            }
            other => return Err(format!("c{c}: unexpected {other:?}")),
        }
        Ok(())
    }

    /// Checks 1, 3, 6 and 7.
    fn check(&self, s: &State) -> Result<(), String> {
        let mut valid = Vec::new();
        for (c, p) in s.procs.iter().enumerate() {
            let (true, Some(h)) = (p.engine.is_some(), &p.held) else {
                continue;
            };
            // Check 3 is for a running process; a paused one hears first thing on resuming.
            if h.valid_until < s.now && !p.paused {
                return Err(format!(
                    "c{c} still holds token {} {} ms after its validity ran out: not told it lost",
                    h.token,
                    (s.now - h.valid_until) / MS
                ));
            }
            if h.valid_until > s.now {
                valid.push((c, h.kind, h.token));
            }
        }
        let writers = valid.iter().filter(|v| v.1 == Kind::Write).count();
        let too_many = match self.target {
            Target::Lock { .. } | Target::Election => valid.len() > 1,
            Target::Semaphore { permits } => valid.len() > permits as usize,
            Target::RwLock => writers > 1 || (writers == 1 && valid.len() > 1),
        };
        if too_many {
            return Err(format!("valid at once (client, kind, token): {valid:?}"));
        }
        Ok(())
    }

    /// Check 9 (one Redis): the server keeps a lock no longer than the lease or the waiter
    /// lease.
    fn check_ttl(&self, s: &mut State, now_ms: u64) -> Result<(), String> {
        let (Target::Lock { .. } | Target::Election, Server::Redis(store)) =
            (self.target, &mut s.server)
        else {
            return Ok(());
        };
        let key = match self.backend {
            Backend::Redisson => dlock_core::redisson::Keys::new("m").lock,
            _ => LockKeys::new("m").lock().to_owned(),
        };
        let ttl = store.pttl_at(now_ms, &key);
        let longest = LEASE.max(WAITER_LEASE).as_millis() as i64;
        if ttl == -1 || ttl > longest {
            return Err(format!(
                "the server keeps the lock for {ttl} ms, longer than any lease"
            ));
        }
        Ok(())
    }

    /// The application's next step with its hold is to proclaim (an election's, once).
    fn proclaims(&self, p: &Proc) -> bool {
        self.target == Target::Election && !p.proclaimed
    }

    /// Whether a client still has work to do (a hang if no move is left).
    fn busy(s: &State) -> bool {
        s.procs.iter().any(|p| {
            p.engine.is_some()
                && (p.acquiring
                    || p.releasing
                    || p.proclaiming
                    || p.held.is_some()
                    || p.acquires > 0)
        })
    }

    /// The hash of the state's contents; engines count by their own hashes ([`Live`]).
    fn fingerprint(s: &State) -> u64 {
        thread_local!(static TEXT: RefCell<String> = const { RefCell::new(String::new()) });
        let mut h = DefaultHasher::new();
        (s.now, s.last_token, s.faults, s.ticks, &s.proclaimed).hash(&mut h);
        TEXT.with_borrow_mut(|text| hash_debug(text, &(&s.procs, &s.server, &s.subscribers)))
            .hash(&mut h);
        h.finish()
    }

    /// Breadth-first search to `depth` moves or `limit` states: the number of states and the
    /// deepest level reached, or the shortest path to a violation.
    fn explore(&self, depth: usize, limit: usize) -> Result<(usize, usize), String> {
        let start = self.start();
        let mut seen = HashSet::from([Self::fingerprint(&start)]);
        // Parent pointers: each explored state's (parent, move) for printing a path.
        let mut path: Vec<(usize, String)> = vec![(usize::MAX, "start".into())];
        let mut queue = VecDeque::from([(start, 0usize, 0usize)]);
        let mut deepest = 0;
        let trace = |path: &Vec<(usize, String)>, mut at: usize, last: String| {
            let mut lines = vec![last];
            while at != usize::MAX && at != 0 {
                lines.push(path[at].1.clone());
                at = path[at].0;
            }
            lines.reverse();
            lines
                .iter()
                .enumerate()
                .map(|(i, l)| format!("  {:>2}. {l}", i + 1))
                .collect::<Vec<_>>()
                .join("\n")
        };
        let mut per_level = vec![0usize; depth + 1];
        while let Some((s, node, level)) = queue.pop_front() {
            per_level[level] += 1;
            if std::env::var_os("DLOCK_MC_LEVELS").is_some() && level > deepest {
                eprintln!("level {deepest}: {} states", per_level[deepest]);
            }
            deepest = deepest.max(level);
            let moves = self.moves(&s);
            // A client with work left, no move, and no timer that could ever move it: a hang.
            if moves.is_empty() && Self::busy(&s) && self.timer(&s).is_none() {
                let steps = trace(&path, node, "(no move is possible)".into());
                return Err(format!("{}: a client hangs\n{steps}", self.name()));
            }
            if level == depth {
                continue;
            }
            for m in moves {
                // A move is described only for a path that may be printed: to a new state or
                // to a violation.
                match self.apply(&s, m) {
                    Ok(next) => {
                        if seen.len() >= limit || !seen.insert(Self::fingerprint(&next)) {
                            continue;
                        }
                        path.push((node, self.describe(&s, m)));
                        queue.push_back((next, path.len() - 1, level + 1));
                    }
                    Err(violation) => {
                        let steps = trace(&path, node, self.describe(&s, m));
                        return Err(format!(
                            "{}: {violation}\nshortest path ({} moves):\n{steps}",
                            self.name(),
                            level + 1
                        ));
                    }
                }
            }
        }
        Ok((seen.len(), deepest))
    }
}

fn op(op: &Op) -> String {
    match op {
        Op::Redis(RedisOp::Eval { script, .. }) => script.name().to_uppercase(),
        Op::Redis(RedisOp::Subscribe { .. }) => "SUBSCRIBE".into(),
        Op::Redlock { node, op } => format!("{} on node {node}", self::op(&Op::Redis(op.clone()))),
        Op::Sql(op) => format!("{op:?}"),
        Op::Zk(op) => format!("{op:?}"),
    }
}

fn env(name: &str) -> Option<usize> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// The configurations checked: where the lock lives, what two clients contend for, how many
/// faults and how many times time may move on along a path.
///
/// Three clients do not fit: a semaphore of 2 permits or a read-write lock with three clients,
/// one fault and 2 ticks passed 5 million states, 19 to 23 moves deep, in 5 to 6 minutes
/// without a violation but without finishing.
fn models() -> Vec<Model> {
    let model = |backend, target, faults, ticks| Model {
        backend,
        target,
        clients: 2,
        faults,
        pauses: false,
        ticks,
        skew_ppm: [0, 0],
    };
    let paused = |backend, target, ticks| Model {
        pauses: true,
        ..model(backend, target, 1, ticks)
    };
    // Client 0's clock 0.5% slow, client 1's 0.5% fast (who holds first is a choice).
    let skewed = |model: Model| Model {
        skew_ppm: [-5_000, 5_000],
        ..model
    };
    let (redis, postgres, mysql) = (
        Backend::Redis,
        Backend::Sql(Dialect::Postgres),
        Backend::Sql(Dialect::Mysql),
    );
    let (lock, non_fair) = (Target::Lock { fair: true }, Target::Lock { fair: false });
    let (semaphore, rw) = (Target::Semaphore { permits: 1 }, Target::RwLock);
    let election = Target::Election;
    vec![
        model(redis, lock, 1, 3),
        model(redis, non_fair, 1, 3),
        model(redis, semaphore, 1, 3),
        model(redis, rw, 1, 3),
        model(postgres, lock, 1, 3),
        model(postgres, non_fair, 1, 3),
        model(postgres, semaphore, 1, 3),
        model(postgres, rw, 1, 3),
        model(mysql, lock, 1, 3),
        // Redlock's three servers multiply the interleavings: one fault and no timer, or a
        // timer and no fault (one fault and one timer passed 1.5 million states unfinished).
        model(Backend::Redlock(3), lock, 1, 0),
        model(Backend::Redlock(3), lock, 0, 1),
        model(Backend::ZooKeeper, lock, 1, 1),
        model(Backend::ZooKeeper, semaphore, 1, 1),
        model(Backend::ZooKeeper, rw, 1, 1),
        paused(Backend::ZooKeeper, lock, 2),
        paused(redis, lock, 3),
        paused(postgres, lock, 3),
        skewed(model(redis, lock, 1, 3)),
        skewed(paused(redis, lock, 3)),
        skewed(paused(Backend::ZooKeeper, lock, 2)),
        model(Backend::Redisson, lock, 1, 3),
        paused(Backend::Redisson, lock, 3),
        model(redis, election, 0, 2),
        model(redis, election, 1, 1),
        paused(redis, election, 1),
        model(postgres, election, 1, 1),
        model(mysql, election, 1, 1),
        model(Backend::ZooKeeper, election, 0, 1),
    ]
}

#[test]
fn model_check() {
    #[cfg(feature = "plants")]
    dlock_core::plant::set_from_env();
    let limit = env("DLOCK_MC_STATES").unwrap_or(5_000_000);
    // No path of these bounds is this long: the search ends when no new state is left.
    let depth = env("DLOCK_MC_DEPTH").unwrap_or(200);
    let more_ticks = env("DLOCK_MC_MORE_TICKS").unwrap_or(0) as u32;
    // `DLOCK_MC_ONLY=PostgreSQL`: only the configurations whose name contains it.
    let only = std::env::var("DLOCK_MC_ONLY").unwrap_or_default();
    let mut models: Vec<Model> = models()
        .into_iter()
        .filter(|m| m.name().contains(&only))
        .collect();
    for model in &mut models {
        // An election's observer reads at every tick: one more passes 1.5 million states
        // unfinished, and the memory of the machine soon after.
        if model.target != Target::Election {
            model.ticks += more_ticks;
        }
    }
    // The configurations are independent searches: one per core at a time, each printing its
    // line when it ends; every configuration runs to its end, and the first violation (in the
    // list's order) fails the test.
    use std::sync::atomic::{AtomicUsize, Ordering};
    let next = AtomicUsize::new(0);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut violations: Vec<(usize, String)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads.min(models.len()))
            .map(|_| {
                scope.spawn(|| {
                    let mut violations = Vec::new();
                    loop {
                        let at = next.fetch_add(1, Ordering::Relaxed);
                        let Some(model) = models.get(at) else { break };
                        let started = std::time::Instant::now();
                        match model.explore(depth, limit) {
                            Ok((states, deepest)) => println!(
                                "model check, {}: {} clients, {} {}, {} ticks: {states} states, depth {deepest}, {:.1} s, 0 violations",
                                model.name(),
                                model.clients,
                                model.faults,
                                if model.pauses { "pause(s)" } else { "fault(s)" },
                                model.ticks,
                                started.elapsed().as_secs_f64()
                            ),
                            Err(violation) => {
                                println!("model check, {}: VIOLATION", model.name());
                                violations.push((at, violation));
                            }
                        }
                    }
                    violations
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|worker| {
                worker
                    .join()
                    .unwrap_or_else(|p| std::panic::resume_unwind(p))
            })
            .collect()
    });
    violations.sort();
    if let Some((_, violation)) = violations.into_iter().next() {
        panic!("model check violation, {violation}");
    }
}
