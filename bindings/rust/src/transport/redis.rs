//! `redis://`: one multiplexed, self-reconnecting connection for scripts and one pub/sub
//! connection for wake-ups, reconnected with backoff. Scripts run as functions of the
//! protocol's library with FCALL; on "Function not found" (a new server, or one whose
//! functions were flushed) the library is loaded with FUNCTION LOAD REPLACE and the call made
//! again. A server that refuses either command (Redis before 7, or a user without `fcall` or
//! `function|load`) gets EVALSHA from then on; on NOSCRIPT the script is loaded with SCRIPT
//! LOAD and run again, never with EVAL (PROTOCOL.md §6, §7).
//!
//! `redis-cluster://`: the redis crate's cluster connection routes each script to the node
//! that serves its keys' slot (a lock's keys share one, PROTOCOL.md §1) and follows MOVED and
//! ASK. Wake-ups are classic PUBLISH, which a cluster broadcasts to every node, so the pub/sub
//! connection goes to any one seed node, and to the next one when it is lost. In the
//! Redisson-compatible mode a cluster's waiters listen by sharded pub/sub instead (SSUBSCRIBE,
//! as Redisson 3.22 and later do there): a second cluster connection, in RESP3, subscribes to
//! each channel on the node that serves its slot and subscribes again after a failover or a
//! reconnection.
//!
//! `redlock://`: one self-reconnecting connection per independent server, no pub/sub. A node
//! that is down when the client starts is connected in the background; until then its
//! requests fail at once, which the engine counts as that node's "no".

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use dlock_core::redis::{Library, RedisOp, Script, Value};
use dlock_core::{Notice, Reply, Response, TransportError};
use futures_util::StreamExt;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use tokio::sync::{mpsc, oneshot};

use super::Pending;
use crate::driver::Inbox;
use crate::{Error, redact};

type Subscription = (String, oneshot::Sender<Reply>);

/// Where scripts go.
#[derive(Clone)]
enum Connection {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl Connection {
    async fn query(&mut self, cmd: &redis::Cmd) -> redis::RedisResult<redis::Value> {
        match self {
            Connection::Single(con) => cmd.query_async(con).await,
            Connection::Cluster(con) => cmd.query_async(con).await,
        }
    }
}

/// Where wake-ups come from.
#[derive(Clone)]
enum Subscriber {
    /// Classic pub/sub: the task that keeps its connection, and its requests.
    Classic {
        subscribe: mpsc::UnboundedSender<Subscription>,
        task: Arc<tokio::task::AbortHandle>,
    },
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
        let client = redis::Client::open(url).map_err(invalid_url)?;
        let fail = |e: String| Error::Connect(redact(&format!("{url}: {e}")));
        let con = manager(&client).await.map_err(fail)?;
        Self::start(Connection::Single(con), vec![client], inbox)
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
        let clients = nodes
            .iter()
            .map(|n| redis::Client::open(n.as_str()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(invalid_url)?;
        Self::start(Connection::Cluster(con), clients, inbox)
            .await
            .map_err(fail)
    }

    /// Opens the pub/sub connection before returning, so wake-ups work at once.
    async fn start(
        con: Connection,
        pubsub_nodes: Vec<redis::Client>,
        inbox: Inbox,
    ) -> Result<Self, String> {
        let mut first = None;
        let mut error = String::from("no node");
        for (i, node) in pubsub_nodes.iter().enumerate() {
            match node.get_async_pubsub().await {
                Ok(pubsub) => {
                    first = Some((i, pubsub));
                    break;
                }
                Err(e) => error = e.to_string(),
            }
        }
        let first = first.ok_or(error)?;
        let (subscribe, requests) = mpsc::unbounded_channel();
        let task = tokio::spawn(pubsub_loop(pubsub_nodes, first, requests, inbox));
        Ok(Self {
            con,
            scripts: Runner::new(Scripts::new()),
            subscriber: Subscriber::Classic {
                subscribe,
                task: Arc::new(task.abort_handle()),
            },
        })
    }

    pub(crate) fn execute(&self, op: RedisOp) -> Pending {
        match op {
            RedisOp::Eval { script, keys, args } => {
                eval(self.con.clone(), &self.scripts, script, keys, args)
            }
            RedisOp::Subscribe { channel } => {
                let subscribe = match &self.subscriber {
                    Subscriber::Classic { subscribe, .. } => subscribe,
                    Subscriber::Sharded(con) => {
                        let mut con = con.clone();
                        return Box::pin(async move {
                            con.ssubscribe(channel).await.map_err(transport_error)?;
                            Ok(Response::Redis(Value::Status("OK".into())))
                        });
                    }
                };
                let (tx, rx) = oneshot::channel();
                let sent = subscribe.send((channel, tx));
                Box::pin(async move {
                    sent.map_err(|_| {
                        TransportError::Unavailable("pub/sub connection closed".into())
                    })?;
                    rx.await.unwrap_or_else(|_| {
                        Err(TransportError::Unavailable(
                            "pub/sub connection closed".into(),
                        ))
                    })
                })
            }
        }
    }

    pub(crate) fn close(&self) {
        if let Subscriber::Classic { task, .. } = &self.subscriber {
            task.abort();
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
    /// `FUNCTION LOAD REPLACE <library>`.
    load_library: redis::Cmd,
    functions: BTreeMap<Script, String>,
    sha: BTreeMap<Script, String>,
}

impl Scripts {
    fn new() -> Arc<Self> {
        let library = dlock_core::redis::library();
        let mut load_library = redis::cmd("FUNCTION");
        load_library.arg("LOAD").arg("REPLACE").arg(&library.source);
        Arc::new(Self {
            functions: Script::ALL
                .iter()
                .map(|s| (*s, library.function(*s)))
                .collect(),
            sha: Script::ALL
                .iter()
                .map(|s| (*s, redis::Script::new(&s.source()).get_hash().to_owned()))
                .collect(),
            load_library,
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

    fn fall_back(&self, e: &redis::RedisError) {
        if self.fcall.swap(false, Ordering::Relaxed) {
            tracing::info!(
                library = %self.scripts.library.name,
                "Redis refused a function call ({e}); scripts run by EVALSHA from now on"
            );
        }
    }
}

/// Whether the server does not have or will not let this user run FCALL or FUNCTION LOAD
/// (not an error of the function itself: an ACL refusal inside one reads "ERR The user
/// executing the script can't run this command").
fn refuses_functions(e: &redis::RedisError) -> bool {
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

/// Runs a protocol script on `con`, written once into one command (the redis crate's
/// `ScriptInvocation` would copy every key and argument twice on the way): by FCALL, loading
/// the library on "Function not found"; by EVALSHA once the server refused functions, with
/// SCRIPT LOAD on `NOSCRIPT` (a restarted or flushed server), never EVAL.
fn eval(
    mut con: Connection,
    runner: &Arc<Runner>,
    script: Script,
    keys: Vec<String>,
    args: Vec<String>,
) -> Pending {
    let runner = runner.clone();
    Box::pin(async move {
        let scripts = &*runner.scripts;
        let call = |verb: &str, name: &str| {
            let size = keys.iter().chain(&args).map(String::len).sum::<usize>();
            let mut cmd = redis::Cmd::with_capacity(
                3 + keys.len() + args.len(),
                verb.len() + name.len() + 4 + size,
            );
            cmd.arg(verb)
                .arg(name)
                .arg(keys.len())
                .arg(&keys)
                .arg(&args);
            cmd
        };
        if runner.fcall.load(Ordering::Relaxed) {
            let fcall = call("FCALL", &scripts.functions[&script]);
            let reply = match con.query(&fcall).await {
                Err(e)
                    if e.code() == Some("ERR")
                        && e.detail()
                            .is_some_and(|d| d.starts_with("Function not found")) =>
                {
                    match con.query(&scripts.load_library).await {
                        Ok(_) => Some(con.query(&fcall).await),
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
                return reply
                    .map(|v| Response::Redis(convert(v)))
                    .map_err(transport_error);
            }
        }
        let evalsha = call("EVALSHA", &scripts.sha[&script]);
        let reply = match con.query(&evalsha).await {
            Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                let mut load = redis::cmd("SCRIPT");
                load.arg("LOAD").arg(script.source());
                con.query(&load).await.map_err(transport_error)?;
                con.query(&evalsha).await
            }
            reply => reply,
        };
        reply
            .map(|v| Response::Redis(convert(v)))
            .map_err(transport_error)
    })
}

/// A self-reconnecting connection to one server. A first connection and PING prove the
/// server answers and takes our credentials (the connection manager would retry a refused
/// login forever).
async fn manager(client: &redis::Client) -> Result<ConnectionManager, String> {
    ping(client.get_multiplexed_async_connection()).await?;
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(2)))
        // The engine times requests out itself.
        .set_response_timeout(None)
        .set_min_delay(Duration::from_millis(50))
        .set_max_delay(Duration::from_secs(2))
        .set_number_of_retries(usize::MAX);
    client
        .get_connection_manager_with_config(config)
        .await
        .map_err(|e| e.to_string())
}

/// `redlock://`: a connection to each independent server, by index.
#[derive(Clone)]
pub(crate) struct RedlockTransport {
    nodes: Arc<Vec<RedlockNode>>,
    links: Arc<Vec<tokio::task::AbortHandle>>,
}

/// A Redlock node's URL as messages show it (no password), its connection once up, and how it
/// takes scripts.
type RedlockNode = (String, OnceLock<ConnectionManager>, Arc<Runner>);

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
        let clients = urls
            .iter()
            .map(|u| redis::Client::open(u.as_str()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(invalid_url)?;
        let scripts = Scripts::new();
        let nodes: Arc<Vec<_>> = Arc::new(
            urls.iter()
                .map(|u| (redact(u), OnceLock::new(), Runner::new(scripts.clone())))
                .collect(),
        );
        // Each node reports its first try, then keeps trying until it is up.
        let (tried_tx, mut tried) = mpsc::unbounded_channel();
        let errors = Arc::new(std::sync::Mutex::new(BTreeMap::new()));
        let links = clients
            .into_iter()
            .enumerate()
            .map(|(i, client)| {
                let (nodes, tried_tx, errors) = (nodes.clone(), tried_tx.clone(), errors.clone());
                tokio::spawn(async move {
                    let mut backoff = Duration::from_millis(50);
                    loop {
                        match manager(&client).await {
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

/// Keeps a pub/sub connection up, to one of `nodes` (any node of a cluster hears every
/// PUBLISH): subscribes on request, forwards messages as notices, and on loss reports
/// `Disconnected`, reconnects with backoff (to the next node), then reports `Connected` (the
/// engine then subscribes again).
async fn pubsub_loop(
    nodes: Vec<redis::Client>,
    first: (usize, redis::aio::PubSub),
    mut requests: mpsc::UnboundedReceiver<Subscription>,
    inbox: Inbox,
) {
    let notice = |n: Notice| inbox.send(n);
    let mut backoff = Duration::from_millis(50);
    let (mut node, first) = first;
    let mut first = Some(first);
    loop {
        let pubsub = match first.take() {
            Some(p) => p,
            None => match nodes[node].get_async_pubsub().await {
                Ok(p) => {
                    backoff = Duration::from_millis(50);
                    if !notice(Notice::Connected) {
                        return;
                    }
                    p
                }
                Err(_) => {
                    // Refuse subscriptions while down; the engine retries.
                    while let Ok((_, reply)) = requests.try_recv() {
                        let _ = reply.send(Err(TransportError::Unavailable(
                            "pub/sub connection down".into(),
                        )));
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                    node = (node + 1) % nodes.len();
                    continue;
                }
            },
        };
        let (mut sink, mut stream) = pubsub.split();
        loop {
            tokio::select! {
                request = requests.recv() => {
                    let Some((channel, reply)) = request else { return };
                    let result = sink.subscribe(&channel).await;
                    let _ = reply.send(result.map(|()| Response::Redis(Value::Status("OK".into()))).map_err(transport_error));
                }
                message = stream.next() => {
                    let Some(message) = message else { break };
                    let channel = message.get_channel_name().to_owned();
                    let payload = message.get_payload_bytes().to_vec();
                    if !notice(Notice::Message { channel, payload }) {
                        return;
                    }
                }
            }
        }
        tracing::warn!("redis pub/sub connection lost; reconnecting");
        node = (node + 1) % nodes.len();
        if !notice(Notice::Disconnected) {
            return;
        }
    }
}

fn transport_error(e: redis::RedisError) -> TransportError {
    if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() || e.is_timeout() {
        TransportError::Unavailable(e.to_string())
    } else {
        TransportError::Server(e.to_string())
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
