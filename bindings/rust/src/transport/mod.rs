//! Transports: they perform the engine's requests verbatim and report replies and notices.
//! They decide nothing.

mod memory;
mod redis;
mod zk;

use std::future::Future;
use std::pin::Pin;

use dlock_core::ZkSettings;
use dlock_core::{Input, Op, Protocol, Reply, TransportError};
use tokio::sync::mpsc::UnboundedSender;

use crate::Error;
pub(crate) use zk::ZkUrl;

/// A backend named by a URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Backend {
    /// `redis://[user:password@]host[:port][/db]`, or `rediss://…` for TLS (server certificates
    /// are verified against the system's roots, or the PEM file named by `SSL_CERT_FILE`);
    /// passed to the redis crate as it is.
    Redis(String),
    /// `redis-cluster://[user:password@]host:port[,host:port…]`: the seed nodes of a Redis
    /// Cluster, each as a `redis://` URL.
    RedisCluster(Vec<String>),
    /// `redlock://[user:password@]host:port,host:port…`: independent Redis servers, each as
    /// a `redis://` URL, locked by majority (Redlock).
    Redlock(Vec<String>),
    /// `memory://[name]`: an in-process server shared by the clients of this process that use
    /// the same name.
    Memory(String),
    /// `zk://[user:password@]host:port[,host:port…][/chroot][?session_timeout_ms=N]`.
    ZooKeeper(ZkUrl),
}

impl Backend {
    pub(crate) fn parse(url: &str) -> Result<Backend, Error> {
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(Error::InvalidUrl(format!(
                "{url:?} has no scheme (redis://, rediss://, zk://, memory://)"
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
                    Err(Error::InvalidUrl(format!(
                        "{url:?}: a memory:// name may only contain letters, digits, '-' and '_'"
                    )))
                }
            }
            "redis" | "rediss" => {
                use ::redis::IntoConnectionInfo;
                let info = url
                    .into_connection_info()
                    .map_err(|e| Error::InvalidUrl(format!("{url:?}: {e}")))?;
                if rest.is_empty() || rest.starts_with(['/', ':']) {
                    return Err(Error::InvalidUrl(format!("{url:?} names no host")));
                }
                drop(info);
                Ok(Backend::Redis(url.to_owned()))
            }
            "zk" => Ok(Backend::ZooKeeper(ZkUrl::parse(url, rest)?)),
            "redis-cluster" => node_urls(url, rest).map(Backend::RedisCluster),
            "redlock" => {
                let nodes = node_urls(url, rest)?;
                let distinct: std::collections::BTreeSet<&String> = nodes.iter().collect();
                if distinct.len() < nodes.len() {
                    return Err(Error::InvalidUrl(format!(
                        "{url:?} names a node twice: a majority must be of distinct servers"
                    )));
                }
                if nodes.len() > dlock_core::redlock::MAX_NODES as usize {
                    return Err(Error::InvalidUrl(format!(
                        "{url:?}: at most {} nodes",
                        dlock_core::redlock::MAX_NODES
                    )));
                }
                Ok(Backend::Redlock(nodes))
            }
            other => Err(Error::Unsupported(format!(
                "{url:?}: unknown scheme {other:?} (use redis://, rediss://, redis-cluster://, redlock://, zk:// or memory://)"
            ))),
        }
    }
}

/// The nodes of `redis-cluster://` or `redlock://[user:password@]host:port[,host:port…]` as
/// `redis://` URLs. No path: a cluster has only database 0, and Redlock nodes use theirs.
fn node_urls(url: &str, rest: &str) -> Result<Vec<String>, Error> {
    use ::redis::IntoConnectionInfo;
    let bad = |why: &str| Error::InvalidUrl(format!("{url:?}: {why}"));
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
}

impl Transport {
    /// Connects; notices (pub/sub messages, watches, connection changes) go to `inbox`.
    /// Returns the protocol the engine must speak over it.
    pub(crate) async fn connect(
        backend: &Backend,
        inbox: UnboundedSender<Input>,
    ) -> Result<(Transport, Protocol), Error> {
        Ok(match backend {
            Backend::Redis(url) => (
                Transport::Redis(redis::RedisTransport::connect(url, inbox).await?),
                Protocol::Redis,
            ),
            Backend::RedisCluster(nodes) => (
                Transport::Redis(redis::RedisTransport::connect_cluster(nodes, inbox).await?),
                Protocol::Redis,
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
        })
    }

    /// Performs one operation.
    pub(crate) fn execute(&self, op: Op) -> Pending {
        match (self, op) {
            (Transport::Redis(t), Op::Redis(op)) => t.execute(op),
            (Transport::Redlock(t), Op::Redlock { node, op }) => t.execute(node, op),
            (Transport::Memory(t), Op::Redis(op)) => t.execute(op),
            (Transport::Zk(t), Op::Zk(op)) => t.execute(op),
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
        }
    }
}
