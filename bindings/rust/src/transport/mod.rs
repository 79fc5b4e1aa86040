//! Transports: they perform the engine's requests verbatim and report replies and notices.
//! They decide nothing.

mod memory;
mod mysql;
mod postgres;
mod redis;
mod resp;
mod ssl;
mod zk;

use std::future::Future;
use std::pin::Pin;

use dlock_core::ZkSettings;
use dlock_core::{Op, Protocol, Reply, TransportError};

use crate::Error;
use crate::driver::Inbox;
pub(crate) use mysql::MyUrl;
pub(crate) use postgres::PgUrl;
pub(crate) use zk::ZkUrl;

/// A backend named by a URL. Its `Debug` hides passwords.
#[derive(Clone, PartialEq, Eq)]
pub(crate) enum Backend {
    /// `redis://[user:password@]host[:port][/db]`, or `rediss://…` for TLS (server certificates
    /// are verified against the system's roots, or the PEM file named by `SSL_CERT_FILE`);
    /// passed to the redis crate as it is.
    Redis(String),
    /// `redis://…?compat=redisson` (or `rediss://`): one Redis server, each lock laid out as
    /// Redisson's `RLock` ([`dlock_core::redisson`]); the URL without that parameter.
    Redisson(String),
    /// `redis-cluster://[user:password@]host:port[,host:port…]`: the seed nodes of a Redis
    /// Cluster, each as a `redis://` URL.
    RedisCluster(Vec<String>),
    /// `redis-cluster://…?compat=redisson`: a Redis Cluster, each lock laid out as Redisson's
    /// `RLock`, waiters woken by sharded pub/sub.
    RedissonCluster(Vec<String>),
    /// `redlock://[user:password@]host:port,host:port…`: independent Redis servers, each as
    /// a `redis://` URL, locked by majority (Redlock).
    Redlock(Vec<String>),
    /// `memory://[name]`: an in-process server shared by the clients of this process that use
    /// the same name.
    Memory(String),
    /// `zk://[user:password@]host:port[,host:port…][/chroot][?session_timeout_ms=N&sslmode=…]`.
    ZooKeeper(ZkUrl),
    /// `postgres://[user:password@]host[:port][/dbname][?table_prefix=P&sslmode=…&…]` (or
    /// `postgresql://`).
    Postgres(PgUrl),
    /// `mysql://[user:password@]host[:port]/database[?table_prefix=P&poll_interval_ms=N&…]`
    /// (or `mariadb://`).
    Mysql(MyUrl),
}

/// A backend a URL may name: its scheme, the URL's form and what it is. The CLI's help, the
/// bad-URL message and the hosts' docs list the backends from here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scheme {
    /// `redis`, `zk`, … (what comes before `://`).
    pub name: &'static str,
    /// The URL's form, e.g. `redis://[user:password@]host:port[/db]`.
    pub form: &'static str,
    /// What the backend is, in a few words.
    pub about: &'static str,
}

/// Every backend this build connects to, in the order the docs list them.
pub const BACKENDS: &[Scheme] = &[
    Scheme {
        name: "redis",
        form: "redis://[user:password@]host:port[/db][?compat=redisson]",
        about: "one Redis server (compat=redisson: each lock as Redisson's RLock, shared with Java services)",
    },
    Scheme {
        name: "rediss",
        form: "rediss://[user:password@]host:port[/db]",
        about: "one Redis server over TLS (certificates verified against the system roots or SSL_CERT_FILE)",
    },
    Scheme {
        name: "redis-cluster",
        form: "redis-cluster://[user:password@]host:port[,host:port…][?compat=redisson]",
        about: "Redis Cluster, through its seed nodes (compat=redisson: as on one server, waiters woken by sharded pub/sub)",
    },
    Scheme {
        name: "redlock",
        form: "redlock://[user:password@]host:port,host:port[,…]",
        about: "Redlock over independent Redis servers, locked by majority",
    },
    Scheme {
        name: "zk",
        form: "zk://[user:password@]host:port[,host:port…][/chroot][?session_timeout_ms=N]",
        about: "ZooKeeper (the session is the lease; TLS to a secureClientPort with sslmode and sslrootcert, as on PostgreSQL)",
    },
    Scheme {
        name: "postgres",
        form: "postgres://[user:password@]host[:port][/dbname][?table_prefix=dlock_]",
        about: "PostgreSQL (also postgresql://; TLS verified with sslmode=require or verify-full, CA file sslrootcert=): the database's clock, NOTIFY wake-ups",
    },
    Scheme {
        name: "mysql",
        form: "mysql://[user:password@]host[:port]/database[?table_prefix=dlock_&poll_interval_ms=50]",
        about: "MySQL 8 or MariaDB 10.6+ (also mariadb://; TLS as on PostgreSQL): the database's clock, waiters look again",
    },
    Scheme {
        name: "memory",
        form: "memory://[name]",
        about: "in process, shared by the clients of this process that use the same name",
    },
];

/// The backends' schemes as `redis://, rediss://, … or memory://`.
pub(crate) fn scheme_list() -> String {
    let names: Vec<String> = BACKENDS.iter().map(|s| format!("{}://", s.name)).collect();
    match names.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

impl Backend {
    /// Whether a client sends the ACL probe when it connects: on one Redis server and a Redis
    /// Cluster (Redlock's nodes each have their own users, and memory:// has none).
    pub(crate) fn probes_acl(&self) -> bool {
        matches!(self, Backend::Redis(_) | Backend::RedisCluster(_))
    }

    pub(crate) fn parse(url: &str) -> Result<Backend, Error> {
        // Every message shows the URL without its password.
        let shown = crate::redact(url);
        let bad = |why: String| Error::InvalidUrl(format!("{shown:?}{why}"));
        let Some((scheme, rest)) = url.split_once("://") else {
            // Not shown: without a scheme, nothing marks where a password would stand.
            return Err(Error::InvalidUrl(format!(
                "the URL has no scheme (use {})",
                scheme_list()
            )));
        };
        match scheme {
            "memory" => {
                if rest
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
                {
                    Ok(Backend::Memory(rest.to_owned()))
                } else {
                    Err(bad(
                        ": a memory:// name may only contain letters, digits, '-' and '_'".into(),
                    ))
                }
            }
            "redis" | "rediss" => {
                let (url, redisson) = take_compat(url).map_err(|why| bad(why.into()))?;
                resp::Target::new(&url).map_err(|why| bad(format!(": {why}")))?;
                if rest.is_empty() || rest.starts_with(['/', ':']) {
                    return Err(bad(" names no host".into()));
                }
                Ok(match redisson {
                    true => Backend::Redisson(url),
                    false => Backend::Redis(url),
                })
            }
            "zk" => Ok(Backend::ZooKeeper(ZkUrl::parse(&shown, rest)?)),
            "postgres" | "postgresql" => Ok(Backend::Postgres(PgUrl::parse(&shown, url)?)),
            "mysql" | "mariadb" => Ok(Backend::Mysql(MyUrl::parse(&shown, url)?)),
            "redis-cluster" => {
                let (url, redisson) = take_compat(url).map_err(|why| bad(why.into()))?;
                let nodes = node_urls(&shown, &url[scheme.len() + 3..])?;
                Ok(match redisson {
                    true => Backend::RedissonCluster(nodes),
                    false => Backend::RedisCluster(nodes),
                })
            }
            "redlock" => {
                let nodes = node_urls(&shown, rest)?;
                let distinct: std::collections::BTreeSet<&String> = nodes.iter().collect();
                if distinct.len() < nodes.len() {
                    return Err(bad(
                        " names a node twice: a majority must be of distinct servers".into(),
                    ));
                }
                if nodes.len() > dlock_core::redlock::MAX_NODES as usize {
                    return Err(bad(format!(
                        ": at most {} nodes",
                        dlock_core::redlock::MAX_NODES
                    )));
                }
                Ok(Backend::Redlock(nodes))
            }
            other => Err(Error::Unsupported(format!(
                "{shown:?}: unknown scheme {other:?} (use {})",
                scheme_list()
            ))),
        }
    }
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown = match self {
            Backend::Redis(url) => crate::redact(url),
            Backend::Redisson(url) => format!("{} (compat=redisson)", crate::redact(url)),
            Backend::RedisCluster(nodes) | Backend::Redlock(nodes) => {
                crate::redact(&nodes.join(" "))
            }
            Backend::RedissonCluster(nodes) => {
                format!("{} (compat=redisson)", crate::redact(&nodes.join(" ")))
            }
            Backend::Memory(name) => format!("memory://{name}"),
            Backend::ZooKeeper(url) => format!("zk://{}", url.hosts),
            Backend::Postgres(url) => url.shown(),
            Backend::Mysql(url) => url.shown(),
        };
        f.write_str(&shown)
    }
}

/// `url` without its `compat=redisson` query parameter, and whether it had it. Any other
/// `compat` value is refused.
fn take_compat(url: &str) -> Result<(String, bool), &'static str> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), false));
    };
    let mut redisson = false;
    let mut kept = Vec::new();
    for pair in query.split('&') {
        match pair.split_once('=') {
            Some(("compat", "redisson")) => redisson = true,
            Some(("compat", _)) | None if pair == "compat" || pair.starts_with("compat=") => {
                return Err(": compat takes one value, redisson");
            }
            _ => kept.push(pair),
        }
    }
    Ok(match kept.is_empty() {
        true => (base.to_owned(), redisson),
        false => (format!("{base}?{}", kept.join("&")), redisson),
    })
}

/// The nodes of `redis-cluster://` or `redlock://[user:password@]host:port[,host:port…]` as
/// `redis://` URLs (`shown` is the URL as messages show it). No path: a cluster has only
/// database 0, and Redlock nodes use theirs.
fn node_urls(shown: &str, rest: &str) -> Result<Vec<String>, Error> {
    use ::redis::IntoConnectionInfo;
    let bad = |why: &str| Error::InvalidUrl(format!("{shown:?}: {}", crate::redact(why)));
    let (auth, hosts) = match rest.rsplit_once('@') {
        Some((auth, hosts)) => (format!("{auth}@"), hosts),
        None => (String::new(), rest),
    };
    if hosts.contains('/') || hosts.contains('?') {
        return Err(bad("takes no path or query, only host:port[,host:port…]"));
    }
    hosts
        .split(',')
        .map(|host| {
            let (name, port) = host
                .rsplit_once(':')
                .ok_or_else(|| bad("every node needs host:port"))?;
            if name.is_empty() || port.parse::<u16>().is_err() {
                return Err(bad(&format!("{host:?} is not host:port")));
            }
            let node = format!("redis://{auth}{host}");
            node.as_str()
                .into_connection_info()
                .map_err(|e| bad(&e.to_string()))?;
            Ok(node)
        })
        .collect()
}

/// A reply, when it comes.
pub(crate) type Pending = Pin<Box<dyn Future<Output = Reply> + Send>>;

#[derive(Debug, Clone)]
pub(crate) enum Transport {
    Redis(redis::RedisTransport),
    Redlock(redis::RedlockTransport),
    Memory(memory::MemoryTransport),
    Zk(zk::ZkTransport),
    Postgres(postgres::PgTransport),
    Mysql(mysql::MyTransport),
}

impl Transport {
    /// Connects; notices (pub/sub messages, watches, connection changes) go to `inbox`.
    /// Returns the protocol the engine must speak over it.
    pub(crate) async fn connect(
        backend: &Backend,
        inbox: Inbox,
    ) -> Result<(Transport, Protocol), Error> {
        ssl::default_provider();
        Ok(match backend {
            Backend::Redis(url) => (
                Transport::Redis(redis::RedisTransport::connect(url, inbox).await?),
                Protocol::Redis,
            ),
            Backend::Redisson(url) => (
                Transport::Redis(redis::RedisTransport::connect(url, inbox).await?),
                Protocol::Redisson,
            ),
            Backend::RedisCluster(nodes) => (
                Transport::Redis(
                    redis::RedisTransport::connect_cluster(nodes, inbox, false).await?,
                ),
                Protocol::Redis,
            ),
            Backend::RedissonCluster(nodes) => (
                Transport::Redis(redis::RedisTransport::connect_cluster(nodes, inbox, true).await?),
                Protocol::Redisson,
            ),
            Backend::Redlock(nodes) => (
                Transport::Redlock(redis::RedlockTransport::connect(nodes).await?),
                Protocol::Redlock {
                    nodes: nodes.len() as u32,
                },
            ),
            Backend::Memory(name) => (
                Transport::Memory(memory::MemoryTransport::connect(name, inbox)),
                Protocol::Redis,
            ),
            Backend::ZooKeeper(url) => {
                let (t, session_timeout) = zk::ZkTransport::connect(url, inbox).await?;
                let settings = ZkSettings::new(session_timeout);
                (Transport::Zk(t), Protocol::ZooKeeper(settings))
            }
            Backend::Postgres(url) => (
                Transport::Postgres(postgres::PgTransport::connect(url, inbox).await?),
                Protocol::Sql(url.settings.clone()),
            ),
            Backend::Mysql(url) => (
                Transport::Mysql(mysql::MyTransport::connect(url).await?),
                Protocol::Sql(url.settings.clone()),
            ),
        })
    }

    /// Performs one operation.
    pub(crate) fn execute(&self, op: Op) -> Pending {
        match (self, op) {
            (Transport::Redis(t), Op::Redis(op)) => t.execute(op),
            (Transport::Redlock(t), Op::Redlock { node, op }) => t.execute(node, op),
            (Transport::Memory(t), Op::Redis(op)) => t.execute(op),
            (Transport::Zk(t), Op::Zk(op)) => t.execute(op),
            (Transport::Postgres(t), Op::Sql(op)) => t.execute(op),
            (Transport::Mysql(t), Op::Sql(op)) => t.execute(op),
            (_, op) => {
                let e = TransportError::Server(format!("{op:?} is not for this backend"));
                Box::pin(async move { Err(e) })
            }
        }
    }

    /// Stops delivering notices.
    pub(crate) fn close(&self) {
        match self {
            Transport::Redis(t) => t.close(),
            Transport::Redlock(t) => t.close(),
            Transport::Memory(t) => t.close(),
            Transport::Zk(t) => t.close(),
            Transport::Postgres(t) => t.close(),
            Transport::Mysql(t) => t.close(),
        }
    }
}
