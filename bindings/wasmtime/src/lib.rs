//! Runs dlock's engine from its WebAssembly component (`dlock.wasm`, world `machine`) in
//! wasmtime, as a [`dlock::Machine`]:
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let component = dlock_wasmtime::WasmComponent::from_file("target/dlock.wasm")?;
//! let client = dlock::Client::builder("redis://127.0.0.1:6379").machine(component.factory()).connect().await?;
//! # Ok(())
//! # }
//! ```
//!
//! The component imports nothing, so the linker provides nothing: it cannot reach the
//! network, a clock or a file. Each call runs on a fuel budget and a memory limit; a trap or
//! an exhausted limit becomes a [`dlock::MachineError`], never a crash of the host.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use dlock::{Machine, MachineError, MachineFactory};
use dlock_core::redis::{RedisOp, Script as CoreScript, Value};
use dlock_core::zk::{ZkOp as CoreZkOp, ZkReply as CoreZkReply};
use wasmtime::component::{Component, Linker, ResourceAny};
use wasmtime::{Config, Store, StoreLimits, StoreLimitsBuilder};

mod bindings {
    wasmtime::component::bindgen!({ world: "machine", path: "../../wit" });
}

use bindings::exports::dlock::lock::engine::{
    Config as WitConfig, Input, Output, Protocol, Reply, ZkSettings,
};
use bindings::exports::dlock::lock::transport::{
    Message, NodeOp, Notice, Op, RedisNode, RedisOp as WitOp, Response, Script, TransportError,
    ZkOp, ZkReply,
};
use bindings::exports::dlock::lock::types::{
    Acquire, AcquireMulti, Command, Error as WitError, Event, Extend, Kind, LostReason,
    NotAcquired, Release, Wait,
};

/// Instructions one call may run (a call normally needs a few thousand).
pub const FUEL_PER_CALL: u64 = 50_000_000;
/// Linear memory one engine may use.
pub const MEMORY_LIMIT: usize = 64 << 20;

/// Why the component could not be loaded or started.
#[derive(Debug)]
pub struct WasmError(pub String);

impl std::fmt::Display for WasmError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for WasmError {}

fn fail(what: &str) -> impl Fn(wasmtime::Error) -> WasmError + '_ {
    move |e| WasmError(format!("{what}: {e:#}"))
}

/// The compiled component, ready to start any number of engines.
#[derive(Clone)]
pub struct WasmComponent {
    engine: wasmtime::Engine,
    component: Component,
    linker: Arc<Linker<StoreLimits>>,
}

impl std::fmt::Debug for WasmComponent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmComponent")
            .field("imports", &self.imports())
            .finish_non_exhaustive()
    }
}

impl WasmComponent {
    /// Compiles `dlock.wasm`.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, WasmError> {
        let bytes = std::fs::read(path.as_ref())
            .map_err(|e| WasmError(format!("reading {}: {e}", path.as_ref().display())))?;
        Self::from_bytes(&bytes)
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<Self, WasmError> {
        let mut config = Config::new();
        config.consume_fuel(true);
        let engine = wasmtime::Engine::new(&config).map_err(fail("configuring wasmtime"))?;
        let component = Component::new(&engine, bytes).map_err(fail("compiling the component"))?;
        // The machine world imports nothing: an empty linker is all it gets.
        let linker = Arc::new(Linker::new(&engine));
        Ok(Self {
            engine,
            component,
            linker,
        })
    }

    /// The component's imports: none, for dlock.wasm.
    pub fn imports(&self) -> Vec<String> {
        self.component
            .component_type()
            .imports(&self.engine)
            .map(|(name, _)| name.to_owned())
            .collect()
    }

    /// Starts one engine (what `dlock_core::Engine::new` does natively).
    pub fn start(
        &self,
        config: dlock_core::Config,
        now: dlock_core::Instant,
    ) -> Result<WasmMachine, WasmError> {
        let limits = StoreLimitsBuilder::new()
            .memory_size(MEMORY_LIMIT)
            .instances(16)
            .build();
        let mut store = Store::new(&self.engine, limits);
        store.limiter(|limits| limits);
        store
            .set_fuel(FUEL_PER_CALL)
            .map_err(fail("setting fuel"))?;
        let instance = bindings::Machine::instantiate(&mut store, &self.component, &self.linker)
            .map_err(fail("instantiating"))?;
        let wit = WitConfig {
            client_id: ((config.client_id.0 >> 64) as u64, config.client_id.0 as u64),
            waiter_lease: nanos(config.waiter_lease),
            request_timeout: nanos(config.request_timeout),
            max_batch: u32::try_from(config.max_batch).unwrap_or(u32::MAX),
            lock_delay: nanos(config.lock_delay),
            protocol: match &config.protocol {
                dlock_core::Protocol::Redis => Protocol::Redis,
                dlock_core::Protocol::ZooKeeper(z) => Protocol::Zookeeper(ZkSettings {
                    root: z.root.clone(),
                    session_timeout: nanos(z.session_timeout),
                }),
                dlock_core::Protocol::Redlock { nodes } => Protocol::Redlock(*nodes),
            },
        };
        let handle = instance
            .dlock_lock_engine()
            .machine()
            .call_create(&mut store, &wit, now.as_nanos())
            .map_err(fail("creating the engine"))?
            .map_err(|e| WasmError(format!("the engine refused its configuration: {e:?}")))?;
        Ok(WasmMachine {
            store,
            instance,
            handle,
        })
    }

    /// A factory for [`dlock::ClientBuilder::machine`].
    pub fn factory(&self) -> MachineFactory {
        let component = self.clone();
        Box::new(move |config, now| {
            let machine = component
                .start(config, now)
                .map_err(|e| dlock::Error::Machine(e.0))?;
            Ok(Box::new(machine) as Box<dyn Machine>)
        })
    }
}

/// One engine running inside the component.
pub struct WasmMachine {
    store: Store<StoreLimits>,
    instance: bindings::Machine,
    handle: ResourceAny,
}

impl std::fmt::Debug for WasmMachine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmMachine").finish_non_exhaustive()
    }
}

impl WasmMachine {
    /// Refills the fuel budget for one call and turns a trap into a typed error.
    fn call<T>(
        &mut self,
        f: impl FnOnce(
            &bindings::exports::dlock::lock::engine::GuestMachine,
            &mut Store<StoreLimits>,
            ResourceAny,
        ) -> wasmtime::Result<T>,
    ) -> Result<T, MachineError> {
        self.store
            .set_fuel(FUEL_PER_CALL)
            .map_err(|e| MachineError(format!("setting fuel: {e:#}")))?;
        let guest = self.instance.dlock_lock_engine().machine();
        f(&guest, &mut self.store, self.handle).map_err(|e| {
            let trap = e
                .downcast_ref::<wasmtime::Trap>()
                .map(|t| format!(" ({t})"))
                .unwrap_or_default();
            MachineError(format!("the Wasm engine trapped{trap}: {e:#}"))
        })
    }
}

impl Machine for WasmMachine {
    fn handle_input(
        &mut self,
        now: dlock_core::Instant,
        input: dlock_core::Input,
    ) -> Result<(), MachineError> {
        let input = to_wit(input);
        self.call(|g, store, h| g.call_handle_input(store, h, now.as_nanos(), &input))
    }

    fn handle_timeout(&mut self, now: dlock_core::Instant) -> Result<(), MachineError> {
        self.call(|g, store, h| g.call_handle_timeout(store, h, now.as_nanos()))
    }

    fn drain(&mut self) -> Result<Vec<dlock_core::Output>, MachineError> {
        Ok(self
            .call(|g, store, h| g.call_drain(store, h))?
            .into_iter()
            .map(from_wit)
            .collect())
    }

    fn poll_timeout(&mut self) -> Result<Option<dlock_core::Instant>, MachineError> {
        Ok(self
            .call(|g, store, h| g.call_poll_timeout(store, h))?
            .map(dlock_core::Instant::from_nanos))
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

// --- dlock-core → WIT (inputs) ---

fn to_wit(input: dlock_core::Input) -> Input {
    match input {
        dlock_core::Input::Command(c) => Input::Command(match c {
            dlock_core::Command::Acquire(a) => Command::Acquire(Acquire {
                op: a.op.0,
                name: a.name,
                owner: a.owner,
                lease: nanos(a.lease),
                wait: wait(a.wait),
                max_hold: a.max_hold.map(nanos),
                fair: a.fair,
                kind: match a.kind {
                    dlock_core::Kind::Mutex => Kind::Mutex,
                    dlock_core::Kind::Semaphore { permits } => Kind::Semaphore(permits),
                    dlock_core::Kind::Read => Kind::Read,
                    dlock_core::Kind::Write => Kind::Write,
                },
            }),
            dlock_core::Command::AcquireMulti(m) => Command::AcquireMulti(AcquireMulti {
                op: m.op.0,
                names: m.names,
                lease: nanos(m.lease),
                wait: wait(m.wait),
                max_hold: m.max_hold.map(nanos),
            }),
            dlock_core::Command::Release { op, hold } => Command::Release(Release {
                op: op.0,
                hold: hold.0,
            }),
            dlock_core::Command::Extend { op, hold, lease } => Command::Extend(Extend {
                op: op.0,
                hold: hold.0,
                lease: nanos(lease),
            }),
            dlock_core::Command::Cancel { op } => Command::Cancel(op.0),
        }),
        dlock_core::Input::Reply { id, reply } => Input::Reply(Reply {
            id: id.0,
            outcome: match reply {
                Ok(dlock_core::Response::Redis(value)) => {
                    let mut nodes = Vec::new();
                    flatten(value, &mut nodes);
                    Ok(Response::Redis(nodes))
                }
                Ok(dlock_core::Response::Zk(r)) => Ok(Response::Zk(match r {
                    CoreZkReply::Done => ZkReply::Done,
                    CoreZkReply::Created(path) => ZkReply::Created(path),
                    CoreZkReply::Children(names) => ZkReply::Children(names),
                    CoreZkReply::NoNode => ZkReply::NoNode,
                })),
                Err(dlock_core::TransportError::Unavailable(why)) => {
                    Err(TransportError::Unavailable(why))
                }
                Err(dlock_core::TransportError::Server(why)) => Err(TransportError::Server(why)),
                Err(other) => Err(TransportError::Unavailable(format!("{other:?}"))),
            },
        }),
        dlock_core::Input::Notice(n) => Input::Notice(match n {
            dlock_core::Notice::Connected => Notice::Connected,
            dlock_core::Notice::Disconnected => Notice::Disconnected,
            dlock_core::Notice::Message { channel, payload } => {
                Notice::Message(Message { channel, payload })
            }
            dlock_core::Notice::Watch { path } => Notice::Watch(path),
            dlock_core::Notice::SessionExpired => Notice::SessionExpired,
            dlock_core::Notice::Closed => Notice::Closed,
        }),
    }
}

fn wait(w: dlock_core::Wait) -> Wait {
    match w {
        dlock_core::Wait::No => Wait::No,
        dlock_core::Wait::Until(t) => Wait::Until(t.as_nanos()),
        dlock_core::Wait::Forever => Wait::Forever,
    }
}

/// A RESP value as pre-order nodes: an array node is followed by its items.
fn flatten(value: Value, nodes: &mut Vec<RedisNode>) {
    match value {
        Value::Nil => nodes.push(RedisNode::Nil),
        Value::Int(i) => nodes.push(RedisNode::Int(i)),
        Value::Data(d) => nodes.push(RedisNode::Data(d)),
        Value::Status(s) => nodes.push(RedisNode::Status(s)),
        Value::Array(items) => {
            nodes.push(RedisNode::Array(
                u32::try_from(items.len()).unwrap_or(u32::MAX),
            ));
            for item in items {
                flatten(item, nodes);
            }
        }
    }
}

// --- WIT → dlock-core (outputs) ---

fn redis_op(op: WitOp) -> RedisOp {
    match op {
        WitOp::Eval(e) => RedisOp::Eval {
            script: match e.script {
                Script::Acquire => CoreScript::Acquire,
                Script::Release => CoreScript::Release,
                Script::Dequeue => CoreScript::Dequeue,
                Script::Extend => CoreScript::Extend,
                Script::Status => CoreScript::Status,
                Script::Raise => CoreScript::Raise,
                Script::PermitAcquire => CoreScript::PermitAcquire,
                Script::PermitRelease => CoreScript::PermitRelease,
                Script::PermitDequeue => CoreScript::PermitDequeue,
                Script::RwAcquire => CoreScript::RwAcquire,
                Script::RwRelease => CoreScript::RwRelease,
                Script::RwDequeue => CoreScript::RwDequeue,
                Script::FencedWrite => CoreScript::FencedWrite,
            },
            keys: e.keys,
            args: e.args,
        },
        WitOp::Subscribe(channel) => RedisOp::Subscribe { channel },
    }
}

fn from_wit(output: Output) -> dlock_core::Output {
    use dlock_core::{HoldId, OpId};
    match output {
        Output::Request(r) => dlock_core::Output::Request(dlock_core::Request {
            id: dlock_core::RequestId(r.id),
            op: match r.op {
                Op::Zk(op) => dlock_core::Op::Zk(match op {
                    ZkOp::CreateParents(path) => CoreZkOp::CreateParents { path },
                    ZkOp::CreateSequential(prefix) => CoreZkOp::CreateSequential { prefix },
                    ZkOp::Delete(path) => CoreZkOp::Delete { path },
                    ZkOp::Children(path) => CoreZkOp::Children { path },
                    ZkOp::Watch(path) => CoreZkOp::Watch { path },
                    ZkOp::Exists(path) => CoreZkOp::Exists { path },
                }),
                Op::Redis(op) => dlock_core::Op::Redis(redis_op(op)),
                Op::Redlock(NodeOp { node, op }) => dlock_core::Op::Redlock {
                    node,
                    op: redis_op(op),
                },
            },
        }),
        Output::Event(e) => dlock_core::Output::Event(match e {
            Event::Acquired(a) => dlock_core::Event::Acquired {
                op: OpId(a.op),
                hold: HoldId(a.hold),
                fencing_token: a.fencing_token,
                valid_until: dlock_core::Instant::from_nanos(a.valid_until),
                count: a.count,
            },
            Event::AcquiredMulti(a) => dlock_core::Event::AcquiredMulti {
                op: OpId(a.op),
                hold: HoldId(a.hold),
                members: a
                    .members
                    .into_iter()
                    .map(|m| dlock_core::Member {
                        name: m.name,
                        fencing_token: m.fencing_token,
                    })
                    .collect(),
                valid_until: dlock_core::Instant::from_nanos(a.valid_until),
            },
            Event::NotAcquired((op, reason)) => dlock_core::Event::NotAcquired {
                op: OpId(op),
                reason: match reason {
                    NotAcquired::Busy => dlock_core::NotAcquired::Busy,
                    NotAcquired::TimedOut => dlock_core::NotAcquired::TimedOut,
                    NotAcquired::Cancelled => dlock_core::NotAcquired::Cancelled,
                },
            },
            Event::Released(r) => dlock_core::Event::Released {
                op: OpId(r.op),
                hold: HoldId(r.hold),
                count: r.count,
            },
            Event::Extended(x) => dlock_core::Event::Extended {
                op: OpId(x.op),
                hold: HoldId(x.hold),
                valid_until: dlock_core::Instant::from_nanos(x.valid_until),
            },
            Event::Failed(f) => dlock_core::Event::Failed {
                op: OpId(f.op),
                error: error(f.error),
            },
            Event::Renewed(r) => dlock_core::Event::Renewed {
                hold: HoldId(r.hold),
                valid_until: dlock_core::Instant::from_nanos(r.valid_until),
            },
            Event::Lost(l) => dlock_core::Event::Lost {
                hold: HoldId(l.hold),
                reason: match l.reason {
                    LostReason::Expired => dlock_core::LostReason::Expired,
                    LostReason::NotOwner => dlock_core::LostReason::NotOwner,
                    LostReason::MaxHold => dlock_core::LostReason::MaxHold,
                    LostReason::Closed => dlock_core::LostReason::Closed,
                    LostReason::Disconnected => dlock_core::LostReason::Disconnected,
                    LostReason::SessionExpired => dlock_core::LostReason::SessionExpired,
                },
            },
        }),
    }
}

fn error(e: WitError) -> dlock_core::Error {
    use dlock_core::{Error as E, HoldId, OpId};
    match e {
        WitError::EmptyName => E::EmptyName,
        WitError::NameTooLong(len) => E::NameTooLong { len: len as usize },
        WitError::InvalidLease(lease) => E::InvalidLease {
            lease: Duration::from_nanos(lease),
        },
        WitError::DuplicateOp(op) => E::DuplicateOp { op: OpId(op) },
        WitError::NotHeld(hold) => E::NotHeld { hold: HoldId(hold) },
        WitError::AlreadyWaiting(op) => E::AlreadyWaiting { op: OpId(op) },
        WitError::Closed => E::Closed,
        WitError::Unavailable(why) => E::Unavailable(why),
        WitError::Timeout => E::Timeout,
        WitError::Backend(why) => E::Backend(why),
        WitError::MalformedReply(why) => E::MalformedReply(why),
        WitError::LockLost(hold) => E::LockLost { hold: HoldId(hold) },
        WitError::SessionExpired => E::SessionExpired,
        WitError::InvalidConfig(why) => E::InvalidConfig(why),
        WitError::InvalidArgument(why) => E::InvalidArgument(why),
    }
}
