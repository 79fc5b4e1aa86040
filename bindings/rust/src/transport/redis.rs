//! `redis://`: one pipelined, self-reconnecting connection for scripts and one pub/sub
//! connection for wake-ups, reconnected with backoff (both dlock's own, [`super::resp`]). Scripts run as functions of the
//! protocol's library with FCALL; on "Function not found" (a new server, or one whose
//! functions were flushed) the library is loaded with FUNCTION LOAD REPLACE and the call made
//! again. A server that refuses either command (Redis before 7, or a user without `fcall` or
//! `function|load`) gets EVALSHA from then on; on NOSCRIPT the script is loaded with SCRIPT
//! LOAD and run again, never with EVAL (PROTOCOL.md §6, §7).
//!
//! `redis-cluster://`: the redis crate's cluster connection routes each script to the node
//! that serves its keys' slot (a lock's keys share one, PROTOCOL.md §1) and follows MOVED and
//! ASK. Wake-ups are classic PUBLISH, which a cluster broadcasts to every node, so the pub/sub
//! connection (dlock's own) goes to any one seed node, and to the next one when it is lost. In the
//! Redisson-compatible mode a cluster's waiters listen by sharded pub/sub instead (SSUBSCRIBE,
//! as Redisson 3.22 and later do there): a second cluster connection, in RESP3, subscribes to
//! each channel on the node that serves its slot and subscribes again after a failover or a
//! reconnection.
//!
//! `redlock://`: one self-reconnecting connection per independent server ([`super::resp`]), no
//! pub/sub. A node
//! that is down when the client starts is connected in the background; until then its
//! requests fail at once, which the engine counts as that node's "no".

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use dlock_core::redis::{Library, RedisOp, Script, Value, Words};
use dlock_core::{Notice, Response, TransportError};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use tokio::sync::mpsc;

use super::Pending;
use super::resp::{Failure, Heard, Link, Listener, Target, command};
use crate::driver::Inbox;
use crate::{Error, redact};

/// Where scripts go.
#[derive(Clone)]
enum Connection {
    Single(Link),
    Cluster(ClusterConnection),
}

impl Connection {
    /// Runs one command: `head` (the verb and its first arguments), then `tail`.
    async fn query(&mut self, head: &[&[u8]], tail: &[&Words]) -> Result<Value, Failure> {
        match self {
            Connection::Single(link) => link.query(command(head, tail)).await,
            Connection::Cluster(con) => {
                let mut cmd = redis::Cmd::new();
                for part in head {
                    cmd.arg(*part);
                }
                for part in tail.iter().copied().flatten() {
                    cmd.arg(part);
                }
                cmd.query_async(con).await.map(convert).map_err(failure)
            }
        }
    }
}

/// Where wake-ups come from.
#[derive(Clone)]
enum Subscriber {
    /// Classic pub/sub, on a connection of dlock's own.
    Classic(Arc<Listener>),
    /// A cluster's sharded pub/sub: the messages arrive through the connection's push sender.
    Sharded(ClusterConnection),
}

#[derive(Clone)]
pub(crate) struct RedisTransport {
    con: Connection,
    scripts: Arc<Runner>,
    subscriber: Subscriber,
}

impl std::fmt::Debug for RedisTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisTransport").finish_non_exhaustive()
    }
}

/// The redis crate's word on a URL it cannot open, without the URL's password.
fn invalid_url(e: redis::RedisError) -> Error {
    Error::InvalidUrl(redact(&e.to_string()))
}

impl RedisTransport {
    pub(crate) async fn connect(url: &str, inbox: Inbox) -> Result<Self, Error> {
        let target = Arc::new(Target::new(url).map_err(Error::InvalidUrl)?);
        let fail = |e: String| Error::Connect(redact(&format!("{url}: {e}")));
        let link = Link::connect(target.clone()).await.map_err(fail)?;
        Self::start(Connection::Single(link), vec![target], inbox)
            .await
            .map_err(fail)
    }

    /// Connects to a Redis Cluster through its seed nodes (`redis://` URLs); with `sharded`,
    /// wake-ups come by sharded pub/sub.
    pub(crate) async fn connect_cluster(
        nodes: &[String],
        inbox: Inbox,
        sharded: bool,
    ) -> Result<Self, Error> {
        let fail =
            |e: String| Error::Connect(redact(&format!("redis-cluster {}: {e}", nodes.join(" "))));
        let builder = || {
            ClusterClient::builder(nodes.iter().map(String::as_str))
                .connection_timeout(Duration::from_secs(2))
        };
        let con = cluster(builder().build().map_err(invalid_url)?)
            .await
            .map_err(fail)?;
        if sharded {
            let messages = builder()
                .use_protocol(redis::ProtocolVersion::RESP3)
                .push_sender(move |push: redis::PushInfo| {
                    if let Some(notice) = sharded_message(push) {
                        inbox.send(notice);
                    }
                    Ok::<(), ()>(())
                })
                .build()
                .map_err(invalid_url)?;
            return Ok(Self {
                con: Connection::Cluster(con),
                scripts: Runner::new(Scripts::new()),
                subscriber: Subscriber::Sharded(cluster(messages).await.map_err(fail)?),
            });
        }
        let targets = nodes
            .iter()
            .map(|n| Target::new(n).map(Arc::new))
            .collect::<Result<Vec<_>, _>>()
            .map_err(Error::InvalidUrl)?;
        Self::start(Connection::Cluster(con), targets, inbox)
            .await
            .map_err(fail)
    }

    /// Opens the pub/sub connection before returning, so wake-ups work at once.
    async fn start(
        con: Connection,
        pubsub: Vec<Arc<Target>>,
        inbox: Inbox,
    ) -> Result<Self, String> {
        let listener = Listener::connect(pubsub, move |heard| {
            inbox.send(match heard {
                Heard::Message { channel, payload } => Notice::Message {
                    channel: String::from_utf8(channel)
                        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
                    payload,
                },
                Heard::Lost => Notice::Disconnected,
                Heard::Restored => Notice::Connected,
            })
        })
        .await?;
        Ok(Self {
            con,
            scripts: Runner::new(Scripts::new()),
            subscriber: Subscriber::Classic(Arc::new(listener)),
        })
    }

    pub(crate) fn execute(&self, op: RedisOp) -> Pending {
        match op {
            RedisOp::Eval { script, keys, args } => {
                eval(self.con.clone(), &self.scripts, script, keys, args)
            }
            RedisOp::Subscribe { channel } => match &self.subscriber {
                Subscriber::Classic(listener) => {
                    let subscribed = listener.subscribe(channel.into_bytes());
                    Box::pin(async move {
                        subscribed.await.map_err(transport_error)?;
                        Ok(Response::Redis(Value::Status("OK".into())))
                    })
                }
                Subscriber::Sharded(con) => {
                    let mut con = con.clone();
                    Box::pin(async move {
                        con.ssubscribe(channel)
                            .await
                            .map_err(|e| transport_error(failure(e)))?;
                        Ok(Response::Redis(Value::Status("OK".into())))
                    })
                }
            },
        }
    }

    pub(crate) fn close(&self) {
        if let Subscriber::Classic(listener) = &self.subscriber {
            listener.close();
        }
    }
}

/// A cluster connection through `client`, once a PING went through, within 5 s.
async fn cluster(client: ClusterClient) -> Result<ClusterConnection, String> {
    let con = tokio::time::timeout(Duration::from_secs(5), client.get_async_connection())
        .await
        .map_err(|_| "no answer within 5 s".to_owned())?
        .map_err(|e| e.to_string())?;
    ping(async { Ok(con.clone()) }).await?;
    Ok(con)
}

/// The notice of a sharded pub/sub message (`smessage`, channel, payload); `None` for any
/// other push (subscription confirmations, disconnections: the connection subscribes again
/// by itself, and waiters also look again when the holder's TTL runs out).
fn sharded_message(push: redis::PushInfo) -> Option<Notice> {
    let redis::PushKind::SMessage = push.kind else {
        return None;
    };
    match <[redis::Value; 2]>::try_from(push.data).ok()? {
        [
            redis::Value::BulkString(channel),
            redis::Value::BulkString(payload),
        ] => Some(Notice::Message {
            channel: String::from_utf8(channel).ok()?,
            payload,
        }),
        _ => None,
    }
}

/// The protocol's scripts as a client runs them: each one's function in the [`Library`] for
/// FCALL, and its SHA1 for EVALSHA. Built once per client.
struct Scripts {
    library: Library,
    functions: BTreeMap<Script, String>,
    sha: BTreeMap<Script, String>,
}

impl Scripts {
    fn new() -> Arc<Self> {
        let library = dlock_core::redis::library();
        Arc::new(Self {
            functions: Script::ALL
                .iter()
                .map(|s| (*s, library.function(*s)))
                .collect(),
            sha: Script::ALL
                .iter()
                .map(|s| (*s, redis::Script::new(&s.source()).get_hash().to_owned()))
                .collect(),
            library,
        })
    }
}

/// How one server (or one cluster) takes the scripts: by FCALL until it refuses it, then by
/// EVALSHA for good.
struct Runner {
    scripts: Arc<Scripts>,
    fcall: AtomicBool,
}

impl Runner {
    fn new(scripts: Arc<Scripts>) -> Arc<Self> {
        Arc::new(Self {
            scripts,
            fcall: AtomicBool::new(true),
        })
    }

    fn fall_back(&self, e: &Failure) {
        if self.fcall.swap(false, Ordering::Relaxed) {
            tracing::info!(
                library = %self.scripts.library.name,
                "Redis refused a function call ({e:?}); scripts run by EVALSHA from now on"
            );
        }
    }
}

/// Whether the server does not have or will not let this user run FCALL or FUNCTION LOAD
/// (not an error of the function itself: an ACL refusal inside one reads "ERR The user
/// executing the script can't run this command").
fn refuses_functions(e: &Failure) -> bool {
    let Some(detail) = e.detail() else {
        return false;
    };
    match e.code() {
        // Redis 7: "NOPERM … no permissions to run the 'fcall' command" ('function|load').
        Some("NOPERM") => detail.contains("'fcall'") || detail.contains("'function|load'"),
        // Redis 6: "ERR unknown command `FCALL`, with args beginning with: …" (a renamed
        // command reads the same on any version).
        Some("ERR") => {
            let detail = detail.to_ascii_lowercase();
            detail.starts_with("unknown command")
                && (detail.contains("fcall") || detail.contains("function"))
        }
        _ => false,
    }
}

/// Runs a protocol script on `con`: by FCALL, loading the library on "Function not found";
/// by EVALSHA once the server refused functions, with SCRIPT LOAD on `NOSCRIPT` (a restarted
/// or flushed server), never EVAL.
fn eval(
    mut con: Connection,
    runner: &Arc<Runner>,
    script: Script,
    keys: Words,
    args: Words,
) -> Pending {
    let runner = runner.clone();
    Box::pin(async move {
        let scripts = &*runner.scripts;
        let mut number = itoa::Buffer::new();
        let count = number.format(keys.len()).as_bytes();
        let tail = [&keys, &args];
        if runner.fcall.load(Ordering::Relaxed) {
            let fcall: [&[u8]; 3] = [b"FCALL", scripts.functions[&script].as_bytes(), count];
            let reply = match con.query(&fcall, &tail).await {
                Err(e)
                    if e.code() == Some("ERR")
                        && e.detail()
                            .is_some_and(|d| d.starts_with("Function not found")) =>
                {
                    let load: [&[u8]; 4] = [
                        b"FUNCTION",
                        b"LOAD",
                        b"REPLACE",
                        scripts.library.source.as_bytes(),
                    ];
                    match con.query(&load, &[]).await {
                        Ok(_) => Some(con.query(&fcall, &tail).await),
                        Err(e) if refuses_functions(&e) => {
                            runner.fall_back(&e);
                            None
                        }
                        Err(e) => Some(Err(e)),
                    }
                }
                Err(e) if refuses_functions(&e) => {
                    runner.fall_back(&e);
                    None
                }
                reply => Some(reply),
            };
            if let Some(reply) = reply {
                return reply.map(Response::Redis).map_err(transport_error);
            }
        }
        let evalsha: [&[u8]; 3] = [b"EVALSHA", scripts.sha[&script].as_bytes(), count];
        let reply = match con.query(&evalsha, &tail).await {
            Err(e) if e.code() == Some("NOSCRIPT") => {
                let source = script.source();
                con.query(&[b"SCRIPT", b"LOAD", source.as_bytes()], &[])
                    .await
                    .map_err(transport_error)?;
                con.query(&evalsha, &tail).await
            }
            reply => reply,
        };
        reply.map(Response::Redis).map_err(transport_error)
    })
}

/// `redlock://`: a connection to each independent server, by index.
#[derive(Clone)]
pub(crate) struct RedlockTransport {
    nodes: Arc<Vec<RedlockNode>>,
    links: Arc<Vec<tokio::task::AbortHandle>>,
}

/// A Redlock node's URL as messages show it (no password), its connection once up, and how it
/// takes scripts.
type RedlockNode = (String, OnceLock<Link>, Arc<Runner>);

impl std::fmt::Debug for RedlockTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedlockTransport").finish_non_exhaustive()
    }
}

impl RedlockTransport {
    /// Connects to every node (`redis://` URLs) and returns once each has answered or failed
    /// once, if a majority answered; nodes that failed keep being tried in the background.
    /// Fails if no majority answers within 5 s.
    pub(crate) async fn connect(urls: &[String]) -> Result<Self, Error> {
        let targets = urls
            .iter()
            .map(|u| Target::new(u).map(Arc::new))
            .collect::<Result<Vec<_>, _>>()
            .map_err(Error::InvalidUrl)?;
        let scripts = Scripts::new();
        let nodes: Arc<Vec<_>> = Arc::new(
            urls.iter()
                .map(|u| (redact(u), OnceLock::new(), Runner::new(scripts.clone())))
                .collect(),
        );
        // Each node reports its first try, then keeps trying until it is up.
        let (tried_tx, mut tried) = mpsc::unbounded_channel();
        let errors = Arc::new(std::sync::Mutex::new(BTreeMap::new()));
        let links = targets
            .into_iter()
            .enumerate()
            .map(|(i, target)| {
                let (nodes, tried_tx, errors) = (nodes.clone(), tried_tx.clone(), errors.clone());
                tokio::spawn(async move {
                    let mut backoff = Duration::from_millis(50);
                    loop {
                        match Link::connect(target.clone()).await {
                            Ok(con) => {
                                let _ = nodes[i].1.set(con);
                                let _ = tried_tx.send(());
                                return;
                            }
                            Err(e) => {
                                errors.lock().expect("errors").insert(i, e);
                                let _ = tried_tx.send(());
                                tokio::time::sleep(backoff).await;
                                backoff = (backoff * 2).min(Duration::from_secs(2));
                            }
                        }
                    }
                })
                .abort_handle()
            })
            .collect();
        let transport = Self {
            nodes,
            links: Arc::new(links),
        };
        let quorum = dlock_core::redlock::quorum(urls.len() as u32) as usize;
        let up = || {
            transport
                .nodes
                .iter()
                .filter(|(_, c, _)| c.get().is_some())
                .count()
        };
        let settled = async {
            // Until every node has had its first try, or (later) a majority is up.
            let mut tries = 0;
            while tries < urls.len() || up() < quorum {
                tried.recv().await;
                tries += 1;
            }
        };
        let _ = tokio::time::timeout(Duration::from_secs(5), settled).await;
        if up() < quorum {
            transport.close();
            let down: Vec<String> = errors
                .lock()
                .expect("errors")
                .iter()
                .filter(|(i, _)| transport.nodes[**i].1.get().is_none())
                .map(|(i, e)| redact(&format!("{}: {e}", urls[*i])))
                .collect();
            return Err(Error::Connect(format!(
                "redlock: no majority of {} nodes answered within 5 s ({})",
                urls.len(),
                down.join("; ")
            )));
        }
        Ok(transport)
    }

    pub(crate) fn execute(&self, node: u32, op: RedisOp) -> Pending {
        let failed = |e: TransportError| -> Pending { Box::pin(async move { Err(e) }) };
        let Some((url, con, runner)) = self.nodes.get(node as usize) else {
            return failed(TransportError::Server(format!("no Redlock node {node}")));
        };
        match (con.get(), op) {
            (Some(con), RedisOp::Eval { script, keys, args }) => {
                eval(Connection::Single(con.clone()), runner, script, keys, args)
            }
            (None, _) => failed(TransportError::Unavailable(format!(
                "{url}: not connected yet"
            ))),
            (_, op) => failed(TransportError::Server(format!(
                "{op:?}: Redlock has no pub/sub"
            ))),
        }
    }

    pub(crate) fn close(&self) {
        for link in self.links.iter() {
            link.abort();
        }
    }
}

/// A connection and PING within 5 s.
async fn ping<C: redis::aio::ConnectionLike>(
    connect: impl Future<Output = redis::RedisResult<C>>,
) -> Result<(), String> {
    let mut con = tokio::time::timeout(Duration::from_secs(5), connect)
        .await
        .map_err(|_| "no answer within 5 s".to_owned())?
        .map_err(|e| e.to_string())?;
    redis::cmd("PING")
        .query_async::<String>(&mut con)
        .await
        .map(drop)
        .map_err(|e| e.to_string())
}

/// The redis crate's word on a cluster command that got no result, as dlock's.
fn failure(e: redis::RedisError) -> Failure {
    if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() || e.is_timeout() {
        return Failure::Unavailable(e.to_string());
    }
    match (e.code(), e.detail()) {
        (Some(code), Some(detail)) => Failure::Server(format!("{code} {detail}")),
        (Some(code), None) => Failure::Server(code.to_owned()),
        _ => Failure::Server(e.to_string()),
    }
}

fn transport_error(e: Failure) -> TransportError {
    match e {
        Failure::Server(line) => TransportError::Server(line),
        Failure::Unavailable(why) => TransportError::Unavailable(why),
    }
}

fn convert(v: redis::Value) -> Value {
    match v {
        redis::Value::Nil => Value::Nil,
        redis::Value::Int(i) => Value::Int(i),
        redis::Value::BulkString(b) => Value::Data(b),
        redis::Value::SimpleString(s) => Value::Status(s),
        redis::Value::Okay => Value::Status("OK".into()),
        redis::Value::Array(items) | redis::Value::Set(items) => {
            Value::Array(items.into_iter().map(convert).collect())
        }
        // Scripts reply with RESP2 types only; anything else is passed on as text for the
        // engine to reject as malformed.
        other => Value::Status(format!("{other:?}")),
    }
}
