//! Transports: they perform the engine's requests verbatim and report replies and notices.
//! They decide nothing.

mod memory;
mod redis;

use std::future::Future;
use std::pin::Pin;

use dlock_core::redis::RedisOp;
use dlock_core::{Input, Reply};
use tokio::sync::mpsc::UnboundedSender;

use crate::Error;

/// A backend named by a URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Backend {
    /// `redis://[user:password@]host[:port][/db]`, or `rediss://…` for TLS (server certificates
    /// are verified against the system's roots, or the PEM file named by `SSL_CERT_FILE`);
    /// passed to the redis crate as it is.
    Redis(String),
    /// `memory://[name]`: an in-process server shared by the clients of this process that use
    /// the same name.
    Memory(String),
}

impl Backend {
    pub(crate) fn parse(url: &str) -> Result<Backend, Error> {
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(Error::InvalidUrl(format!(
                "{url:?} has no scheme (redis://, rediss://, memory://)"
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
            "zk" | "redlock" | "redis-cluster" => Err(Error::Unsupported(format!(
                "{url:?}: the {scheme}:// backend is not available yet"
            ))),
            other => Err(Error::Unsupported(format!(
                "{url:?}: unknown scheme {other:?} (use redis://, rediss:// or memory://)"
            ))),
        }
    }
}

/// A reply, when it comes.
pub(crate) type Pending = Pin<Box<dyn Future<Output = Reply> + Send>>;

#[derive(Debug, Clone)]
pub(crate) enum Transport {
    Redis(redis::RedisTransport),
    Memory(memory::MemoryTransport),
}

impl Transport {
    /// Connects; notices (pub/sub messages, connection changes) go to `inbox`.
    pub(crate) async fn connect(
        backend: &Backend,
        inbox: UnboundedSender<Input>,
    ) -> Result<Transport, Error> {
        Ok(match backend {
            Backend::Redis(url) => {
                Transport::Redis(redis::RedisTransport::connect(url, inbox).await?)
            }
            Backend::Memory(name) => {
                Transport::Memory(memory::MemoryTransport::connect(name, inbox))
            }
        })
    }

    /// Performs one operation.
    pub(crate) fn execute(&self, op: RedisOp) -> Pending {
        match self {
            Transport::Redis(t) => t.execute(op),
            Transport::Memory(t) => t.execute(op),
        }
    }

    /// Stops delivering notices.
    pub(crate) fn close(&self) {
        match self {
            Transport::Redis(t) => t.close(),
            Transport::Memory(t) => t.close(),
        }
    }
}
