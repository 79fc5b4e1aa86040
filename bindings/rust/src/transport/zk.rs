//! `zk://[user:password@]host:port[,host:port…][/chroot][?session_timeout_ms=N]`: one
//! ZooKeeper session through the `zookeeper-client` crate. It performs the engine's
//! [`ZkOp`]s, forwards fired watches and session changes as notices, and opens a new session
//! when one expires. With credentials it authenticates with the `digest` scheme and creates
//! every node with the ACL "creator has all rights"; without, nodes are open to anyone.
//!
//! TLS, to servers' `secureClientPort`: `sslmode=require` (or `verify-ca`, `verify-full`)
//! verifies each server's certificate and name against the system's roots or the CA file
//! `sslrootcert=` names ([`super::ssl`]).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use dlock_core::zk::ZkOp;
use dlock_core::zk::ZkReply;
use dlock_core::{Notice, Response, TransportError};
use zookeeper_client as zk;

use super::Pending;
use crate::Error;
use crate::driver::Inbox;

/// What a `zk://` URL says. Its `Debug` shows no credentials.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct ZkUrl {
    /// `host:port,host:port`.
    pub(crate) hosts: String,
    /// A path that prefixes every node (created if missing), e.g. `/apps/billing`.
    pub(crate) chroot: Option<String>,
    /// `user:password` for the digest scheme.
    pub(crate) auth: Option<String>,
    pub(crate) session_timeout: Duration,
    /// TLS: `None` without; with, the CA file to verify against or `None` for the system's
    /// roots.
    pub(crate) tls: Option<Option<String>>,
}

impl std::fmt::Debug for ZkUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZkUrl")
            .field("hosts", &self.hosts)
            .field("chroot", &self.chroot)
            .field("auth", &self.auth.as_ref().map(|_| "***"))
            .field("session_timeout", &self.session_timeout)
            .field("tls", &self.tls)
            .finish()
    }
}

/// The session timeout asked for unless the URL says otherwise (kazoo's default; the
/// server may grant another within its tickTime bounds).
pub(crate) const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(10);

impl ZkUrl {
    /// `rest` is what follows `zk://`; `shown`, the URL as messages show it (no password).
    pub(crate) fn parse(shown: &str, rest: &str) -> Result<ZkUrl, Error> {
        let bad = |why: &str| Error::InvalidUrl(format!("{shown:?}: {why}"));
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (auth, rest) = match rest.rsplit_once('@') {
            Some((auth, rest)) if auth.contains(':') => (Some(auth.to_owned()), rest),
            Some(_) => return Err(bad("credentials must be user:password")),
            None => (None, rest),
        };
        let (hosts, chroot) = match rest.find('/') {
            Some(i) => (&rest[..i], Some(&rest[i..])),
            None => (rest, None),
        };
        if hosts.is_empty() {
            return Err(bad("names no host"));
        }
        for host in hosts.split(',') {
            let (name, port) = host
                .rsplit_once(':')
                .ok_or_else(|| bad("every host needs a port (host:2181)"))?;
            if name.is_empty() || port.parse::<u16>().map_or(true, |p| p == 0) {
                return Err(bad(&format!("{host:?} is not host:port")));
            }
        }
        let chroot = match chroot {
            None | Some("/") => None,
            Some(c) => {
                dlock_core::zk::check_root(c).map_err(|e| bad(&e.to_string()))?;
                Some(c.to_owned())
            }
        };
        let mut session_timeout = DEFAULT_SESSION_TIMEOUT;
        let mut ssl = super::ssl::SslQuery::default();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            if ssl
                .take(key, value)
                .map_err(|why| bad(why.trim_start_matches(": ")))?
            {
                continue;
            }
            match pair.split_once('=') {
                Some(("session_timeout_ms", ms)) => {
                    let ms: u64 = ms
                        .parse()
                        .ok()
                        .filter(|ms| *ms > 0)
                        .ok_or_else(|| bad("session_timeout_ms must be a positive integer"))?;
                    session_timeout = Duration::from_millis(ms);
                }
                _ => return Err(bad(&format!("unknown option {pair:?}"))),
            }
        }
        let tls = ssl
            .finish()
            .map_err(|why| bad(why.trim_start_matches(": ")))?;
        Ok(ZkUrl {
            hosts: hosts.to_owned(),
            chroot,
            auth,
            session_timeout,
            tls,
        })
    }
}

#[derive(Clone)]
pub(crate) struct ZkTransport {
    client: Arc<Mutex<zk::Client>>,
    acl: &'static [zk::Acl],
    inbox: Inbox,
    supervisor: Arc<tokio::task::AbortHandle>,
    /// The tasks waiting for a watch to fire: aborted before the session goes on close (the
    /// client library panics in a watch's wait once its session is dropped).
    watches: Watches,
}

/// The tasks of the watches set and not fired yet.
type Watches = Arc<Mutex<Vec<tokio::task::AbortHandle>>>;

impl std::fmt::Debug for ZkTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZkTransport").finish_non_exhaustive()
    }
}

static CREATOR_ALL: [zk::Acl; 1] = [zk::Acl::new_const(zk::Permission::ALL, "auth", "")];
static ANYONE_ALL: [zk::Acl; 1] = [zk::Acl::new_const(zk::Permission::ALL, "world", "anyone")];

impl ZkTransport {
    pub(crate) async fn connect(url: &ZkUrl, inbox: Inbox) -> Result<(Self, Duration), Error> {
        let acl: &'static [zk::Acl] = if url.auth.is_some() {
            &CREATOR_ALL
        } else {
            &ANYONE_ALL
        };
        let client = open(url, acl).await?;
        let session_timeout = client.session_timeout();
        let shared = Arc::new(Mutex::new(client.clone()));
        let task = tokio::spawn(supervise(
            url.clone(),
            acl,
            shared.clone(),
            client,
            inbox.clone(),
        ));
        Ok((
            ZkTransport {
                client: shared,
                acl,
                inbox,
                supervisor: Arc::new(task.abort_handle()),
                watches: Watches::default(),
            },
            session_timeout,
        ))
    }

    pub(crate) fn execute(&self, op: ZkOp) -> Pending {
        let client = self
            .client
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let acl = self.acl;
        let inbox = self.inbox.clone();
        let watches = self.watches.clone();
        let notify_once = move |watcher, path| notify_once(&watches, watcher, path, inbox);
        Box::pin(async move {
            let options = |mode: zk::CreateMode| mode.with_acls(zk::Acls::new(acl));
            let reply = match op {
                ZkOp::CreateParents { path } => client
                    .mkdir(&path, &options(zk::CreateMode::Persistent))
                    .await
                    .map(|()| ZkReply::Done),
                ZkOp::CreateSequential { prefix } => client
                    .create(&prefix, &[], &options(zk::CreateMode::EphemeralSequential))
                    .await
                    .map(|(_, seq)| ZkReply::Created(format!("{prefix}{seq}"))),
                ZkOp::CreateEphemeral { path } => {
                    match client
                        .create(&path, &[], &options(zk::CreateMode::Ephemeral))
                        .await
                    {
                        Err(zk::Error::NodeExists) => Ok(ZkReply::NodeExists),
                        created => created.map(|_| ZkReply::Created(path)),
                    }
                }
                ZkOp::Delete { path } => client.delete(&path, None).await.map(|()| ZkReply::Done),
                ZkOp::Children { path } => client.list_children(&path).await.map(ZkReply::Children),
                ZkOp::Watch { path } => {
                    client
                        .get_and_watch_data(&path)
                        .await
                        .map(|(_, _, watcher)| {
                            notify_once(watcher, path);
                            ZkReply::Done
                        })
                }
                ZkOp::Exists { path } => client.check_stat(&path).await.map(|stat| match stat {
                    Some(_) => ZkReply::Done,
                    None => ZkReply::NoNode,
                }),
                ZkOp::SetData { path, data } => client
                    .set_data(&path, data.as_bytes(), None)
                    .await
                    .map(|_| ZkReply::Done),
                ZkOp::GetData { path, watch: false } => client
                    .get_data(&path)
                    .await
                    .map(|(data, _)| ZkReply::Data(String::from_utf8_lossy(&data).into_owned())),
                ZkOp::GetData { path, watch: true } => {
                    client
                        .get_and_watch_data(&path)
                        .await
                        .map(|(data, _, watcher)| {
                            notify_once(watcher, path);
                            ZkReply::Data(String::from_utf8_lossy(&data).into_owned())
                        })
                }
                ZkOp::WatchChildren { path } => {
                    client
                        .list_and_watch_children(&path)
                        .await
                        .map(|(children, watcher)| {
                            notify_once(watcher, path);
                            ZkReply::Children(children)
                        })
                }
            };
            match reply {
                Ok(r) => Ok(Response::Zk(r)),
                Err(zk::Error::NoNode) => Ok(Response::Zk(ZkReply::NoNode)),
                Err(e) => Err(transport_error(e)),
            }
        })
    }

    pub(crate) fn close(&self) {
        let watches = std::mem::take(&mut *self.watches.lock().unwrap_or_else(|e| e.into_inner()));
        for watch in watches {
            watch.abort();
        }
        self.supervisor.abort();
    }
}

/// Opens a session on the URL's hosts, creating the chroot if it is missing.
async fn open(url: &ZkUrl, acl: &'static [zk::Acl]) -> Result<zk::Client, Error> {
    let fail = |e: String| Error::Connect(format!("zk://{}: {e}", url.hosts));
    let mut connector = zk::Client::connector()
        .with_session_timeout(url.session_timeout)
        .with_connection_timeout(Duration::from_secs(2));
    if let Some(auth) = &url.auth {
        connector = connector.with_auth("digest", auth.as_bytes());
    }
    if let Some(root) = &url.tls {
        let pem = super::ssl::roots_pem(root.as_deref()).map_err(&fail)?;
        let options = zk::TlsOptions::new()
            .with_pem_ca(&pem)
            .map_err(|e| fail(format!("CA certificates: {e}")))?;
        connector = connector.with_tls(options);
    }
    let connect = async {
        match url.tls {
            Some(_) => connector.secure_connect(&url.hosts).await,
            None => connector.connect(&url.hosts).await,
        }
    };
    let client = tokio::time::timeout(url.session_timeout.max(Duration::from_secs(5)), connect)
        .await
        .map_err(|_| fail("no session within the session timeout".into()))?
        .map_err(|e| fail(e.to_string()))?;
    let Some(chroot) = &url.chroot else {
        return Ok(client);
    };
    // `exists` needs no permission; creating under a protected parent would.
    let missing = client
        .check_stat(chroot)
        .await
        .map_err(|e| fail(format!("cannot look up chroot {chroot}: {e}")))?
        .is_none();
    if missing {
        let options = zk::CreateMode::Persistent.with_acls(zk::Acls::new(acl));
        client
            .mkdir(chroot, &options)
            .await
            .map_err(|e| fail(format!("cannot create chroot {chroot}: {e}")))?;
    }
    client
        .chroot(chroot.as_str())
        .map_err(|_| fail(format!("bad chroot {chroot}")))
}

/// Reports session changes as notices; when a session expires, opens a new one (retrying
/// until it succeeds) and reports `SessionExpired`, then `Connected`.
async fn supervise(
    url: ZkUrl,
    acl: &'static [zk::Acl],
    shared: Arc<Mutex<zk::Client>>,
    mut client: zk::Client,
    inbox: Inbox,
) {
    let notice = |n: Notice| inbox.send(n);
    loop {
        let mut states = client.state_watcher();
        loop {
            let state = states.changed().await;
            let sent = match state {
                zk::SessionState::Disconnected => notice(Notice::Disconnected),
                zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly => {
                    notice(Notice::Connected)
                }
                zk::SessionState::Expired => break,
                zk::SessionState::AuthFailed | zk::SessionState::Closed => {
                    notice(Notice::Closed);
                    return;
                }
            };
            if !sent {
                return;
            }
        }
        tracing::warn!("ZooKeeper session expired; opening a new one");
        if !notice(Notice::SessionExpired) {
            return;
        }
        let mut backoff = Duration::from_millis(50);
        client = loop {
            match open(&url, acl).await {
                Ok(c) => break c,
                Err(e) => {
                    tracing::warn!("ZooKeeper reconnect failed: {e}");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                }
            }
        };
        *shared.lock().unwrap_or_else(|e| e.into_inner()) = client.clone();
        if !notice(Notice::Connected) {
            return;
        }
    }
}

fn transport_error(e: zk::Error) -> TransportError {
    match e {
        zk::Error::ConnectionLoss
        | zk::Error::SessionExpired
        | zk::Error::ClientClosed
        | zk::Error::Timeout
        | zk::Error::SessionMoved => TransportError::Unavailable(e.to_string()),
        e => TransportError::Server(e.to_string()),
    }
}

/// Reports the one-shot `watcher` on `path` as a [`Notice::Watch`] when it fires (not for a
/// mere session event: the connection's own notices report those). Its task joins `watches`.
fn notify_once(watches: &Watches, watcher: zk::OneshotWatcher, path: String, inbox: Inbox) {
    let task = tokio::spawn(async move {
        let event = watcher.changed().await;
        if event.event_type != zk::EventType::Session {
            inbox.send(Notice::Watch { path });
        }
    });
    let mut watches = watches.lock().unwrap_or_else(|e| e.into_inner());
    watches.retain(|w| !w.is_finished());
    watches.push(task.abort_handle());
}
