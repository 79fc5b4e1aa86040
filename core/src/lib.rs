//! # dlock-core
//!
//! The sans-IO engine behind every dlock host: the semantics of a reentrant, leased, fenced
//! distributed mutex — ownership, reentrancy, lease math, fencing tokens, FIFO waiting with
//! direct hand-off, renewal and loss — with no I/O, no clock and no randomness of its own.
//! The host (a tokio driver, a Python or Node binding, a wasmtime embedding, a simulation)
//! moves bytes and tells the time; the engine decides everything else. Because every host
//! runs this same machine, they all speak identical bytes to the backend and give the same
//! guarantees.
//!
//! ## Driving the engine
//!
//! ```text
//! loop {
//!     feed:   engine.handle_input(now, Input::Command(..) | Input::Reply{..} | Input::Notice(..))
//!             engine.handle_timeout(now)            // when poll_timeout() has passed
//!     drain:  while let Some(out) = engine.poll_output() {
//!                 Output::Request(r) => transport.perform(r)   // reply later with Input::Reply
//!                 Output::Event(e)   => application.deliver(e)
//!             }
//!     sleep until engine.poll_timeout(), or until a command, reply or notice arrives
//! }
//! ```
//!
//! **Drain until `None`, then sleep until the timeout.** After any `handle_*` call, call
//! [`Engine::poll_output`] until it returns `None`, then [`Engine::poll_timeout`] to learn
//! when to call [`Engine::handle_timeout`] next. `now` is the host's monotonic clock in
//! nanoseconds ([`Instant`]); a `now` older than one seen before is treated as that one.
//!
//! Every [`Command`] ends in exactly one terminal [`Event`] naming its op id (a cancel ends
//! the acquire it names). [`Event::Renewed`] and [`Event::Lost`] are news about holds.
//!
//! ## Guarantees
//!
//! A hold is valid locally until `sent + lease − drift` for the latest request that
//! confirmed it (drift = 1% of the lease + 2 ms); when that instant passes without a
//! confirmed renewal the engine reports [`Event::Lost`], even if the server might still hold
//! the lock. Fencing tokens grow strictly with every new tenure of a lock name. On one Redis
//! and on ZooKeeper waiters are served first come, first served, and the lock is handed to
//! the next live waiter by the releasing script itself; on Redlock ([`redlock`]) a lock is
//! held while a majority of independent servers hold it, and waiters retry with a randomised
//! back-off. `docs/PROTOCOL.md` gives the wire protocol and the argument.
//!
//! ## Where things live
//!
//! One lock lifecycle (`src/lock`: the tenure index, reentrancy, deadlines, validity,
//! renewal, loss, close) serves every backend; each backend is a strategy of it that supplies
//! only its own requests, replies, notices and timers: [`redis`] (one server, and Redis
//! Cluster), [`redlock`] and [`zk`]. `core/README.md` maps every concern to its file.
//!
//! ```
//! use core::time::Duration;
//! use dlock_core::{
//!     Acquire, ClientId, Command, Config, Engine, Input, Instant, Kind, OpId, Output, Wait,
//! };
//!
//! let mut engine = Engine::new(Config::new(ClientId(7)), Instant::from_nanos(0)).unwrap();
//! let acquire = Acquire {
//!     op: OpId(1),
//!     name: "orders/42".into(),
//!     owner: 1,
//!     lease: Duration::from_secs(10),
//!     wait: Wait::No,
//!     max_hold: None,
//!     fair: true,
//!     kind: Kind::Mutex,
//! };
//! engine.handle_input(Instant::from_nanos(1), Input::Command(Command::Acquire(acquire)));
//! let mut requests = 0;
//! while let Some(out) = engine.poll_output() {
//!     if let Output::Request(_) = out { requests += 1 } // subscribe, then the acquire script
//! }
//! assert_eq!(requests, 2);
//! assert!(engine.poll_timeout().is_some()); // the acquire's request timeout
//! ```

mod base;
mod config;
mod election;
mod engine;
mod error;
mod fnv;
mod fx;
mod ids;
mod jitter;
mod lock;
pub mod multi;
mod owner;
pub mod plant;
pub mod redis;
pub mod redisson;
pub mod redlock;
pub mod sql;
mod stats;
mod status;
mod time;
mod timers;
mod types;
pub mod zk;

pub use base::{check_name, check_value};
pub use config::{Config, DEFAULT_ZK_ROOT, Protocol, ZkSettings};
pub use engine::{Engine, Step};
pub use error::{
    Error, MAX_LEASE, MAX_MULTI, MAX_NAME_LEN, MAX_PERMITS, MAX_VALUE_LEN, MIN_LEASE,
    TransportError,
};
pub use owner::{OwnerToken, owner_token, token_seq};
pub use stats::{
    BUCKETS, Histogram, LockStats, MAX_OBSERVATIONS, MAX_STATS_NAMES, OTHER_NAMES, Observation,
    Observed, Stats,
};
pub use status::{HoldInfo, LockStatus};
pub use time::{Instant, drift};
pub use types::{
    Acquire, AcquireMulti, ClientId, Command, Event, HoldId, Input, Kind, Leader, LostReason,
    Member, NotAcquired, Notice, Op, OpId, Output, RESERVED_IDS, Reply, Request, RequestId,
    Response, Wait,
};
