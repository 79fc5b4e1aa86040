//! The engine contract as JSON: the form in which Python's `dlock.Engine`, Node's `Engine`
//! and the test vectors (`tests/vectors/*.json`) pass [`Config`], [`Input`] and [`Output`].
//!
//! `docs/PROTOCOL.md` §11 is the reference. In short: every value is an object with a
//! `type` in kebab case; keys are snake case; instants (`now`, `valid_until`, `until`) are
//! integer nanoseconds on the host's monotonic clock; durations are integer milliseconds in
//! keys ending in `_ms`; the client id is 32 lowercase hex digits. A RESP reply is `null`,
//! an integer, a string (a bulk string in UTF-8), `{"hex": …}` (any other bulk string),
//! `{"status": …}` or an array of these.
//!
//! Decoding is strict: an unknown `type`, a missing or mistyped field, or a number out of
//! range is a [`JsonError`] naming the field, and nothing reaches the engine.

use core::fmt;
use core::fmt::Write as _;
use std::time::Duration;

use dlock_core::ZkSettings;
use dlock_core::redis::{RedisOp, Value};
use dlock_core::sql::{Dialect, Param, SqlOp, SqlSettings, SqlValue};
use dlock_core::zk::{ZkOp, ZkReply};
use dlock_core::{
    Acquire, AcquireMulti, ClientId, Command, Config, Error, Event, Histogram, HoldId, HoldInfo,
    Input, Instant, Kind, Leader, LockStats, LostReason, NotAcquired, Notice, Op, OpId, Output,
    Protocol, Reply, Response, Stats, TransportError, Wait,
};
use serde_json::{Map, Value as Json, json};

use crate::prometheus::{COUNTERS, GAUGES, count};

/// A JSON value that does not follow the engine contract: `at` names the offending field
/// (`input.lease_ms`), `why` says what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonError {
    pub at: String,
    pub why: String,
}

impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.at, self.why)
    }
}

impl std::error::Error for JsonError {}

type Result<T> = core::result::Result<T, JsonError>;

/// A field of a JSON object under decoding, with the path used in error messages.
struct Field<'a> {
    at: String,
    value: Option<&'a Json>,
}

impl<'a> Field<'a> {
    fn root(at: &str, value: &'a Json) -> Self {
        Self {
            at: at.to_owned(),
            value: Some(value),
        }
    }

    fn fail<T>(&self, why: impl Into<String>) -> Result<T> {
        Err(JsonError {
            at: self.at.clone(),
            why: why.into(),
        })
    }

    fn get(&self, key: &str) -> Field<'a> {
        Field {
            at: format!("{}.{key}", self.at),
            value: self.value.and_then(|v| v.get(key)),
        }
    }

    fn is_absent(&self) -> bool {
        matches!(self.value, None | Some(Json::Null))
    }

    fn required(&self) -> Result<&'a Json> {
        match self.value {
            Some(v) => Ok(v),
            None => self.fail("missing"),
        }
    }

    fn object(&self) -> Result<&'a Map<String, Json>> {
        match self.required()? {
            Json::Object(map) => Ok(map),
            _ => self.fail("expected an object"),
        }
    }

    fn kind(&self) -> Result<&'a str> {
        self.object()?;
        self.get("type").str()
    }

    fn str(&self) -> Result<&'a str> {
        match self.required()? {
            Json::String(s) => Ok(s),
            _ => self.fail("expected a string"),
        }
    }

    fn u64(&self) -> Result<u64> {
        match self.required()?.as_u64() {
            Some(n) => Ok(n),
            None => self.fail("expected a non-negative integer"),
        }
    }

    fn ms(&self) -> Result<Duration> {
        self.u64().map(Duration::from_millis)
    }

    fn instant(&self) -> Result<Instant> {
        self.u64().map(Instant::from_nanos)
    }

    fn bool(&self) -> Result<bool> {
        match self.required()? {
            Json::Bool(b) => Ok(*b),
            _ => self.fail("expected true or false"),
        }
    }

    fn array(&self) -> Result<&'a [Json]> {
        match self.required()? {
            Json::Array(items) => Ok(items),
            _ => self.fail("expected an array"),
        }
    }

    fn strings(&self) -> Result<Vec<String>> {
        let items = self.array()?;
        (0..items.len())
            .map(|i| self.index(i).str().map(str::to_owned))
            .collect()
    }

    fn index(&self, i: usize) -> Field<'a> {
        Field {
            at: format!("{}[{i}]", self.at),
            value: self.value.and_then(|v| v.get(i)),
        }
    }

    fn bytes(&self) -> Result<Vec<u8>> {
        match self.required()? {
            Json::String(s) => Ok(s.clone().into_bytes()),
            Json::Object(_) => unhex(&self.get("hex")),
            _ => self.fail("expected a string or {\"hex\": …}"),
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

fn unhex(field: &Field<'_>) -> Result<Vec<u8>> {
    let text = field.str()?;
    if text.len() % 2 != 0 {
        return field.fail("odd number of hex digits");
    }
    (0..text.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(text.get(i..i + 2).unwrap_or("x"), 16)
                .or_else(|_| field.fail("not hex"))
        })
        .collect()
}

fn ms(d: Duration) -> Json {
    json!(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Bytes as a JSON string when they are UTF-8, `{"hex": …}` otherwise.
fn bytes(data: &[u8]) -> Json {
    match core::str::from_utf8(data) {
        Ok(text) => json!(text),
        Err(_) => json!({ "hex": hex(data) }),
    }
}

/// The engine configuration from JSON; absent fields take [`Config::new`]'s defaults, the
/// protocol defaults to Redis, and an absent `client_id` is drawn from the OS's CSPRNG.
pub fn config_from_json(value: &Json) -> Result<Config> {
    let f = Field::root("config", value);
    f.object()?;
    let id = f.get("client_id");
    let client_id = if id.is_absent() {
        crate::client::random_client_id().or_else(|e| id.fail(e.to_string()))?
    } else {
        let text = id.str()?;
        match u128::from_str_radix(text, 16) {
            Ok(n) if text.len() == 32 && !text.starts_with('+') => ClientId(n),
            _ => return id.fail("expected 32 hex digits"),
        }
    };
    let mut config = Config::new(client_id);
    let field = f.get("waiter_lease_ms");
    if !field.is_absent() {
        config.waiter_lease = field.ms()?;
    }
    let field = f.get("request_timeout_ms");
    if !field.is_absent() {
        config.request_timeout = field.ms()?;
    }
    let field = f.get("max_batch");
    if !field.is_absent() {
        config.max_batch = usize::try_from(field.u64()?).unwrap_or(usize::MAX);
    }
    let field = f.get("lock_delay_ms");
    if !field.is_absent() {
        config.lock_delay = field.ms()?;
    }
    let p = f.get("protocol");
    if !p.is_absent() {
        config.protocol = match p.kind()? {
            "redis" => Protocol::Redis,
            "redisson" => Protocol::Redisson,
            "zookeeper" => {
                let mut zk = ZkSettings::new(p.get("session_timeout_ms").ms()?);
                let root = p.get("root");
                if !root.is_absent() {
                    root.str()?.clone_into(&mut zk.root);
                }
                Protocol::ZooKeeper(zk)
            }
            "redlock" => {
                let nodes = p.get("nodes");
                match u32::try_from(nodes.u64()?) {
                    Ok(n) if (1..=dlock_core::redlock::MAX_NODES).contains(&n) => {
                        Protocol::Redlock { nodes: n }
                    }
                    _ => {
                        let max = dlock_core::redlock::MAX_NODES;
                        return nodes.fail(format!("expected 1 to {max} nodes"));
                    }
                }
            }
            "sql" => {
                let dialect = p.get("dialect");
                let Some(d) = Dialect::parse(dialect.str()?) else {
                    return dialect.fail("expected postgres or mysql");
                };
                let mut sql = SqlSettings::new(d);
                let prefix = p.get("table_prefix");
                if !prefix.is_absent() {
                    prefix.str()?.clone_into(&mut sql.table_prefix);
                }
                let poll = p.get("poll_interval_ms");
                if !poll.is_absent() {
                    sql.poll_interval = poll.ms()?;
                }
                Protocol::Sql(sql)
            }
            other => return p.get("type").fail(format!("unknown protocol {other:?}")),
        };
    }
    Ok(config)
}

pub fn config_to_json(config: &Config) -> Json {
    let protocol = match &config.protocol {
        Protocol::Redis => json!({ "type": "redis" }),
        Protocol::Redisson => json!({ "type": "redisson" }),
        Protocol::ZooKeeper(zk) => json!({
            "type": "zookeeper",
            "root": zk.root,
            "session_timeout_ms": ms(zk.session_timeout),
        }),
        Protocol::Redlock { nodes } => json!({ "type": "redlock", "nodes": nodes }),
        Protocol::Sql(sql) => json!({
            "type": "sql",
            "dialect": sql.dialect.name(),
            "table_prefix": sql.table_prefix,
            "poll_interval_ms": ms(sql.poll_interval),
        }),
    };
    json!({
        "client_id": format!("{:032x}", config.client_id.0),
        "waiter_lease_ms": ms(config.waiter_lease),
        "request_timeout_ms": ms(config.request_timeout),
        "max_batch": config.max_batch,
        "lock_delay_ms": ms(config.lock_delay),
        "protocol": protocol,
    })
}

/// One engine input from JSON: a command, a reply or a notice.
pub fn input_from_json(value: &Json) -> Result<Input> {
    let f = Field::root("input", value);
    let op = || f.get("op").u64().map(OpId);
    let hold = || f.get("hold").u64().map(HoldId);
    let wait = || {
        let w = f.get("wait");
        match w.required()? {
            Json::String(s) if s == "no" => Ok(Wait::No),
            Json::String(s) if s == "forever" => Ok(Wait::Forever),
            Json::Object(_) => Ok(Wait::Until(w.get("until").instant()?)),
            _ => w.fail("expected \"no\", \"forever\" or {\"until\": ns}"),
        }
    };
    let max_hold = || {
        let max_hold = f.get("max_hold_ms");
        if max_hold.is_absent() {
            Ok(None)
        } else {
            max_hold.ms().map(Some)
        }
    };
    Ok(match f.kind()? {
        "acquire" => Input::Command(Command::Acquire(Acquire {
            op: op()?,
            name: f.get("name").str()?.to_owned(),
            owner: f.get("owner").u64()?,
            lease: f.get("lease_ms").ms()?,
            wait: wait()?,
            max_hold: max_hold()?,
            fair: {
                let fair = f.get("fair");
                fair.is_absent() || fair.bool()?
            },
            kind: {
                let (permits, rw) = (f.get("permits"), f.get("rw"));
                match (permits.is_absent(), rw.is_absent()) {
                    (true, true) => Kind::Mutex,
                    (false, true) => Kind::Semaphore {
                        permits: u32::try_from(permits.u64()?)
                            .or_else(|_| permits.fail("expected a u32"))?,
                    },
                    (true, false) => match rw.str()? {
                        "read" => Kind::Read,
                        "write" => Kind::Write,
                        _ => rw.fail("expected \"read\" or \"write\"")?,
                    },
                    (false, false) => rw.fail("a semaphore's acquire takes no rw")?,
                }
            },
        })),
        "acquire-multi" => Input::Command(Command::AcquireMulti(AcquireMulti {
            op: op()?,
            names: f.get("names").strings()?,
            lease: f.get("lease_ms").ms()?,
            wait: wait()?,
            max_hold: max_hold()?,
        })),
        "release" => Input::Command(Command::Release {
            op: op()?,
            hold: hold()?,
        }),
        "extend" => Input::Command(Command::Extend {
            op: op()?,
            hold: hold()?,
            lease: f.get("lease_ms").ms()?,
        }),
        "cancel" => Input::Command(Command::Cancel { op: op()? }),
        "proclaim" => Input::Command(Command::Proclaim {
            op: op()?,
            hold: hold()?,
            value: f.get("value").str()?.to_owned(),
        }),
        "observe" => Input::Command(Command::Observe {
            op: op()?,
            name: f.get("name").str()?.to_owned(),
        }),
        "reply" => Input::Reply {
            id: dlock_core::RequestId(f.get("id").u64()?),
            reply: reply_from_json(&f)?,
        },
        "connected" => Input::Notice(Notice::Connected),
        "disconnected" => Input::Notice(Notice::Disconnected),
        "message" => Input::Notice(Notice::Message {
            channel: f.get("channel").str()?.to_owned(),
            payload: f.get("payload").bytes()?,
        }),
        "watch" => Input::Notice(Notice::Watch {
            path: f.get("path").str()?.to_owned(),
        }),
        "session-expired" => Input::Notice(Notice::SessionExpired),
        "closed" => Input::Notice(Notice::Closed),
        other => return f.get("type").fail(format!("unknown input {other:?}")),
    })
}

fn reply_from_json(f: &Field<'_>) -> Result<Reply> {
    let (value, zk, sql, error) = (f.get("value"), f.get("zk"), f.get("sql"), f.get("error"));
    let given = [&value, &zk, &sql, &error]
        .iter()
        .filter(|x| x.value.is_some())
        .count();
    if given != 1 {
        return f
            .fail("a reply has exactly one of \"value\" (Redis), \"zk\", \"sql\" or \"error\"");
    }
    if let Some(Json::Array(items)) = sql.value {
        let value = |i: usize| {
            let item = sql.index(i);
            Ok(match item.required()? {
                Json::Null => SqlValue::Null,
                Json::Number(n) => match n.as_i64() {
                    Some(n) => SqlValue::Int(n),
                    None => return item.fail("expected a 64-bit integer"),
                },
                Json::String(s) => SqlValue::Text(s.clone()),
                _ => return item.fail("expected null, an integer or a string"),
            })
        };
        let values = (0..items.len()).map(value).collect::<Result<_>>()?;
        return Ok(Ok(Response::Sql(values)));
    }
    if sql.value.is_some() {
        return sql.fail("expected an array");
    }
    if value.value.is_some() {
        return Ok(Ok(Response::Redis(resp_from_json(&value)?)));
    }
    if zk.value.is_some() {
        return Ok(Ok(Response::Zk(match zk.kind()? {
            "done" => ZkReply::Done,
            "created" => ZkReply::Created(zk.get("path").str()?.to_owned()),
            "children" => ZkReply::Children(zk.get("names").strings()?),
            "no-node" => ZkReply::NoNode,
            "node-exists" => ZkReply::NodeExists,
            "data" => ZkReply::Data(zk.get("data").str()?.to_owned()),
            other => {
                return zk
                    .get("type")
                    .fail(format!("unknown ZooKeeper reply {other:?}"));
            }
        })));
    }
    let message = error.get("message").str()?.to_owned();
    Ok(Err(match error.kind()? {
        "unavailable" => TransportError::Unavailable(message),
        "server" => TransportError::Server(message),
        other => {
            return error
                .get("type")
                .fail(format!("unknown transport error {other:?}"));
        }
    }))
}

fn resp_from_json(f: &Field<'_>) -> Result<Value> {
    Ok(match f.required()? {
        Json::Null => Value::Nil,
        Json::Number(n) => match n.as_i64() {
            Some(n) => Value::Int(n),
            None => return f.fail("expected a 64-bit integer"),
        },
        Json::String(s) => Value::Data(s.clone().into_bytes()),
        Json::Array(items) => Value::Array(
            (0..items.len())
                .map(|i| resp_from_json(&f.index(i)))
                .collect::<Result<_>>()?,
        ),
        Json::Object(map) if map.contains_key("status") => {
            Value::Status(f.get("status").str()?.to_owned())
        }
        Json::Object(_) => Value::Data(f.bytes()?),
        Json::Bool(_) => return f.fail("RESP has no booleans"),
    })
}

fn resp_to_json(value: &Value) -> Json {
    match value {
        Value::Nil => Json::Null,
        Value::Int(n) => json!(n),
        Value::Data(data) => bytes(data),
        Value::Status(s) => json!({ "status": s }),
        Value::Array(items) => Json::Array(items.iter().map(resp_to_json).collect()),
    }
}

fn reply_to_json(reply: &Reply) -> (&'static str, Json) {
    match reply {
        Ok(Response::Redis(value)) => ("value", resp_to_json(value)),
        Ok(Response::Zk(ZkReply::Done)) => ("zk", json!({ "type": "done" })),
        Ok(Response::Zk(ZkReply::Created(path))) => {
            ("zk", json!({ "type": "created", "path": path }))
        }
        Ok(Response::Zk(ZkReply::Children(names))) => {
            ("zk", json!({ "type": "children", "names": names }))
        }
        Ok(Response::Zk(ZkReply::NoNode)) => ("zk", json!({ "type": "no-node" })),
        Ok(Response::Zk(ZkReply::NodeExists)) => ("zk", json!({ "type": "node-exists" })),
        Ok(Response::Zk(ZkReply::Data(data))) => ("zk", json!({ "type": "data", "data": data })),
        Ok(Response::Sql(values)) => (
            "sql",
            Json::Array(
                values
                    .iter()
                    .map(|v| match v {
                        SqlValue::Null => Json::Null,
                        SqlValue::Int(n) => json!(n),
                        SqlValue::Text(s) => json!(s),
                    })
                    .collect(),
            ),
        ),
        Err(TransportError::Unavailable(m)) => {
            ("error", json!({ "type": "unavailable", "message": m }))
        }
        Err(TransportError::Server(m)) => ("error", json!({ "type": "server", "message": m })),
        // TransportError is non-exhaustive; a new kind gets its name here first.
        Err(e) => (
            "error",
            json!({ "type": "unavailable", "message": format!("{e:?}") }),
        ),
    }
}

/// The JSON form of an input (what [`input_from_json`] reads back).
pub fn input_to_json(input: &Input) -> Json {
    let wait = |wait: &Wait| match wait {
        Wait::No => json!("no"),
        Wait::Forever => json!("forever"),
        Wait::Until(t) => json!({ "until": t.as_nanos() }),
    };
    match input {
        Input::Command(Command::Acquire(a)) => {
            let mut json = json!({
                "type": "acquire",
                "op": a.op.0,
                "name": a.name,
                "owner": a.owner,
                "lease_ms": ms(a.lease),
                "wait": wait(&a.wait),
                "max_hold_ms": a.max_hold.map(ms),
            });
            // Fair is the default; only a non-fair acquire says so.
            if !a.fair {
                json["fair"] = json!(false);
            }
            // A lock is the default; a semaphore's acquire gives its number of permits, a
            // read-write lock's its mode.
            match a.kind {
                Kind::Mutex => {}
                Kind::Semaphore { permits } => json["permits"] = json!(permits),
                Kind::Read => json["rw"] = json!("read"),
                Kind::Write => json["rw"] = json!("write"),
            }
            json
        }
        Input::Command(Command::AcquireMulti(m)) => json!({
            "type": "acquire-multi",
            "op": m.op.0,
            "names": m.names,
            "lease_ms": ms(m.lease),
            "wait": wait(&m.wait),
            "max_hold_ms": m.max_hold.map(ms),
        }),
        Input::Command(Command::Release { op, hold }) => {
            json!({ "type": "release", "op": op.0, "hold": hold.0 })
        }
        Input::Command(Command::Extend { op, hold, lease }) => {
            json!({ "type": "extend", "op": op.0, "hold": hold.0, "lease_ms": ms(*lease) })
        }
        Input::Command(Command::Cancel { op }) => json!({ "type": "cancel", "op": op.0 }),
        Input::Command(Command::Proclaim { op, hold, value }) => {
            json!({ "type": "proclaim", "op": op.0, "hold": hold.0, "value": value })
        }
        Input::Command(Command::Observe { op, name }) => {
            json!({ "type": "observe", "op": op.0, "name": name })
        }
        Input::Reply { id, reply } => {
            let (key, value) = reply_to_json(reply);
            let mut map = Map::new();
            map.insert("type".into(), json!("reply"));
            map.insert("id".into(), json!(id.0));
            map.insert(key.into(), value);
            Json::Object(map)
        }
        Input::Notice(Notice::Connected) => json!({ "type": "connected" }),
        Input::Notice(Notice::Disconnected) => json!({ "type": "disconnected" }),
        Input::Notice(Notice::Message { channel, payload }) => {
            json!({ "type": "message", "channel": channel, "payload": bytes(payload) })
        }
        Input::Notice(Notice::Watch { path }) => json!({ "type": "watch", "path": path }),
        Input::Notice(Notice::SessionExpired) => json!({ "type": "session-expired" }),
        Input::Notice(Notice::Closed) => json!({ "type": "closed" }),
    }
}

/// A backend operation as JSON: `eval` (script name, keys, args), `subscribe`, or one of the
/// ZooKeeper operations (`create-parents`, `create-sequential`, `create-ephemeral`, `delete`,
/// `children`, `watch`, `exists`, `set-data`, `get-data`, `watch-children`), or a SQL `query` (statement name, SQL text, parameters) or `listen`. A
/// Redlock operation is its Redis operation with the `node` it goes to.
pub fn op_to_json(op: &Op) -> Json {
    match op {
        Op::Redlock { node, op } => {
            let mut json = op_to_json(&Op::Redis(op.clone()));
            json["node"] = json!(node);
            json
        }
        Op::Redis(RedisOp::Eval { script, keys, args }) => {
            json!({ "type": "eval", "script": script.name(), "keys": keys.to_vec(), "args": args.to_vec() })
        }
        Op::Redis(RedisOp::Subscribe { channel }) => {
            json!({ "type": "subscribe", "channel": channel })
        }
        Op::Zk(ZkOp::CreateParents { path }) => json!({ "type": "create-parents", "path": path }),
        Op::Zk(ZkOp::CreateSequential { prefix }) => {
            json!({ "type": "create-sequential", "prefix": prefix })
        }
        Op::Zk(ZkOp::CreateEphemeral { path }) => {
            json!({ "type": "create-ephemeral", "path": path })
        }
        Op::Zk(ZkOp::Delete { path }) => json!({ "type": "delete", "path": path }),
        Op::Zk(ZkOp::Children { path }) => json!({ "type": "children", "path": path }),
        Op::Zk(ZkOp::Watch { path }) => json!({ "type": "watch", "path": path }),
        Op::Zk(ZkOp::Exists { path }) => json!({ "type": "exists", "path": path }),
        Op::Zk(ZkOp::SetData { path, data }) => {
            json!({ "type": "set-data", "path": path, "data": data })
        }
        Op::Zk(ZkOp::GetData { path, watch }) => {
            json!({ "type": "get-data", "path": path, "watch": watch })
        }
        Op::Zk(ZkOp::WatchChildren { path }) => {
            json!({ "type": "watch-children", "path": path })
        }
        Op::Sql(SqlOp::Query {
            statement,
            sql,
            params,
        }) => {
            let params: Vec<Json> = params
                .iter()
                .map(|p| match p {
                    Param::Text(s) => json!(s),
                    Param::Int(n) => json!(n),
                    Param::TextList(items) => json!(items),
                    Param::IntList(items) => json!(items),
                })
                .collect();
            json!({ "type": "query", "statement": statement.name(), "sql": sql, "params": params })
        }
        Op::Sql(SqlOp::Listen { channel }) => json!({ "type": "listen", "channel": channel }),
    }
}

/// An error's stable kind: `empty-name`, `name-too-long`, `invalid-lease`, `duplicate-op`,
/// `not-held`, `already-waiting`, `closed`, `invalid-config`, `invalid-argument`,
/// `unavailable`, `timeout`,
/// `backend`, `malformed-reply`, `lock-lost`, `session-expired`.
pub fn error_kind(error: &Error) -> &'static str {
    match error {
        Error::EmptyName => "empty-name",
        Error::NameTooLong { .. } => "name-too-long",
        Error::InvalidLease { .. } => "invalid-lease",
        Error::DuplicateOp { .. } => "duplicate-op",
        Error::NotHeld { .. } => "not-held",
        Error::AlreadyWaiting { .. } => "already-waiting",
        Error::Closed => "closed",
        Error::InvalidConfig(_) => "invalid-config",
        Error::InvalidArgument(_) => "invalid-argument",
        Error::Unavailable(_) => "unavailable",
        Error::Timeout => "timeout",
        Error::Backend(_) => "backend",
        Error::MalformedReply(_) => "malformed-reply",
        Error::LockLost { .. } => "lock-lost",
        Error::SessionExpired => "session-expired",
        // Error is non-exhaustive; a new variant gets its name above.
        _ => "error",
    }
}

/// An error as `{"type": kind, "message": …, "misuse": bool}`.
pub fn error_to_json(error: &Error) -> Json {
    json!({
        "type": error_kind(error),
        "message": error.to_string(),
        "misuse": error.is_misuse(),
    })
}

fn not_acquired(reason: NotAcquired) -> &'static str {
    match reason {
        NotAcquired::Busy => "busy",
        NotAcquired::TimedOut => "timed-out",
        NotAcquired::Cancelled => "cancelled",
    }
}

/// One engine output as JSON: `request` (with `id` and `op`) or one of the events.
pub fn output_to_json(output: &Output) -> Json {
    match output {
        Output::Request(r) => json!({ "type": "request", "id": r.id.0, "op": op_to_json(&r.op) }),
        Output::Event(e) => event_to_json(e),
    }
}

fn event_to_json(event: &Event) -> Json {
    match event {
        Event::Acquired {
            op,
            hold,
            fencing_token,
            valid_until,
            count,
        } => json!({
            "type": "acquired",
            "op": op.0,
            "hold": hold.0,
            "fencing_token": fencing_token,
            "valid_until": valid_until.as_nanos(),
            "count": count,
        }),
        Event::AcquiredMulti {
            op,
            hold,
            members,
            valid_until,
        } => json!({
            "type": "acquired-multi",
            "op": op.0,
            "hold": hold.0,
            "members": members
                .iter()
                .map(|m| json!({ "name": m.name, "fencing_token": m.fencing_token }))
                .collect::<Vec<_>>(),
            "valid_until": valid_until.as_nanos(),
        }),
        Event::NotAcquired { op, reason } => {
            json!({ "type": "not-acquired", "op": op.0, "reason": not_acquired(*reason) })
        }
        Event::Released { op, hold, count } => {
            json!({ "type": "released", "op": op.0, "hold": hold.0, "count": count })
        }
        Event::Extended {
            op,
            hold,
            valid_until,
        } => json!({
            "type": "extended",
            "op": op.0,
            "hold": hold.0,
            "valid_until": valid_until.as_nanos(),
        }),
        Event::Failed { op, error } => {
            json!({ "type": "failed", "op": op.0, "error": error_to_json(error) })
        }
        Event::Renewed { hold, valid_until } => json!({
            "type": "renewed",
            "hold": hold.0,
            "valid_until": valid_until.as_nanos(),
        }),
        Event::Lost { hold, reason } => {
            json!({ "type": "lost", "hold": hold.0, "reason": reason.as_str() })
        }
        Event::Proclaimed { op, hold, term } => {
            json!({ "type": "proclaimed", "op": op.0, "hold": hold.0, "term": term })
        }
        Event::Leader { op, leader } => json!({
            "type": "leader",
            "op": op.0,
            "leader": leader.as_ref().map(leader_to_json),
        }),
    }
}

/// An election's leader as `{"term": …, "value": …}`.
pub fn leader_to_json(leader: &Leader) -> Json {
    json!({ "term": leader.term, "value": leader.value })
}

/// A held lock's snapshot as JSON.
pub fn hold_to_json(info: &HoldInfo) -> Json {
    json!({
        "name": info.name,
        "owner": info.owner,
        "fencing_token": info.fencing_token,
        "count": info.count,
        "lease_ms": ms(info.lease),
        "valid_until": info.valid_until.as_nanos(),
    })
}

/// What an engine counted ([`Stats`]) as JSON: `{"locks": [...]}`, one object per lock name and
/// kind with its counts, `lost` per reason (`{"expired": …, "not-owner": …}`), the holds and
/// waiters of now, and the `wait` and `hold` histograms in seconds, their buckets cumulative
/// as Prometheus keeps them: `[["0.001", n], …, ["+Inf", count]]`.
pub fn stats_to_json(stats: &Stats) -> Json {
    let locks: Vec<Json> = stats.locks.iter().map(lock_stats_to_json).collect();
    json!({ "locks": locks })
}

fn lock_stats_to_json(s: &LockStats) -> Json {
    let lost: Map<String, Json> = LostReason::ALL
        .iter()
        .map(|r| (r.as_str().to_owned(), json!(s.lost(r))))
        .collect();
    let mut json = json!({
        "name": s.name,
        "kind": s.kind.as_str(),
        "lost": lost,
        "wait": histogram_to_json(&s.wait),
        "hold": histogram_to_json(&s.hold),
    });
    let fields = COUNTERS.iter().chain(&GAUGES).map(|(field, _, _)| *field);
    for field in fields {
        json[field] = json!(count(s, field));
    }
    if let Kind::Semaphore { permits } = s.kind {
        json["permits"] = json!(permits);
    }
    json
}

fn histogram_to_json(h: &Histogram) -> Json {
    let buckets: Vec<Json> = h
        .cumulative()
        .map(|(bound, total)| json!([crate::prometheus::le(bound), total]))
        .collect();
    json!({
        "count": h.count,
        "sum_seconds": h.sum.as_secs_f64(),
        "max_seconds": h.max.as_secs_f64(),
        "buckets": buckets,
    })
}

/// dlock-core's [`Engine`](dlock_core::Engine) with JSON in and out: what Python's
/// `dlock.Engine` and Node's `Engine` wrap, for hosts that bring their own I/O.
#[derive(Debug)]
pub struct JsonEngine {
    engine: dlock_core::Engine,
}

impl JsonEngine {
    /// A new engine at `now` (nanoseconds) from a JSON configuration.
    pub fn new(config: &Json, now: u64) -> Result<Self> {
        let config = config_from_json(config)?;
        let engine =
            dlock_core::Engine::new(config, Instant::from_nanos(now)).map_err(|e| JsonError {
                at: "config".into(),
                why: e.to_string(),
            })?;
        Ok(Self { engine })
    }

    /// The configuration in effect, with defaults filled in.
    pub fn config(&self) -> Json {
        config_to_json(self.engine.config())
    }

    /// Feeds one JSON input; a malformed one is refused and the engine is untouched.
    pub fn handle_input(&mut self, now: u64, input: &Json) -> Result<()> {
        let input = input_from_json(input)?;
        self.engine.handle_input(Instant::from_nanos(now), input);
        Ok(())
    }

    pub fn handle_timeout(&mut self, now: u64) {
        self.engine.handle_timeout(Instant::from_nanos(now));
    }

    pub fn poll_output(&mut self) -> Option<Json> {
        self.engine.poll_output().as_ref().map(output_to_json)
    }

    /// Nanoseconds.
    pub fn poll_timeout(&self) -> Option<u64> {
        self.engine.poll_timeout().map(Instant::as_nanos)
    }

    /// The pub/sub channel on which this engine's Redis waiters are woken.
    pub fn wake_channel(&self) -> String {
        self.engine.wake_channel()
    }

    pub fn hold(&self, hold: u64) -> Option<Json> {
        self.engine.hold(HoldId(hold)).as_ref().map(hold_to_json)
    }

    /// What the engine counted ([`stats_to_json`]).
    pub fn stats(&self) -> Json {
        stats_to_json(&self.engine.stats())
    }
}

/// The Lua source of a protocol script by name (`acquire`, `release`, `dequeue`, `extend`,
/// `status`), for hosts that run `eval` requests themselves: `EVALSHA` of its SHA-1, or
/// `EVAL` of the source.
pub fn script_source(name: &str) -> Option<String> {
    dlock_core::redis::Script::ALL
        .into_iter()
        .find(|s| s.name() == name)
        .map(dlock_core::redis::Script::source)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(input: Input) {
        let json = input_to_json(&input);
        assert_eq!(input_from_json(&json), Ok(input), "{json}");
    }

    #[test]
    fn inputs_round_trip() {
        roundtrip(Input::Command(Command::Acquire(Acquire {
            op: OpId(1),
            name: "a/b".into(),
            owner: 7,
            lease: Duration::from_millis(1500),
            wait: Wait::Until(Instant::from_nanos(9)),
            max_hold: Some(Duration::from_secs(3)),
            fair: false,
            kind: Kind::Semaphore { permits: 3 },
        })));
        for kind in [Kind::Read, Kind::Write] {
            roundtrip(Input::Command(Command::Acquire(Acquire {
                op: OpId(3),
                name: "doc".into(),
                owner: 1,
                lease: Duration::from_secs(1),
                wait: Wait::No,
                max_hold: None,
                fair: true,
                kind,
            })));
        }
        roundtrip(Input::Command(Command::AcquireMulti(AcquireMulti {
            op: OpId(2),
            names: vec!["b".into(), "a".into()],
            lease: Duration::from_millis(1500),
            wait: Wait::Forever,
            max_hold: None,
        })));
        roundtrip(Input::Reply {
            id: dlock_core::RequestId(4),
            reply: Ok(Response::Redis(Value::Array(vec![
                Value::Nil,
                Value::Int(-3),
                Value::Data(b"tok".to_vec()),
                Value::Data(vec![0xff, 0x00]),
                Value::Status("OK".into()),
            ]))),
        });
        roundtrip(Input::Reply {
            id: dlock_core::RequestId(5),
            reply: Ok(Response::Zk(ZkReply::Children(vec!["x".into()]))),
        });
        roundtrip(Input::Reply {
            id: dlock_core::RequestId(5),
            reply: Ok(Response::Zk(ZkReply::NodeExists)),
        });
        roundtrip(Input::Reply {
            id: dlock_core::RequestId(6),
            reply: Err(TransportError::Server("ERR".into())),
        });
        roundtrip(Input::Notice(Notice::Message {
            channel: "c".into(),
            payload: vec![0xc3],
        }));
        roundtrip(Input::Reply {
            id: dlock_core::RequestId(7),
            reply: Ok(Response::Sql(vec![
                SqlValue::Int(2),
                SqlValue::Null,
                SqlValue::Text("c1-1 c2-1".into()),
            ])),
        });
    }

    #[test]
    fn bad_json_names_the_field() {
        let err = |v: Json| input_from_json(&v).unwrap_err().to_string();
        assert_eq!(
            err(
                json!({"type": "acquire", "op": 1, "name": "a", "owner": 1, "lease_ms": -5, "wait": "no"})
            ),
            "input.lease_ms: expected a non-negative integer"
        );
        assert_eq!(
            err(json!({"type": "nope"})),
            "input.type: unknown input \"nope\""
        );
        assert_eq!(err(json!([1])), "input: expected an object");
        assert_eq!(
            err(json!({"type": "reply", "id": 1})),
            "input: a reply has exactly one of \"value\" (Redis), \"zk\", \"sql\" or \"error\""
        );
        assert_eq!(
            err(json!({"type": "reply", "id": 1, "sql": [1, true]})),
            "input.sql[1]: expected null, an integer or a string"
        );
        assert_eq!(
            err(json!({"type": "reply", "id": 1, "value": {"hex": "f"}})),
            "input.value.hex: odd number of hex digits"
        );
        let config = config_from_json(&json!({"client_id": "12"})).unwrap_err();
        assert_eq!(
            config.to_string(),
            "config.client_id: expected 32 hex digits"
        );
    }
}
