//! dlock's engine as a WebAssembly component. It exports the `machine` world of `wit/` and
//! imports nothing: no network, clock or file. The host feeds inputs and drains outputs
//! exactly as it would with `dlock_core::Engine`; this crate only translates between the
//! WIT types and the engine's.
//!
//! Build: `cargo build -p dlock-component --target wasm32-unknown-unknown --release`, then
//! turn the core module into a component (`just wasm` does both and writes
//! `target/dlock.wasm`).

use std::cell::RefCell;
use std::time::Duration;

use dlock_core as core_;
use dlock_core::ZkSettings;
use dlock_core::redis::{RedisOp, Script as CoreScript, Value};
use dlock_core::zk::{ZkOp as CoreZkOp, ZkReply as CoreZkReply};

/// The generated bindings and ABI glue: the only unsafe code in the crate, none of it written
/// by hand.
#[allow(unsafe_code)]
mod bindings {
    wit_bindgen::generate!({ world: "machine", path: "../../wit" });

    use super::Component;
    export!(Component);
}

use bindings::exports::dlock::lock::engine::{
    Config, Guest, GuestMachine, Input, Machine as MachineHandle, Output, Protocol, Reply,
};
use bindings::exports::dlock::lock::transport::{
    Eval, Message, NodeOp, Notice, Op, RedisNode, RedisOp as WitOp, Request, Response, Script,
    TransportError, ZkOp, ZkReply,
};
use bindings::exports::dlock::lock::types::{
    Acquired, AcquiredMulti, Command, Error, Event, Extend, Extended, Failed, Kind, Lost,
    LostReason, Member, NotAcquired, Release, Released, Renewed, Wait,
};

struct Component;

impl Guest for Component {
    type Machine = Machine;

    fn script_source(script: Script) -> String {
        core_script(script).source()
    }
}

/// One engine instance; the component model hands out `&self`, so it lives in a RefCell.
struct Machine {
    engine: RefCell<core_::Engine>,
}

impl GuestMachine for Machine {
    fn create(config: Config, now: u64) -> Result<MachineHandle, Error> {
        let mut c = core_::Config::new(core_::ClientId(
            (u128::from(config.client_id.0) << 64) | u128::from(config.client_id.1),
        ));
        c.waiter_lease = Duration::from_nanos(config.waiter_lease);
        c.request_timeout = Duration::from_nanos(config.request_timeout);
        c.max_batch = config.max_batch as usize;
        c.lock_delay = Duration::from_nanos(config.lock_delay);
        c.protocol = match config.protocol {
            Protocol::Redis => core_::Protocol::Redis,
            Protocol::Zookeeper(z) => core_::Protocol::ZooKeeper(ZkSettings {
                root: z.root,
                session_timeout: Duration::from_nanos(z.session_timeout),
            }),
            Protocol::Redlock(nodes) => core_::Protocol::Redlock { nodes },
        };
        let engine = core_::Engine::new(c, core_::Instant::from_nanos(now)).map_err(error)?;
        Ok(MachineHandle::new(Machine {
            engine: RefCell::new(engine),
        }))
    }

    fn handle_input(&self, now: u64, input: Input) {
        let input = match input {
            Input::Command(c) => core_::Input::Command(command(c)),
            Input::Reply(Reply { id, outcome }) => core_::Input::Reply {
                id: core_::RequestId(id),
                reply: match outcome {
                    Ok(Response::Redis(nodes)) => value(&nodes),
                    Ok(Response::Zk(r)) => Ok(core_::Response::Zk(match r {
                        ZkReply::Done => CoreZkReply::Done,
                        ZkReply::Created(path) => CoreZkReply::Created(path),
                        ZkReply::Children(names) => CoreZkReply::Children(names),
                        ZkReply::NoNode => CoreZkReply::NoNode,
                    })),
                    Err(TransportError::Unavailable(why)) => {
                        Err(core_::TransportError::Unavailable(why))
                    }
                    Err(TransportError::Server(why)) => Err(core_::TransportError::Server(why)),
                },
            },
            Input::Notice(n) => core_::Input::Notice(match n {
                Notice::Connected => core_::Notice::Connected,
                Notice::Disconnected => core_::Notice::Disconnected,
                Notice::Message(Message { channel, payload }) => {
                    core_::Notice::Message { channel, payload }
                }
                Notice::Watch(path) => core_::Notice::Watch { path },
                Notice::SessionExpired => core_::Notice::SessionExpired,
                Notice::Closed => core_::Notice::Closed,
            }),
        };
        self.engine
            .borrow_mut()
            .handle_input(core_::Instant::from_nanos(now), input);
    }

    fn handle_timeout(&self, now: u64) {
        self.engine
            .borrow_mut()
            .handle_timeout(core_::Instant::from_nanos(now));
    }

    fn poll_output(&self) -> Option<Output> {
        Some(match self.engine.borrow_mut().poll_output()? {
            core_::Output::Request(r) => Output::Request(Request {
                id: r.id.0,
                op: op(r.op),
            }),
            core_::Output::Event(e) => Output::Event(event(e)),
        })
    }

    fn drain(&self) -> Vec<Output> {
        std::iter::from_fn(|| self.poll_output()).collect()
    }

    fn poll_timeout(&self) -> Option<u64> {
        self.engine
            .borrow()
            .poll_timeout()
            .map(core_::Instant::as_nanos)
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn command(c: Command) -> core_::Command {
    match c {
        Command::Acquire(a) => core_::Command::Acquire(core_::Acquire {
            op: core_::OpId(a.op),
            name: a.name,
            owner: a.owner,
            lease: Duration::from_nanos(a.lease),
            wait: wait(a.wait),
            max_hold: a.max_hold.map(Duration::from_nanos),
            fair: a.fair,
            kind: match a.kind {
                Kind::Mutex => core_::Kind::Mutex,
                Kind::Semaphore(permits) => core_::Kind::Semaphore { permits },
                Kind::Read => core_::Kind::Read,
                Kind::Write => core_::Kind::Write,
            },
        }),
        Command::AcquireMulti(m) => core_::Command::AcquireMulti(core_::AcquireMulti {
            op: core_::OpId(m.op),
            names: m.names,
            lease: Duration::from_nanos(m.lease),
            wait: wait(m.wait),
            max_hold: m.max_hold.map(Duration::from_nanos),
        }),
        Command::Release(Release { op, hold }) => core_::Command::Release {
            op: core_::OpId(op),
            hold: core_::HoldId(hold),
        },
        Command::Extend(Extend { op, hold, lease }) => core_::Command::Extend {
            op: core_::OpId(op),
            hold: core_::HoldId(hold),
            lease: Duration::from_nanos(lease),
        },
        Command::Cancel(op) => core_::Command::Cancel {
            op: core_::OpId(op),
        },
    }
}

fn wait(w: Wait) -> core_::Wait {
    match w {
        Wait::No => core_::Wait::No,
        Wait::Until(t) => core_::Wait::Until(core_::Instant::from_nanos(t)),
        Wait::Forever => core_::Wait::Forever,
    }
}

/// Rebuilds a reply from its pre-order nodes; a malformed list is a malformed reply.
fn value(nodes: &[RedisNode]) -> core_::Reply {
    fn one(nodes: &mut std::slice::Iter<'_, RedisNode>) -> Option<Value> {
        Some(match nodes.next()? {
            RedisNode::Nil => Value::Nil,
            RedisNode::Int(i) => Value::Int(*i),
            RedisNode::Data(d) => Value::Data(d.clone()),
            RedisNode::Status(s) => Value::Status(s.clone()),
            RedisNode::Array(n) => {
                Value::Array((0..*n).map(|_| one(nodes)).collect::<Option<_>>()?)
            }
        })
    }
    let mut iter = nodes.iter();
    let v = match (one(&mut iter), iter.next()) {
        (Some(v), None) => v,
        // Handed to the engine as a value it will reject as malformed.
        _ => Value::Status(format!("malformed node list of {} nodes", nodes.len())),
    };
    Ok(core_::Response::Redis(v))
}

fn core_script(s: Script) -> CoreScript {
    match s {
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
    }
}

fn op(op: core_::Op) -> Op {
    match op {
        core_::Op::Redis(op) => Op::Redis(redis_op(op)),
        core_::Op::Redlock { node, op } => Op::Redlock(NodeOp {
            node,
            op: redis_op(op),
        }),
        core_::Op::Zk(op) => Op::Zk(match op {
            CoreZkOp::CreateParents { path } => ZkOp::CreateParents(path),
            CoreZkOp::CreateSequential { prefix } => ZkOp::CreateSequential(prefix),
            CoreZkOp::Delete { path } => ZkOp::Delete(path),
            CoreZkOp::Children { path } => ZkOp::Children(path),
            CoreZkOp::Watch { path } => ZkOp::Watch(path),
            CoreZkOp::Exists { path } => ZkOp::Exists(path),
        }),
    }
}

fn redis_op(op: RedisOp) -> WitOp {
    match op {
        RedisOp::Eval { script, keys, args } => WitOp::Eval(Eval {
            script: match script {
                CoreScript::Acquire => Script::Acquire,
                CoreScript::Release => Script::Release,
                CoreScript::Dequeue => Script::Dequeue,
                CoreScript::Extend => Script::Extend,
                CoreScript::Status => Script::Status,
                CoreScript::Raise => Script::Raise,
                CoreScript::PermitAcquire => Script::PermitAcquire,
                CoreScript::PermitRelease => Script::PermitRelease,
                CoreScript::PermitDequeue => Script::PermitDequeue,
                CoreScript::RwAcquire => Script::RwAcquire,
                CoreScript::RwRelease => Script::RwRelease,
                CoreScript::RwDequeue => Script::RwDequeue,
                CoreScript::FencedWrite => Script::FencedWrite,
            },
            keys,
            args,
        }),
        RedisOp::Subscribe { channel } => WitOp::Subscribe(channel),
    }
}

fn event(e: core_::Event) -> Event {
    match e {
        core_::Event::Acquired {
            op,
            hold,
            fencing_token,
            valid_until,
            count,
        } => Event::Acquired(Acquired {
            op: op.0,
            hold: hold.0,
            fencing_token,
            valid_until: valid_until.as_nanos(),
            count,
        }),
        core_::Event::AcquiredMulti {
            op,
            hold,
            members,
            valid_until,
        } => Event::AcquiredMulti(AcquiredMulti {
            op: op.0,
            hold: hold.0,
            members: members
                .into_iter()
                .map(|m| Member {
                    name: m.name,
                    fencing_token: m.fencing_token,
                })
                .collect(),
            valid_until: valid_until.as_nanos(),
        }),
        core_::Event::NotAcquired { op, reason } => Event::NotAcquired((
            op.0,
            match reason {
                core_::NotAcquired::Busy => NotAcquired::Busy,
                core_::NotAcquired::TimedOut => NotAcquired::TimedOut,
                core_::NotAcquired::Cancelled => NotAcquired::Cancelled,
            },
        )),
        core_::Event::Released { op, hold, count } => Event::Released(Released {
            op: op.0,
            hold: hold.0,
            count,
        }),
        core_::Event::Extended {
            op,
            hold,
            valid_until,
        } => Event::Extended(Extended {
            op: op.0,
            hold: hold.0,
            valid_until: valid_until.as_nanos(),
        }),
        core_::Event::Failed { op, error: e } => Event::Failed(Failed {
            op: op.0,
            error: error(e),
        }),
        core_::Event::Renewed { hold, valid_until } => Event::Renewed(Renewed {
            hold: hold.0,
            valid_until: valid_until.as_nanos(),
        }),
        core_::Event::Lost { hold, reason } => Event::Lost(Lost {
            hold: hold.0,
            reason: match reason {
                core_::LostReason::Expired => LostReason::Expired,
                core_::LostReason::NotOwner => LostReason::NotOwner,
                core_::LostReason::MaxHold => LostReason::MaxHold,
                core_::LostReason::Closed => LostReason::Closed,
                core_::LostReason::Disconnected => LostReason::Disconnected,
                core_::LostReason::SessionExpired => LostReason::SessionExpired,
            },
        }),
    }
}

fn error(e: core_::Error) -> Error {
    use core_::Error as E;
    match e {
        E::EmptyName => Error::EmptyName,
        E::NameTooLong { len } => Error::NameTooLong(u32::try_from(len).unwrap_or(u32::MAX)),
        E::InvalidLease { lease } => Error::InvalidLease(nanos(lease)),
        E::DuplicateOp { op } => Error::DuplicateOp(op.0),
        E::NotHeld { hold } => Error::NotHeld(hold.0),
        E::AlreadyWaiting { op } => Error::AlreadyWaiting(op.0),
        E::Closed => Error::Closed,
        E::Unavailable(why) => Error::Unavailable(why),
        E::Timeout => Error::Timeout,
        E::Backend(why) => Error::Backend(why),
        E::MalformedReply(why) => Error::MalformedReply(why),
        E::LockLost { hold } => Error::LockLost(hold.0),
        E::SessionExpired => Error::SessionExpired,
        E::InvalidConfig(why) => Error::InvalidConfig(why),
        E::InvalidArgument(why) => Error::InvalidArgument(why),
        other => Error::Backend(other.to_string()),
    }
}
