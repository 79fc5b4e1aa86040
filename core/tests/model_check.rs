//! Exhaustive bounded model checking of the real engines against the reference servers: one
//! Redis, Redlock over three, and the SQL database (PostgreSQL with NOTIFY, MySQL polling).
//!
//! The simulation draws interleavings at random; this explores *every* interleaving of a small
//! configuration, breadth first, up to a depth: two clients, each with a fixed script
//! (acquire, then release), contend for one lock (fair, non-fair), one semaphore or one
//! read-write lock. At every state each of these moves is a choice:
//!
//! - a client's application takes its script's next step;
//! - the server (on Redlock: the node it is for) runs a client's oldest request in flight (a
//!   client's requests and replies keep their order, as on its connection; its wake-ups come
//!   on a connection of their own);
//! - a client receives its oldest reply, or its oldest wake-up;
//! - a client's oldest request or reply is lost, or a client crashes (together at most
//!   `faults` times);
//! - time moves on to the earliest timer of any client, which fires (every client whose timer
//!   is due runs it), so time passes while messages are in flight (at most `ticks` times).
//!
//! Every client's clock is exact (the simulation skews them); the server's time is the same
//! true time, in ms. After every move the checks of the simulation hold (numbers as there):
//! at most one holder (permits: N; read-write: one writer or readers) whose validity has not
//! run out (1, 6, 7); new tenures' fencing tokens strictly grow (2); a running client has been
//! told it lost a hold by the end of its validity (3); one Redis keeps no lock longer than
//! the lease plus the waiter lease (9). A state where a client still has work but no move is
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
//! `lost-late` in 13 on PostgreSQL, `redlock-smallest-counter` in 13 on Redlock; the others
//! need clock skew or longer runs, which the simulation has.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashSet, VecDeque};
use std::hash::{Hash, Hasher};
use std::time::Duration;

use dlock_core::redis::reference::Store;
use dlock_core::redis::{LockKeys, RedisOp, Value};
use dlock_core::sql::reference::Store as SqlStore;
use dlock_core::sql::{Dialect, SqlOp, SqlSettings};
use dlock_core::{
    Acquire, ClientId, Command, Config, Engine, Event, HoldId, Input, Instant, Kind, Notice, Op,
    OpId, Output, Protocol, Request, Response, Wait,
};

const MS: u64 = 1_000_000;
const EPOCH_MS: u64 = 1_764_000_000_000;
const LEASE: Duration = Duration::from_millis(100);
const WAITER_LEASE: Duration = Duration::from_millis(60);

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
}

/// Where the lock lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    /// One Redis server (the reference store).
    Redis,
    /// Redlock over this many Redis servers, each a reference store.
    Redlock(u32),
    /// A SQL database (the reference tables): PostgreSQL wakes waiters by NOTIFY, MySQL's
    /// waiters look again every poll interval.
    Sql(Dialect),
}

/// The server side of a state.
#[derive(Debug, Clone)]
enum Server {
    Redis(Store),
    Redlock(Vec<Store>),
    Sql(SqlStore),
}

/// A client's view of its hold: the fencing token, and until when it is valid.
#[derive(Debug, Clone, Hash)]
struct Hold {
    id: HoldId,
    token: u64,
    valid_until: u64,
    kind: Kind,
}

#[derive(Debug, Clone)]
struct Proc {
    engine: Option<Engine>,
    /// In flight on its connection, oldest first: requests, replies, wake-ups.
    requests: VecDeque<Request>,
    replies: VecDeque<Input>,
    wake_ups: VecDeque<Input>,
    /// Acquires still to make; each is released once granted.
    acquires: u32,
    held: Option<Hold>,
    acquiring: bool,
    releasing: bool,
    next_op: u64,
}

#[derive(Debug, Clone)]
struct State {
    now: u64,
    server: Server,
    procs: Vec<Proc>,
    subscribers: BTreeMap<String, usize>,
    /// The largest fencing token any client learned of a new tenure.
    last_token: u64,
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
}

struct Model {
    backend: Backend,
    target: Target,
    clients: usize,
    /// How many losses and crashes a path may have.
    faults: u32,
    /// How many times time may move on along a path.
    ticks: u32,
}

impl Model {
    fn name(&self) -> String {
        let target = match self.target {
            Target::Lock { fair: true } => "lock",
            Target::Lock { fair: false } => "non-fair lock",
            Target::Semaphore { .. } => "semaphore",
            Target::RwLock => "read-write lock",
        };
        let backend = match self.backend {
            Backend::Redis => "Redis".to_owned(),
            Backend::Redlock(nodes) => format!("Redlock of {nodes}"),
            Backend::Sql(Dialect::Postgres) => "PostgreSQL".to_owned(),
            Backend::Sql(Dialect::Mysql) => "MySQL".to_owned(),
        };
        format!("{target} on {backend}")
    }

    fn kind(&self, client: usize) -> Kind {
        match self.target {
            Target::Lock { .. } => Kind::Mutex,
            Target::Semaphore { permits } => Kind::Semaphore { permits },
            Target::RwLock if client == 0 => Kind::Write,
            Target::RwLock => Kind::Read,
        }
    }

    fn start(&self) -> State {
        let server = match self.backend {
            Backend::Redis => Server::Redis(Store::new()),
            Backend::Redlock(nodes) => Server::Redlock(vec![Store::new(); nodes as usize]),
            Backend::Sql(dialect) => Server::Sql(SqlStore::new(dialect)),
        };
        let mut s = State {
            now: 0,
            server,
            procs: Vec::new(),
            subscribers: BTreeMap::new(),
            last_token: 0,
            faults: 0,
            ticks: 0,
        };
        for c in 0..self.clients {
            let mut config = Config::new(ClientId(0xc0 + c as u128));
            config.waiter_lease = WAITER_LEASE;
            config.request_timeout = Duration::from_millis(40);
            config.protocol = match self.backend {
                Backend::Redis => Protocol::Redis,
                Backend::Redlock(nodes) => Protocol::Redlock { nodes },
                Backend::Sql(dialect) => {
                    let mut settings = SqlSettings::new(dialect);
                    settings.poll_interval = Duration::from_millis(30);
                    Protocol::Sql(settings)
                }
            };
            let engine = Engine::new(config, Instant::from_nanos(0)).expect("config");
            s.procs.push(Proc {
                engine: Some(engine),
                requests: VecDeque::new(),
                replies: VecDeque::new(),
                wake_ups: VecDeque::new(),
                acquires: 1,
                held: None,
                acquiring: false,
                releasing: false,
                next_op: 1,
            });
        }
        // Each client subscribes to its wake-up channel first (on every node; MySQL has none):
        // served and answered before the search starts, so that it explores the contention
        // rather than the start-up.
        for c in 0..self.clients {
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
            let idle = p.engine.is_some() && !p.acquiring && !p.releasing;
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
        moves.extend(with(|p| !p.replies.is_empty(), Move::Reply));
        moves.extend(with(|p| !p.wake_ups.is_empty(), Move::WakeUp));
        if s.faults < self.faults {
            moves.extend(with(|p| !p.requests.is_empty(), Move::LoseRequest));
            moves.extend(with(|p| !p.replies.is_empty(), Move::LoseReply));
            // A holder or a queued waiter dies (the others' liveness is what it tests).
            for (c, p) in s.procs.iter().enumerate() {
                if p.engine.is_some() && (p.held.is_some() || p.acquiring) {
                    moves.push(Move::Crash(c));
                }
            }
        }
        if s.ticks < self.ticks && Self::timer(s).is_some() {
            moves.push(Move::Tick);
        }
        moves
    }

    /// The earliest timer of any running client.
    fn timer(s: &State) -> Option<Instant> {
        s.procs
            .iter()
            .filter_map(|p| p.engine.as_ref()?.poll_timeout())
            .min()
    }

    fn describe(&self, s: &State, m: Move) -> String {
        match m {
            Move::App(c) => match &s.procs[c].held {
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
                let at = Self::timer(s).map_or(0, Instant::as_nanos);
                format!("time moves to {:.3} s", at.max(s.now) as f64 / 1e9)
            }
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
                // The application stops relying on a hold as it releases it.
                let cmd = match p.held.take() {
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
                let now = Instant::from_nanos(s.now);
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
                let now = Instant::from_nanos(s.now);
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
                p.engine = None;
                p.replies.clear();
                p.wake_ups.clear();
                p.held = None;
                p.acquiring = false;
                p.releasing = false;
                s.faults += 1;
            }
            Move::Tick => {
                let at = Self::timer(&s).expect("a timer");
                s.ticks += 1;
                s.now = s.now.max(at.as_nanos());
                let now = Instant::from_nanos(s.now);
                for c in 0..s.procs.len() {
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

    /// Runs client `c`'s request on the server at the true time: its reply, and its messages
    /// on the way to their subscribers.
    fn serve(&self, s: &mut State, c: usize, op: Op) -> Result<Response, String> {
        let now_ms = EPOCH_MS + s.now / MS;
        let (store, op) = match (&mut s.server, op) {
            (Server::Redis(store), Op::Redis(op)) => (store, op),
            (Server::Redlock(nodes), Op::Redlock { node, op }) => (&mut nodes[node as usize], op),
            (Server::Sql(_), Op::Sql(SqlOp::Listen { channel })) => {
                s.subscribers.insert(channel, c);
                return Ok(Response::Sql(Vec::new()));
            }
            (Server::Sql(store), Op::Sql(query)) => {
                let outcome = store
                    .exec(now_ms * 1000, &query)
                    .map_err(|e| format!("statement failed: {e}"))?;
                Self::publish(s, outcome.notified);
                return Ok(Response::Sql(outcome.values));
            }
            (server, other) => return Err(format!("{server:?} got {other:?}")),
        };
        let reply = match op {
            RedisOp::Subscribe { channel } => {
                s.subscribers.insert(channel, c);
                Value::Status("OK".into())
            }
            RedisOp::Eval { script, keys, args } => {
                let outcome = store
                    .eval(now_ms, script, &keys, &args)
                    .map_err(|e| format!("script {} failed: {e}", script.name()))?;
                let published = outcome.published;
                if matches!(self.backend, Backend::Redis) {
                    self.check_ttl(s, now_ms)?;
                }
                Self::publish(s, published);
                outcome.reply
            }
        };
        Ok(Response::Redis(reply))
    }

    /// Messages go to whoever subscribed to their channel, as wake-ups.
    fn publish(s: &mut State, messages: Vec<(String, Vec<u8>)>) {
        for (channel, payload) in messages {
            if let Some(&to) = s.subscribers.get(&channel) {
                let input = Input::Notice(Notice::Message { channel, payload });
                s.procs[to].wake_ups.push_back(input);
            }
        }
    }

    /// Drains client `c`'s engine: requests go in flight, events reach its application.
    fn pump(&self, s: &mut State, c: usize) -> Result<(), String> {
        while let Some(out) = s.procs[c].engine.as_mut().and_then(Engine::poll_output) {
            match out {
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
                // Check 2: tokens grow (a semaphore's permits and readers overlap: new ones).
                let grows = match self.target {
                    Target::Lock { .. } => fencing_token > s.last_token,
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
                    valid_until: valid_until.as_nanos(),
                    kind: self.kind(c),
                });
            }
            Event::NotAcquired { .. } if p.acquiring => p.acquiring = false,
            Event::Failed { .. } if p.acquiring => p.acquiring = false,
            Event::Released { .. } | Event::Failed { .. } if p.releasing => p.releasing = false,
            Event::Renewed { hold, valid_until }
            | Event::Extended {
                hold, valid_until, ..
            } => {
                if let Some(h) = p.held.as_mut().filter(|h| h.id == hold) {
                    h.valid_until = h.valid_until.max(valid_until.as_nanos());
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
            let (Some(_), Some(h)) = (&p.engine, &p.held) else {
                continue;
            };
            if h.valid_until < s.now {
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
            Target::Lock { .. } => valid.len() > 1,
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
        let (Target::Lock { .. }, Server::Redis(store)) = (self.target, &mut s.server) else {
            return Ok(());
        };
        let ttl = store.pttl_at(now_ms, &LockKeys::new("m").lock);
        let longest = LEASE.max(WAITER_LEASE).as_millis() as i64;
        if ttl == -1 || ttl > longest {
            return Err(format!(
                "the server keeps the lock for {ttl} ms, longer than any lease"
            ));
        }
        Ok(())
    }

    /// Whether a client still has work to do (a hang if no move is left).
    fn busy(s: &State) -> bool {
        s.procs.iter().any(|p| {
            p.engine.is_some() && (p.acquiring || p.releasing || p.held.is_some() || p.acquires > 0)
        })
    }

    fn fingerprint(s: &State) -> u64 {
        let mut h = DefaultHasher::new();
        (s.now, s.last_token, s.faults, s.ticks).hash(&mut h);
        format!("{:?}{:?}{:?}", s.procs, s.server, s.subscribers).hash(&mut h);
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
            if moves.is_empty() && Self::busy(&s) && Self::timer(&s).is_none() {
                let steps = trace(&path, node, "(no move is possible)".into());
                return Err(format!("{}: a client hangs\n{steps}", self.name()));
            }
            if level == depth {
                continue;
            }
            for m in moves {
                let label = self.describe(&s, m);
                match self.apply(&s, m) {
                    Ok(next) => {
                        if seen.len() >= limit || !seen.insert(Self::fingerprint(&next)) {
                            continue;
                        }
                        path.push((node, label));
                        queue.push_back((next, path.len() - 1, level + 1));
                    }
                    Err(violation) => {
                        let steps = trace(&path, node, label);
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
        other => format!("{other:?}"),
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
        ticks,
    };
    let (redis, postgres, mysql) = (
        Backend::Redis,
        Backend::Sql(Dialect::Postgres),
        Backend::Sql(Dialect::Mysql),
    );
    let (lock, non_fair) = (Target::Lock { fair: true }, Target::Lock { fair: false });
    let (semaphore, rw) = (Target::Semaphore { permits: 1 }, Target::RwLock);
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
    for mut model in models().into_iter().filter(|m| m.name().contains(&only)) {
        model.ticks += more_ticks;
        let started = std::time::Instant::now();
        match model.explore(depth, limit) {
            Ok((states, deepest)) => println!(
                "model check, {}: {} clients, {} fault(s), {} ticks: {states} states, depth {deepest}, {:.1} s, 0 violations",
                model.name(),
                model.clients,
                model.faults,
                model.ticks,
                started.elapsed().as_secs_f64()
            ),
            Err(violation) => panic!("model check violation, {violation}"),
        }
    }
}
