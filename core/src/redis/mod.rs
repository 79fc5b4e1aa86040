//! The Redis protocol, v1: key layout, owner tokens, Lua scripts and their replies.
//!
//! Everything a host needs to speak the protocol byte for byte lives here; transports run
//! [`RedisOp`]s verbatim. `docs/PROTOCOL.md` describes the same thing for other implementers.

pub(crate) mod machine;
pub mod reference;
pub mod words;

pub use words::Words;

use core::time::Duration;

use std::borrow::Cow;
use std::hash::Hasher;

use crate::error::Error;
use crate::fnv::Fnv;
use crate::ids::ClientId;
use crate::plant::{self, Plant};
use crate::status::LockStatus;
use crate::types::Leader;

/// Version of the key layout and scripts in this module.
pub const PROTOCOL_VERSION: u32 = 1;

const PRELUDE: &str = include_str!("lua/prelude.lua");
/// The holders' helper of the permit and read-write lock scripts, after [`PRELUDE`].
const HOLDERS: &str = include_str!("lua/holders.lua");
/// Helpers of the permit scripts, after [`HOLDERS`].
const PERMITS: &str = include_str!("lua/permits.lua");
/// Helpers of the read-write lock scripts, after [`HOLDERS`].
const RW: &str = include_str!("lua/rw.lua");

/// The protocol's scripts. Run with `FCALL` of their [`Library`] on Redis 7 and later, else
/// with `EVALSHA` (after `SCRIPT LOAD` on `NOSCRIPT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Script {
    Acquire,
    Release,
    Dequeue,
    Extend,
    /// Read only: who holds a lock, until when, and who waits.
    Status,
    /// Redlock: record a tenure's fencing token on one node (raise the node's counter to it).
    Raise,
    /// Semaphores: ACQUIRE, RELEASE and DEQUEUE of one permit.
    PermitAcquire,
    PermitRelease,
    PermitDequeue,
    /// Read-write locks: ACQUIRE, RELEASE and DEQUEUE of a read or write hold.
    RwAcquire,
    RwRelease,
    RwDequeue,
    /// For the resource a lock protects, not the lock: store a value only under a fencing
    /// token at least as new as every one stored before ([`fenced_write`]).
    FencedWrite,
    /// Sent once when a client connects: the commands the scripts run that the Redis user may
    /// not ([`acl_probe`]).
    AclProbe,
    /// The Redisson-compatible lock ([`crate::redisson`]): acquire, final release, batched
    /// renewal and status of a lock laid out as Redisson's `RLock` lays it out.
    RedissonAcquire,
    RedissonRelease,
    RedissonExtend,
    RedissonStatus,
    /// Elections (§20): the leader publishes its value, resigns (the final release that tells
    /// observers), and anyone reads who leads.
    Proclaim,
    Resign,
    Leader,
}

impl Script {
    pub const ALL: [Script; 21] = [
        Script::Acquire,
        Script::Release,
        Script::Dequeue,
        Script::Extend,
        Script::Status,
        Script::Raise,
        Script::PermitAcquire,
        Script::PermitRelease,
        Script::PermitDequeue,
        Script::RwAcquire,
        Script::RwRelease,
        Script::RwDequeue,
        Script::FencedWrite,
        Script::AclProbe,
        Script::RedissonAcquire,
        Script::RedissonRelease,
        Script::RedissonExtend,
        Script::RedissonStatus,
        Script::Proclaim,
        Script::Resign,
        Script::Leader,
    ];

    /// Whether it is one of the Redisson-compatible lock's scripts, which work on Redisson's
    /// keys rather than dlock's ([`crate::redisson::SCRIPT_COMMANDS`]).
    pub fn redisson(self) -> bool {
        matches!(
            self,
            Script::RedissonAcquire
                | Script::RedissonRelease
                | Script::RedissonExtend
                | Script::RedissonStatus
        )
    }

    /// The script's name in docs, vectors and logs.
    pub fn name(self) -> &'static str {
        match self {
            Script::Acquire => "acquire",
            Script::Release => "release",
            Script::Dequeue => "dequeue",
            Script::Extend => "extend",
            Script::Status => "status",
            Script::Raise => "raise",
            Script::PermitAcquire => "permit-acquire",
            Script::PermitRelease => "permit-release",
            Script::PermitDequeue => "permit-dequeue",
            Script::RwAcquire => "rw-acquire",
            Script::RwRelease => "rw-release",
            Script::RwDequeue => "rw-dequeue",
            Script::FencedWrite => "fenced-write",
            Script::AclProbe => "acl-probe",
            Script::RedissonAcquire => "redisson-acquire",
            Script::RedissonRelease => "redisson-release",
            Script::RedissonExtend => "redisson-extend",
            Script::RedissonStatus => "redisson-status",
            Script::Proclaim => "proclaim",
            Script::Resign => "resign",
            Script::Leader => "leader",
        }
    }

    /// The full Lua source of `EVALSHA`: the shared helpers its body calls, then the body.
    pub fn source(self) -> String {
        let source = with_helpers(self.helpers().to_vec(), self.body());
        if self == Script::Release {
            return planted(source);
        }
        source
    }

    /// The helper files its body may call, in order (the fenced write and the ACL probe,
    /// which touch no lock, call none).
    pub fn helpers(self) -> &'static [&'static str] {
        match self {
            Script::FencedWrite | Script::AclProbe => &[],
            Script::PermitAcquire | Script::PermitRelease | Script::PermitDequeue => {
                &[PRELUDE, HOLDERS, PERMITS]
            }
            Script::RwAcquire | Script::RwRelease | Script::RwDequeue => &[PRELUDE, HOLDERS, RW],
            _ => &[PRELUDE],
        }
    }

    /// The script's own text, after its [`Script::helpers`]: a function of the [`library`]
    /// runs it as its callback, with `KEYS` and `ARGV` its arguments.
    pub fn body(self) -> &'static str {
        match self {
            Script::FencedWrite => include_str!("lua/fenced_write.lua"),
            Script::AclProbe => include_str!("lua/acl_probe.lua"),
            Script::Acquire => include_str!("lua/acquire.lua"),
            Script::Release => include_str!("lua/release.lua"),
            Script::Dequeue => include_str!("lua/dequeue.lua"),
            Script::Extend => include_str!("lua/extend.lua"),
            Script::Status => include_str!("lua/status.lua"),
            Script::Raise => include_str!("lua/raise.lua"),
            Script::RedissonAcquire => include_str!("lua/redisson_acquire.lua"),
            Script::RedissonRelease => include_str!("lua/redisson_release.lua"),
            Script::RedissonExtend => include_str!("lua/redisson_extend.lua"),
            Script::RedissonStatus => include_str!("lua/redisson_status.lua"),
            Script::Proclaim => include_str!("lua/proclaim.lua"),
            Script::Resign => include_str!("lua/resign.lua"),
            Script::Leader => include_str!("lua/leader.lua"),
            Script::PermitAcquire => include_str!("lua/permit_acquire.lua"),
            Script::PermitRelease => include_str!("lua/permit_release.lua"),
            Script::PermitDequeue => include_str!("lua/permit_dequeue.lua"),
            Script::RwAcquire => include_str!("lua/rw_acquire.lua"),
            Script::RwRelease => include_str!("lua/rw_release.lua"),
            Script::RwDequeue => include_str!("lua/rw_dequeue.lua"),
        }
    }

    /// Whether its function may run on a server out of memory (`allow-oom`). A script that
    /// can create a tenure or a queue entry may not: as `EVALSHA` of it would fail at its
    /// first write there, `FCALL` of it fails before it starts. The others only read, free,
    /// hand on or stretch what exists, which `EVALSHA` of them does out of memory too.
    fn allow_oom(self) -> bool {
        !matches!(
            self,
            Script::Acquire
                | Script::PermitAcquire
                | Script::RwAcquire
                | Script::RedissonAcquire
                | Script::Proclaim
                | Script::Raise
                | Script::FencedWrite
        )
    }
}

/// `source` with the planted bug of a Lua script, if one is on (`just plants`).
fn planted(source: String) -> String {
    if !plant::on(Plant::ReleaseTokenMinusOne) {
        return source;
    }
    let wake = "wake(head, string.format('%.0f', grant(lock, head, fence, deadline - now_ms())))";
    let planted =
        "wake(head, string.format('%.0f', grant(lock, head, fence, deadline - now_ms()) - 1))";
    source.replace(wake, planted)
}

/// The protocol's scripts as one Redis function library, for `FCALL` (Redis 7 and later;
/// PROTOCOL.md §6). Each script's body is the callback of one function; the helpers are made
/// once when the library loads rather than on every call, which is most of what a function
/// saves over `EVALSHA`. The names carry a hash of the library's text, so that the libraries
/// of different dlock builds live side by side on one server, and `FUNCTION LOAD REPLACE`
/// under a name can only ever put back the same text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Library {
    /// `dlock_` and 16 hex digits.
    pub name: String,
    /// What `FUNCTION LOAD` takes: `#!lua name=<name>`, then the functions.
    pub source: String,
}

impl Library {
    /// The name of the function that runs `script`.
    pub fn function(&self, script: Script) -> String {
        format!("{}_{}", self.name, script.name().replace('-', "_"))
    }
}

/// Builds the [`Library`] (a host builds it once and keeps it).
pub fn library() -> Library {
    const NAME: &str = "@LIBRARY@";
    let mut text = String::from(
        "-- dlock protocol v1: every script as a function (PROTOCOL.md §6). The helpers are made\n\
         -- once, when the library loads; each function clears the time its helpers read once\n\
         -- per call.\n\n",
    );
    for helpers in [PRELUDE, HOLDERS, PERMITS, RW] {
        text.push_str(helpers.trim_end());
        text.push_str("\n\n");
    }
    for script in Script::ALL {
        let flags = if script.allow_oom() {
            "'allow-oom'"
        } else {
            ""
        };
        text.push_str(&format!(
            "redis.register_function{{function_name = '{NAME}_{}', flags = {{{flags}}}, callback = function(KEYS, ARGV)\n\
             clock, stamp = nil, nil\n{}end}}\n\n",
            script.name().replace('-', "_"),
            script.body(),
        ));
    }
    let text = planted(text);
    let mut hash = Fnv::default();
    hash.write(text.as_bytes());
    let name = format!("dlock_{:016x}", hash.finish());
    Library {
        source: format!("#!lua name={name}\n{}", text.replace(NAME, &name)),
        name,
    }
}

/// `body` after the helpers it calls, directly or through another helper, in the order
/// `files` define them (each file's blocks are separated by blank lines; a block that
/// defines no function, such as a file's header comment, is kept). A helper is a closure the
/// script makes every time it runs, so a script carries only those it can run.
fn with_helpers(files: Vec<&str>, body: &str) -> String {
    let blocks: Vec<&str> = files
        .iter()
        .flat_map(|f| f.split_terminator("\n\n"))
        .collect();
    fn defines(block: &str) -> Option<&str> {
        let (_, rest) = block.split_once("local function ")?;
        rest.split_once('(').map(|(name, _)| name)
    }
    let mut kept: Vec<bool> = blocks.iter().map(|b| defines(b).is_none()).collect();
    let mut callers = vec![body];
    while let Some(text) = callers.pop() {
        for (i, block) in blocks.iter().enumerate() {
            if !kept[i] && defines(block).is_some_and(|name| calls(text, name)) {
                kept[i] = true;
                callers.push(block);
            }
        }
    }
    let mut source = String::new();
    for (block, _) in blocks.iter().zip(&kept).filter(|(_, kept)| **kept) {
        source.push_str(block.trim_end_matches('\n'));
        source.push_str("\n\n");
    }
    source.push_str(body);
    source
}

/// Whether Lua `text` calls the function `name` (not a field of that name, as `math.floor`).
fn calls(text: &str, name: &str) -> bool {
    let call = format!("{name}(");
    text.match_indices(&call).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '.')
    })
}

/// The fenced write, for the resource a lock protects (not part of the lock protocol):
/// stores `value` in the hash `resource` (fields `value` and `fence`) only if `token` is at
/// least the highest token stored there before. Its reply is read by [`parse_fenced_write`].
pub fn fenced_write(resource: &str, token: u64, value: &str) -> RedisOp {
    RedisOp::Eval {
        script: Script::FencedWrite,
        keys: [resource].into(),
        args: [&token.to_string(), value].into(),
    }
}

/// The commands a client sends itself on Redis: scripts as functions (the library loaded on
/// "Function not found") or by SHA (loaded on `NOSCRIPT`), a PING when it connects, and the
/// wake-up channel's SUBSCRIBE (PROTOCOL.md §1, least privilege). Redis Cluster adds
/// `cluster|slots` to find the nodes. A user without `fcall` or `function|load` runs the
/// scripts by SHA.
pub const CLIENT_COMMANDS: &[&str] = &[
    "fcall",
    "function|load",
    "evalsha",
    "script|load",
    "ping",
    "subscribe",
];

/// The commands the protocol's scripts run: a Redis ACL applies inside scripts, so a user
/// needs each of them on the keys and channels under `dlock:` (the fenced write's resource
/// key is the caller's own, and needs its own key rule).
pub const SCRIPT_COMMANDS: &[&str] = &[
    "del", "exists", "get", "hdel", "hget", "hmget", "hset", "incr", "lindex", "lpop", "lrange",
    "lrem", "pexpire", "pttl", "publish", "rpush", "set", "time", "zadd", "zrange", "zrem",
    "zscore",
];

/// The least-privilege Redis ACL rules for a dlock client: every key and channel under
/// `dlock:`, and exactly [`CLIENT_COMMANDS`] and [`SCRIPT_COMMANDS`]:
/// `ACL SETUSER locker on >password <rules>`.
pub fn acl_rules() -> String {
    let commands = CLIENT_COMMANDS.iter().chain(SCRIPT_COMMANDS);
    let allowed: Vec<String> = commands.map(|c| format!("+{c}")).collect();
    format!(
        "resetkeys ~dlock:* resetchannels &dlock:* -@all {}",
        allowed.join(" ")
    )
}

/// The ACL probe a client sends once when it connects to Redis: which of
/// [`SCRIPT_COMMANDS`] its user may not run on a lock's keys or a wake-up channel. Read the
/// reply with [`parse_acl_probe`].
pub fn acl_probe() -> RedisOp {
    let mut args = Words::new();
    args.push(&wake_channel(ClientId(0)));
    for command in SCRIPT_COMMANDS {
        args.push(command);
    }
    RedisOp::Eval {
        script: Script::AclProbe,
        keys: [LockKeys::new("dlock-acl-probe").lock()].into(),
        args,
    }
}

/// The ACL probe's reply: `Ok` when the user may run every command the protocol needs, else
/// a backend error naming the commands refused and the rules to grant.
pub fn parse_acl_probe(reply: &Value) -> Result<(), Error> {
    let Value::Array(items) = reply else {
        return Err(Error::MalformedReply(format!(
            "ACL probe replied {reply:?}"
        )));
    };
    let refused: Vec<String> = items
        .iter()
        .map(|item| match item {
            Value::Data(name) => Ok(String::from_utf8_lossy(name).into_owned()),
            other => Err(Error::MalformedReply(format!(
                "ACL probe replied {other:?}"
            ))),
        })
        .collect::<Result<_, _>>()?;
    if refused.is_empty() {
        return Ok(());
    }
    Err(Error::Backend(format!(
        "the Redis user may not run {} on dlock's keys and channels (NOPERM); grant it: {} (PROTOCOL.md §7)",
        refused.join(", "),
        acl_rules()
    )))
}

/// What a fenced write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FencedWrite {
    /// The value is stored under this token.
    Written,
    /// Refused: the resource has already seen a newer token, `highest`. The writer's lock
    /// was lost (and taken by someone else) at some point; nothing was changed.
    Stale { highest: u64 },
}

/// The outcome of a [`fenced_write`] from its reply.
pub fn parse_fenced_write(reply: &Value) -> Result<FencedWrite, Error> {
    let bad = || Error::MalformedReply(format!("fenced write replied {reply:?}"));
    let Value::Array(items) = reply else {
        return Err(bad());
    };
    let token = |v: &Value| match v {
        Value::Data(d) => core::str::from_utf8(d)
            .ok()
            .and_then(|s| s.parse::<u64>().ok()),
        Value::Int(n) => u64::try_from(*n).ok(),
        _ => None,
    };
    match items.as_slice() {
        [Value::Int(1), t] if token(t).is_some() => Ok(FencedWrite::Written),
        [Value::Int(0), t] => token(t)
            .map(|highest| FencedWrite::Stale { highest })
            .ok_or_else(bad),
        _ => Err(bad()),
    }
}

/// A backend operation on Redis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisOp {
    /// Run a protocol script: `EVALSHA sha1(source) len(keys) keys… args…`.
    Eval {
        script: Script,
        keys: Words,
        args: Words,
    },
    /// `SUBSCRIBE channel` on the transport's pub/sub connection; messages come back as
    /// [`Notice::Message`](crate::Notice::Message). Reply with any value once subscribed.
    Subscribe { channel: String },
}

/// A RESP reply, as far as the protocol needs one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Nil,
    Int(i64),
    Data(Vec<u8>),
    Status(String),
    Array(Vec<Value>),
}

/// Escapes a lock name for use inside a hash tag: `%`, `{` and `}` become `%25`, `%7B`, `%7D`.
///
/// The escaped name contains no brace, so `{escaped}` is always the key's hash tag (all keys
/// of one lock land in one Redis Cluster slot), and distinct names stay distinct. A name
/// without them (nearly every one) is its own escape, borrowed: every request builds its keys.
pub fn escape(name: &str) -> Cow<'_, str> {
    if !name.contains(['%', '{', '}']) {
        return Cow::Borrowed(name);
    }
    let mut out = String::with_capacity(name.len() + 4);
    for c in name.chars() {
        match c {
            '%' => out.push_str("%25"),
            '{' => out.push_str("%7B"),
            '}' => out.push_str("%7D"),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// The parts of the key of the lock whose escaped name is `tag`, with this suffix:
/// `dlock:{tag}:suffix`.
fn key_parts<'a>(tag: &'a str, suffix: &'a str) -> [&'a str; 4] {
    ["dlock:{", tag, "}:", suffix]
}

/// The key of `name` with this suffix: `dlock:{escaped name}:suffix`.
fn keys_of(name: &str) -> impl Fn(&str) -> String {
    let tag = escape(name);
    move |suffix| key_parts(&tag, suffix).concat()
}

/// The four keys of one lock, in the order every script takes them, in one buffer:
/// - `lock`: hash `owner`, `count`, `fence`, with the lease as its TTL;
/// - `fence`: counter of tenures, whose value is the latest fencing token; never expires;
/// - `queue`: list of waiting owner tokens, FIFO;
/// - `waiters`: sorted set of waiting owner tokens scored by waiter-lease deadline (server
///   ms).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockKeys(Words);

impl LockKeys {
    const SUFFIXES: [&'static str; 4] = ["lock", "fence", "queue", "waiters"];

    pub fn new(name: &str) -> Self {
        let tag = escape(name);
        let bytes =
            Self::SUFFIXES.len() * ("dlock:{}:".len() + tag.len()) + "lockfencequeuewaiters".len();
        let mut keys = Words::with_capacity(Self::SUFFIXES.len(), bytes);
        for suffix in Self::SUFFIXES {
            keys.push_joined(&key_parts(&tag, suffix));
        }
        Self(keys)
    }

    /// The keys of a hold whose own hash is `lock`, beside a lock's other keys.
    fn of(lock: &str, fence: &str, queue: &str, waiters: &str) -> Self {
        Self([lock, fence, queue, waiters].into())
    }

    /// Hash `owner`, `count`, `fence`, with the lease as its TTL.
    pub fn lock(&self) -> &str {
        &self.0[0]
    }

    /// Counter of tenures; its value is the latest fencing token. Never expires.
    pub fn fence(&self) -> &str {
        &self.0[1]
    }

    /// List of waiting owner tokens, FIFO.
    pub fn queue(&self) -> &str {
        &self.0[2]
    }

    /// Sorted set of waiting owner tokens scored by waiter-lease deadline (server ms).
    pub fn waiters(&self) -> &str {
        &self.0[3]
    }

    /// The four keys, as a script takes them.
    pub fn into_words(self) -> Words {
        self.0
    }
}

/// The keys of one semaphore (§16), in the order the permit scripts take them after the
/// permit's own hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SemaphoreKeys {
    /// Counter of tenures (permits given out); its value is the latest fencing token.
    pub fence: String,
    /// List of waiting owner tokens, FIFO.
    pub queue: String,
    /// Sorted set of waiting owner tokens scored by waiter-lease deadline (server ms).
    pub waiters: String,
    /// Sorted set of the owner tokens holding a permit, scored by fencing token.
    pub holders: String,
    /// The number of permits, set while nobody holds or waits.
    pub permits: String,
    /// A permit's hash is this prefix and its owner token.
    permit_prefix: String,
}

impl SemaphoreKeys {
    pub fn new(name: &str) -> Self {
        let key = keys_of(name);
        Self {
            fence: key("sem:fence"),
            queue: key("sem:queue"),
            waiters: key("sem:waiters"),
            holders: key("sem:holders"),
            permits: key("sem:permits"),
            permit_prefix: key("sem:permit:"),
        }
    }

    /// The hash of the permit held by `token` (`owner`, `count` = 1, `fence`, with the lease
    /// as its TTL), as for a lock: EXTEND renews it.
    pub fn permit(&self, token: &str) -> String {
        format!("{}{token}", self.permit_prefix)
    }

    /// The keys of `token`'s permit as the lock scripts see a lock: EXTEND takes `lock`.
    pub fn lock_keys(&self, token: &str) -> LockKeys {
        LockKeys::of(&self.permit(token), &self.fence, &self.queue, &self.waiters)
    }

    fn all(&self, token: &str) -> Words {
        [
            &self.permit(token),
            &self.fence,
            &self.queue,
            &self.waiters,
            &self.holders,
            &self.permits,
        ]
        .into()
    }
}

/// The keys of one read-write lock (§17), in the order the RW scripts take them after the
/// tenure's own hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RwKeys {
    /// Counter of tenures (read and write holds alike); its value is the latest fencing token.
    pub fence: String,
    /// List of waiting owner tokens, FIFO, readers and writers alike.
    pub queue: String,
    /// Sorted set of waiting owner tokens scored by waiter-lease deadline (server ms).
    pub waiters: String,
    /// Sorted set of the owner tokens holding a read hold, scored by fencing token.
    pub readers: String,
    /// The writer's hash (`owner`, `count`, `fence`), as a lock's.
    pub writer: String,
    /// Hash of each waiting owner token's mode: `read` or `write`.
    pub modes: String,
}

impl RwKeys {
    pub fn new(name: &str) -> Self {
        let key = keys_of(name);
        Self {
            fence: key("rw:fence"),
            queue: key("rw:queue"),
            waiters: key("rw:waiters"),
            readers: key("rw:readers"),
            writer: key("rw:write"),
            modes: key("rw:modes"),
        }
    }

    /// The hash of the read hold of `token`: the writer's key with `write` replaced by
    /// `read:`, then the token.
    pub fn reader(&self, token: &str) -> String {
        let stem = self.writer.strip_suffix("write").unwrap_or(&self.writer);
        format!("{stem}read:{token}")
    }

    /// The keys of `token`'s hold as the lock scripts see a lock: EXTEND takes `lock`.
    pub fn lock_keys(&self, token: &str, write: bool) -> LockKeys {
        let reader;
        let own = if write {
            &self.writer
        } else {
            reader = self.reader(token);
            &reader
        };
        LockKeys::of(own, &self.fence, &self.queue, &self.waiters)
    }

    fn all(&self, own: &str) -> Words {
        [
            own,
            &self.fence,
            &self.queue,
            &self.waiters,
            &self.readers,
            &self.writer,
            &self.modes,
        ]
        .into()
    }
}

/// The channel on which hand-offs to `client`'s waiters are published.
pub fn wake_channel(client: ClientId) -> String {
    format!("dlock:wake:{:032x}", client.0)
}

/// A hand-off message: the new owner's token and its fencing token.
pub fn parse_wake(payload: &[u8]) -> Option<Wake<'_>> {
    let text = core::str::from_utf8(payload).ok()?;
    let (token, word) = text.split_once(' ')?;
    Some(match word {
        "free" => Wake::Free { token },
        fence => Wake::HandOff {
            token,
            fencing_token: fence.parse().ok()?,
        },
    })
}

/// A wake-up message (§5): the lock was handed to the waiter `token` with a new tenure, or it
/// was freed by a non-fair release and `token`, the first waiter, may come and take it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake<'a> {
    HandOff { token: &'a str, fencing_token: u64 },
    Free { token: &'a str },
}

/// How an ACQUIRE treats a held lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Do not queue.
    Try,
    /// Queue (or stay queued, renewing the waiter lease).
    Wait,
    /// Renew the waiter lease only if still queued; reply "not queued" otherwise.
    Refresh,
}

impl Mode {
    fn arg(self) -> &'static str {
        match self {
            Mode::Try => "try",
            Mode::Wait => "wait",
            Mode::Refresh => "refresh",
        }
    }
}

/// `d` in whole milliseconds, as the scripts take durations (no lease reaches 2^64 ms).
pub(crate) fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The arguments every acquire script starts with: the owner token, the lease, a count (of
/// levels, or of permits), the mode and the waiter lease; room for two more.
fn acquire_args(
    token: &str,
    lease: Duration,
    count: u32,
    mode: Mode,
    waiter_lease: Duration,
) -> Words {
    let mut args = Words::with_capacity(7, token.len() + 64);
    args.push(token);
    args.push_number(ms(lease));
    args.push_number(count.into());
    args.push(mode.arg());
    args.push_number(ms(waiter_lease));
    args
}

/// Whether waiters are served in order (§5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fairness {
    /// A free lock with live waiters belongs to the first; a release hands it over.
    Fair,
    /// An acquire takes a free lock even when others queue ("barge"); a final release frees
    /// the lock and wakes the first waiter to race for it.
    NonFair,
}

pub fn acquire(
    keys: LockKeys,
    token: &str,
    lease: Duration,
    count: u32,
    mode: Mode,
    waiter_lease: Duration,
    fairness: Fairness,
) -> RedisOp {
    let mut args = acquire_args(token, lease, count, mode, waiter_lease);
    if fairness == Fairness::NonFair {
        args.push("barge");
    }
    RedisOp::Eval {
        script: Script::Acquire,
        keys: keys.into_words(),
        args,
    }
}

/// RELEASE down to `count` levels; at 0 the lock is handed to the first waiter, or (non-fair)
/// freed with the first waiter woken.
pub fn release(keys: LockKeys, token: &str, count: u32, fairness: Fairness) -> RedisOp {
    let mut args = Words::with_capacity(3, token.len() + 16);
    args.push(token);
    args.push_number(count.into());
    if fairness == Fairness::NonFair && count == 0 {
        args.push("free");
    }
    RedisOp::Eval {
        script: Script::Release,
        keys: keys.into_words(),
        args,
    }
}

/// PERMIT-ACQUIRE: one of `permits` permits of a semaphore, as ACQUIRE takes a lock (never
/// reentrant: every acquire is a permit of its own).
pub fn permit_acquire(
    keys: &SemaphoreKeys,
    token: &str,
    lease: Duration,
    permits: u32,
    mode: Mode,
    waiter_lease: Duration,
    fairness: Fairness,
) -> RedisOp {
    let mut args = acquire_args(token, lease, permits, mode, waiter_lease);
    if fairness == Fairness::NonFair {
        args.push("barge");
    }
    RedisOp::Eval {
        script: Script::PermitAcquire,
        keys: keys.all(token),
        args,
    }
}

/// PERMIT-RELEASE: give the permit back; it goes to the first waiter, or (non-fair) is freed
/// with the first waiter woken.
pub fn permit_release(keys: &SemaphoreKeys, token: &str, fairness: Fairness) -> RedisOp {
    let mut args = Words::from([token]);
    if fairness == Fairness::NonFair {
        args.push("free");
    }
    RedisOp::Eval {
        script: Script::PermitRelease,
        keys: keys.all(token),
        args,
    }
}

/// PERMIT-DEQUEUE: a waiter for a permit gives up.
pub fn permit_dequeue(keys: &SemaphoreKeys, token: &str) -> RedisOp {
    RedisOp::Eval {
        script: Script::PermitDequeue,
        keys: keys.all(token),
        args: [token].into(),
    }
}

/// A read-write lock's hold: `write`, or a read hold — which, with `downgrade` (the owner
/// token of the same owner's write hold), is granted beside that writer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RwHold<'a> {
    pub keys: &'a RwKeys,
    pub token: &'a str,
    pub write: bool,
    pub downgrade: Option<&'a str>,
}

impl RwHold<'_> {
    fn own(&self) -> String {
        if self.write {
            self.keys.writer.clone()
        } else {
            self.keys.reader(self.token)
        }
    }
}

/// RW-ACQUIRE: a read or write hold at `count` levels, as ACQUIRE takes a lock.
pub fn rw_acquire(
    hold: &RwHold<'_>,
    lease: Duration,
    count: u32,
    mode: Mode,
    waiter_lease: Duration,
) -> RedisOp {
    let mut args = acquire_args(hold.token, lease, count, mode, waiter_lease);
    args.push(if hold.write { "write" } else { "read" });
    if let Some(writer) = hold.downgrade {
        args.push(writer);
    }
    RedisOp::Eval {
        script: Script::RwAcquire,
        keys: hold.keys.all(&hold.own()),
        args,
    }
}

/// RW-RELEASE down to `count` levels; at 0 the lock goes to the first waiters it can.
pub fn rw_release(hold: &RwHold<'_>, count: u32) -> RedisOp {
    RedisOp::Eval {
        script: Script::RwRelease,
        keys: hold.keys.all(&hold.own()),
        args: [hold.token, &count.to_string()].into(),
    }
}

/// RW-DEQUEUE: a waiter for a read or write hold gives up.
pub fn rw_dequeue(hold: &RwHold<'_>) -> RedisOp {
    RedisOp::Eval {
        script: Script::RwDequeue,
        keys: hold.keys.all(&hold.own()),
        args: [hold.token].into(),
    }
}

pub fn dequeue(keys: LockKeys, token: &str) -> RedisOp {
    RedisOp::Eval {
        script: Script::Dequeue,
        keys: keys.into_words(),
        args: [token].into(),
    }
}

/// One EXTEND for many locks: `(lock key, owner token, lease)` each.
pub fn extend(
    locks: impl IntoIterator<Item = (impl AsRef<str>, impl AsRef<str>, Duration)>,
) -> RedisOp {
    per_key(Script::Extend, locks)
}

/// A batched renewal script (EXTEND, REDISSON-EXTEND): one key per hold, and per hold its
/// owner (token or field) and lease in ms.
pub(crate) fn per_key(
    script: Script,
    holds: impl IntoIterator<Item = (impl AsRef<str>, impl AsRef<str>, Duration)>,
) -> RedisOp {
    let (mut keys, mut args) = (Words::new(), Words::new());
    for (key, owner, lease) in holds {
        keys.push(key.as_ref());
        args.push(owner.as_ref());
        args.push_number(ms(lease));
    }
    RedisOp::Eval { script, keys, args }
}

/// RAISE (Redlock) on one node: record `fencing_token` as the tenure's token there and raise
/// the node's counter to it, if `token` still owns the lock on that node.
pub fn raise(keys: &LockKeys, token: &str, fencing_token: u64) -> RedisOp {
    RedisOp::Eval {
        script: Script::Raise,
        keys: [keys.lock(), keys.fence()].into(),
        args: [token, &fencing_token.to_string()].into(),
    }
}

/// STATUS for one lock.
pub fn status(keys: LockKeys) -> RedisOp {
    RedisOp::Eval {
        script: Script::Status,
        keys: keys.into_words(),
        args: Words::new(),
    }
}

/// Reads a STATUS reply.
pub fn parse_status(v: &Value) -> Result<LockStatus, Error> {
    let bad = || malformed(Script::Status, v);
    let Value::Array(items) = v else {
        return Err(bad());
    };
    let text = |v: &Value| match v {
        Value::Data(d) => String::from_utf8(d.clone()).map_err(|_| bad()),
        _ => Err(bad()),
    };
    let int = |v: &Value| match v {
        Value::Int(i) => Ok(*i),
        _ => Err(bad()),
    };
    let [owner, count, fence, pttl, latest, waiters @ ..] = items.as_slice() else {
        return Err(bad());
    };
    let owner = text(owner)?;
    Ok(LockStatus {
        owner: (!owner.is_empty()).then_some(owner),
        count: u32::try_from(int(count)?).map_err(|_| bad())?,
        fencing_token: u64::try_from(int(fence)?).map_err(|_| bad())?,
        ttl: u64::try_from(int(pttl)?).ok().map(Duration::from_millis),
        latest_token: u64::try_from(int(latest)?).map_err(|_| bad())?,
        waiters: waiters.iter().map(text).collect::<Result<_, _>>()?,
    })
}

/// A parsed ACQUIRE reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcquireReply {
    Acquired {
        fencing_token: u64,
        count: u32,
    },
    Busy,
    /// Queued; `latest` is the lock's latest fencing token when the script ran, and `expires`
    /// the time the lock had left then, if it had an owner with a lease.
    Queued {
        latest: u64,
        expires: Option<Duration>,
    },
    NotQueued,
    /// PERMIT-ACQUIRE: the semaphore is in use with this many permits, not the number asked.
    OtherPermits {
        permits: u32,
    },
}

/// A parsed RELEASE reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseReply {
    NotOwner,
    Held { count: u32 },
    Freed,
}

fn malformed(script: Script, v: &Value) -> Error {
    Error::MalformedReply(format!("{} replied {v:?}", script.name()))
}

/// A reply of at most four integers, the shape of ACQUIRE's, RELEASE's and PROCLAIM's, read
/// without allocating.
struct Ints {
    len: usize,
    items: [i64; 4],
}

impl Ints {
    fn as_slice(&self) -> &[i64] {
        &self.items[..self.len]
    }
}

fn ints(script: Script, v: &Value) -> Result<Ints, Error> {
    let bad = || malformed(script, v);
    let Value::Array(items) = v else {
        return Err(bad());
    };
    let mut ints = Ints {
        len: items.len(),
        items: [0; 4],
    };
    if items.len() > ints.items.len() {
        return Err(bad());
    }
    for (slot, item) in ints.items.iter_mut().zip(items) {
        let Value::Int(n) = item else {
            return Err(bad());
        };
        *slot = *n;
    }
    Ok(ints)
}

pub fn parse_acquire(v: &Value) -> Result<AcquireReply, Error> {
    let bad = || malformed(Script::Acquire, v);
    Ok(match ints(Script::Acquire, v)?.as_slice() {
        [1, fence, count] => AcquireReply::Acquired {
            fencing_token: u64::try_from(*fence)
                .ok()
                .filter(|f| *f > 0)
                .ok_or_else(bad)?,
            count: u32::try_from(*count)
                .ok()
                .filter(|c| *c > 0)
                .ok_or_else(bad)?,
        },
        [0, _] => AcquireReply::Busy,
        [2, pttl, latest] => AcquireReply::Queued {
            latest: u64::try_from(*latest).map_err(|_| bad())?,
            // PTTL: -2 no lock, -1 no expiry; both mean no lease to wait out.
            expires: u64::try_from(*pttl).ok().map(Duration::from_millis),
        },
        [3] => AcquireReply::NotQueued,
        [4, permits] => AcquireReply::OtherPermits {
            permits: u32::try_from(*permits).map_err(|_| bad())?,
        },
        _ => return Err(bad()),
    })
}

pub fn parse_release(v: &Value) -> Result<ReleaseReply, Error> {
    Ok(match ints(Script::Release, v)?.as_slice() {
        [0] => ReleaseReply::NotOwner,
        [1, count] => ReleaseReply::Held {
            count: u32::try_from(*count)
                .ok()
                .filter(|c| *c > 0)
                .ok_or_else(|| malformed(Script::Release, v))?,
        },
        [2, handed] if *handed >= 0 => ReleaseReply::Freed,
        _ => return Err(malformed(Script::Release, v)),
    })
}

/// The channel on which election `name`'s leaders publish their values and resignations
/// (§20): `dlock:{E}:leader`, beside the lock's keys.
pub fn leader_channel(name: &str) -> String {
    keys_of(name)("leader")
}

/// PROCLAIM: tenure `token` of term `term`, the holder of lock `keys`, publishes `value` as
/// the leader of the election of that name. The term is checked as well as the token: a
/// delayed ACQUIRE can give a token that has left a new tenure nobody uses (§7), which a
/// delayed PROCLAIM must not make a leader.
pub fn proclaim(keys: &LockKeys, token: &str, term: u64, value: &str) -> RedisOp {
    RedisOp::Eval {
        script: Script::Proclaim,
        keys: [keys.lock()].into(),
        args: [token, &term.to_string(), value].into(),
    }
}

/// RESIGN: the final release of tenure `token` that leads the election of lock `keys`; it
/// hands the lock off as RELEASE does and tells the election's observers.
pub fn resign(keys: LockKeys, token: &str) -> RedisOp {
    RedisOp::Eval {
        script: Script::Resign,
        keys: keys.into_words(),
        args: [token].into(),
    }
}

/// LEADER, read only: the term, proclaimed value and time to live of lock `keys`.
pub fn leader(keys: &LockKeys) -> RedisOp {
    RedisOp::Eval {
        script: Script::Leader,
        keys: [keys.lock()].into(),
        args: Words::new(),
    }
}

/// A PROCLAIM reply: the term the value was published under, `None` if the token no longer
/// holds the lock.
pub fn parse_proclaim(v: &Value) -> Result<Option<u64>, Error> {
    match ints(Script::Proclaim, v)?.as_slice() {
        [0] => Ok(None),
        [1, term] if *term > 0 => Ok(Some(*term as u64)),
        _ => Err(malformed(Script::Proclaim, v)),
    }
}

/// What a LEADER reply says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderRead {
    /// The holder's term and proclaimed value; `None` when the lock is free or its holder
    /// has proclaimed nothing.
    pub leader: Option<Leader>,
    /// The lock has a holder.
    pub held: bool,
    /// The holder's lease left, if it has one.
    pub ttl: Option<Duration>,
}

/// Reads a LEADER reply.
pub fn parse_leader(v: &Value) -> Result<LeaderRead, Error> {
    let bad = || malformed(Script::Leader, v);
    let Value::Array(items) = v else {
        return Err(bad());
    };
    // SQL's LEADER replies its numbers as text (they share an array with the value).
    let number = |v: &Value| match v {
        Value::Int(n) => Some(*n),
        Value::Data(d) => core::str::from_utf8(d).ok()?.parse().ok(),
        _ => None,
    };
    let [term, value, pttl] = items.as_slice() else {
        return Err(bad());
    };
    let (Some(term), Some(pttl)) = (number(term), number(pttl)) else {
        return Err(bad());
    };
    let term = u64::try_from(term).map_err(|_| bad())?;
    let value = match value {
        Value::Nil => None,
        Value::Data(d) => Some(String::from_utf8(d.clone()).map_err(|_| bad())?),
        _ => return Err(bad()),
    };
    Ok(LeaderRead {
        leader: value
            .filter(|_| term > 0)
            .map(|value| Leader { term, value }),
        held: term > 0,
        ttl: u64::try_from(pttl).ok().map(Duration::from_millis),
    })
}

/// A message on an election's channel: `<term> <value>` from PROCLAIM, `<term>` from
/// RESIGN. `None` for anything else.
pub fn parse_leader_message(payload: &[u8]) -> Option<(u64, Option<&str>)> {
    let text = core::str::from_utf8(payload).ok()?;
    let (term, value) = match text.split_once(' ') {
        Some((term, value)) => (term, Some(value)),
        None => (text, None),
    };
    Some((term.parse().ok()?, value))
}

/// A RAISE reply: whether the token was recorded (the lock was still ours on that node).
pub fn parse_raise(v: &Value) -> Result<bool, Error> {
    match v {
        Value::Int(1) => Ok(true),
        Value::Int(0) => Ok(false),
        _ => Err(malformed(Script::Raise, v)),
    }
}

/// One flag per lock of the batch: still ours and extended.
pub fn parse_extend(v: &Value, n: usize) -> Result<Vec<bool>, Error> {
    let bad = || malformed(Script::Extend, v);
    match v {
        Value::Array(items) if items.len() == n => items
            .iter()
            .map(|item| match item {
                Value::Int(0) => Ok(false),
                Value::Int(1) => Ok(true),
                _ => Err(bad()),
            })
            .collect(),
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::{HOLDERS, PERMITS, PRELUDE, RW, SCRIPT_COMMANDS, Script, library};

    /// Each family's list of commands is exactly what its scripts call (a script carries
    /// only the helpers it calls).
    #[test]
    fn script_commands_are_exactly_what_the_scripts_call() {
        for (redisson, listed) in [
            (false, SCRIPT_COMMANDS),
            (true, crate::redisson::SCRIPT_COMMANDS),
        ] {
            let mut called = std::collections::BTreeSet::new();
            for script in Script::ALL.into_iter().filter(|s| s.redisson() == redisson) {
                let body = script.source();
                for call in body.split("redis.call(").skip(1) {
                    let name = call.strip_prefix('\'').and_then(|c| c.split_once('\''));
                    let (name, _) = name.unwrap_or_else(|| {
                        panic!("{script:?} calls a command it names at run time")
                    });
                    called.insert(name.to_lowercase());
                }
                assert!(!body.contains("redis.pcall("), "{script:?}");
            }
            let listed: std::collections::BTreeSet<String> =
                listed.iter().map(|c| c.to_string()).collect();
            assert_eq!(called, listed, "redisson: {redisson}");
        }
    }

    /// The function library: one function per script, named after the library; the library
    /// named after its text; each helper defined once (a second definition would shadow the
    /// first for every function after it); the per-call time cleared on entry; `allow-oom`
    /// only where EVALSHA of the script would run out of memory too.
    #[test]
    fn the_library_has_one_function_per_script_and_each_helper_once() {
        let built = library();
        assert_eq!(built, library(), "the same text every time");
        let library = built;
        let hash = library.name.strip_prefix("dlock_").expect("dlock_");
        assert!(hash.len() == 16 && hash.chars().all(|c| c.is_ascii_hexdigit()));
        let first_line = format!("#!lua name={}\n", library.name);
        assert!(library.source.starts_with(&first_line));
        assert!(!library.source.contains("@LIBRARY@"));
        for script in Script::ALL {
            let registered = format!("function_name = '{}',", library.function(script));
            assert_eq!(library.source.matches(&registered).count(), 1, "{script:?}");
            let flags = if script.allow_oom() {
                "{'allow-oom'}"
            } else {
                "{}"
            };
            let entry = format!(
                "{registered} flags = {flags}, callback = function(KEYS, ARGV)\nclock, stamp = nil, nil\n{}end}}",
                script.body()
            );
            assert!(library.source.contains(&entry), "{script:?}");
        }
        assert_eq!(
            library.source.matches("redis.register_function").count(),
            Script::ALL.len()
        );
        let mut helpers = BTreeSet::new();
        for file in [PRELUDE, HOLDERS, PERMITS, RW] {
            for def in file.split("\nlocal function ").skip(1) {
                let name = def.split_once('(').expect("a name").0;
                assert!(helpers.insert(name), "{name} is defined twice");
            }
        }
        assert!(!Script::Acquire.allow_oom() && Script::Release.allow_oom());
    }

    /// A script carries the helpers it calls and the helpers they call, in the prelude's
    /// order, and no other: each is a closure made every time the script runs.
    #[test]
    fn a_script_carries_only_the_helpers_it_calls() {
        let defined = |script: Script| -> Vec<String> {
            let source = script.source();
            let mut names = Vec::new();
            for def in source.split("local function ").skip(1) {
                names.push(def.split_once('(').expect("a name").0.to_owned());
            }
            names
        };
        let acquire = [
            "now_ms",
            "live_head",
            "next_token",
            "grant",
            "enqueue",
            "stretch",
        ];
        assert_eq!(defined(Script::Acquire), acquire);
        let release = [
            "now_ms",
            "live_head",
            "next_token",
            "grant",
            "wake",
            "pop_head",
            "hand_off",
            "wake_head",
        ];
        assert_eq!(defined(Script::Release), release);
        assert_eq!(defined(Script::Extend), ["stretch"]);
        assert_eq!(defined(Script::RedissonStatus), Vec::<String>::new());
        assert!(
            Script::PermitAcquire
                .source()
                .contains("local function live_holders(")
        );
        // What `with_helpers` keeps or drops whole: a block of one function, or of comments.
        for file in [PRELUDE, HOLDERS, PERMITS, RW] {
            for block in file.split_terminator("\n\n") {
                let functions = block.matches("local function ").count();
                let comments = block.lines().all(|l| l.starts_with("--"));
                assert!(functions == 1 || (functions == 0 && comments), "{block}");
            }
        }
        // A field of the same name is not a call.
        assert!(super::calls("x = floor(1)", "floor"));
        assert!(!super::calls("x = math.floor(1)", "floor"));
        assert!(!super::calls("x = my_floor(1)", "floor"));
    }
}
