//! `memory://`: the protocol's reference store, in process. The same code the deterministic
//! simulation runs, so it behaves like Redis running the same scripts.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use dlock_core::redis::reference::Store;
use dlock_core::redis::{RedisOp, Value};
use dlock_core::{Notice, Response, TransportError};

use super::Pending;
use crate::driver::Inbox;

/// Server time starts at a plausible wall-clock value and advances with a monotonic clock.
const EPOCH_MS: u64 = 1_700_000_000_000;

#[derive(Debug)]
struct Server {
    store: Mutex<Store>,
    subscribers: Mutex<BTreeMap<String, Inbox>>,
    started: Instant,
}

impl Server {
    fn now_ms(&self) -> u64 {
        EPOCH_MS + self.started.elapsed().as_millis() as u64
    }
}

fn server(name: &str) -> Arc<Server> {
    static SERVERS: OnceLock<Mutex<BTreeMap<String, Arc<Server>>>> = OnceLock::new();
    let mut servers = SERVERS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    servers
        .entry(name.to_owned())
        .or_insert_with(|| {
            Arc::new(Server {
                store: Mutex::new(Store::new()),
                subscribers: Mutex::default(),
                started: Instant::now(),
            })
        })
        .clone()
}

#[derive(Debug, Clone)]
pub(crate) struct MemoryTransport {
    server: Arc<Server>,
    inbox: Inbox,
}

impl MemoryTransport {
    pub(crate) fn connect(name: &str, inbox: Inbox) -> Self {
        Self {
            server: server(name),
            inbox,
        }
    }

    pub(crate) fn execute(&self, op: RedisOp) -> Pending {
        let reply = match op {
            RedisOp::Subscribe { channel } => {
                self.server
                    .subscribers
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(channel, self.inbox.clone());
                Ok(Value::Status("OK".into()))
            }
            RedisOp::Eval { script, keys, args } => {
                let outcome = {
                    let mut store = self.server.store.lock().unwrap_or_else(|e| e.into_inner());
                    store.eval(self.server.now_ms(), script, &keys, &args)
                };
                match outcome {
                    Ok(outcome) => {
                        let subscribers = self
                            .server
                            .subscribers
                            .lock()
                            .unwrap_or_else(|e| e.into_inner());
                        for (channel, payload) in outcome.published {
                            if let Some(to) = subscribers.get(&channel) {
                                to.send(Notice::Message { channel, payload });
                            }
                        }
                        Ok(outcome.reply)
                    }
                    Err(e) => Err(TransportError::Server(e)),
                }
            }
        };
        Box::pin(async move { reply.map(Response::Redis) })
    }

    pub(crate) fn close(&self) {
        let mut subscribers = self
            .server
            .subscribers
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        subscribers.retain(|_, to| !to.same_channel(&self.inbox));
    }
}
