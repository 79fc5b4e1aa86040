//! A reference ZooKeeper in memory: the node tree, sessions, ephemeral and sequential nodes
//! and one-shot data watches, as far as the protocol uses them. The simulation runs against
//! it; the session clock is the caller's.

use std::collections::{BTreeMap, BTreeSet};

use crate::zk::{ZkOp, ZkReply};

/// A session id, as the server hands them out.
pub type SessionId = u64;

#[derive(Debug, Clone, Default)]
struct Node {
    /// The session of an ephemeral node.
    ephemeral: Option<SessionId>,
    /// A container node (as Curator creates a lock's directory): the server deletes it as
    /// soon as it has had children and has none. Its clients cannot tell it from a persistent
    /// node (ZooKeeper reports its `ephemeralOwner` as 0).
    container: bool,
    /// Counts child creations and deletions; the next sequential child gets its value.
    cversion: u64,
    data: String,
}

/// Why a request failed, as a transport would report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The session is closed or expired.
    SessionExpired,
}

/// The outcome of one operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub reply: ZkReply,
    /// Watches that fired: (session, watched path).
    pub fired: Vec<(SessionId, String)>,
}

#[derive(Clone, Debug, Default)]
pub struct Store {
    nodes: BTreeMap<String, Node>,
    sessions: BTreeSet<SessionId>,
    next_session: SessionId,
    /// path → sessions watching its data (and its deletion).
    watches: BTreeMap<String, BTreeSet<SessionId>>,
    /// path → sessions watching its children (and its deletion).
    child_watches: BTreeMap<String, BTreeSet<SessionId>>,
}

impl Store {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn open_session(&mut self) -> SessionId {
        self.next_session += 1;
        self.sessions.insert(self.next_session);
        self.next_session
    }

    pub fn is_live(&self, session: SessionId) -> bool {
        self.sessions.contains(&session)
    }

    /// Ends a session: its ephemeral nodes go, and the watches on them fire.
    pub fn expire(&mut self, session: SessionId) -> Vec<(SessionId, String)> {
        if !self.sessions.remove(&session) {
            return Vec::new();
        }
        for watchers in self
            .watches
            .values_mut()
            .chain(self.child_watches.values_mut())
        {
            watchers.remove(&session);
        }
        let doomed: Vec<String> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.ephemeral == Some(session))
            .map(|(p, _)| p.clone())
            .collect();
        doomed.into_iter().flat_map(|p| self.remove(&p)).collect()
    }

    /// Creates `path` (its parent exists) as a container node, as Curator's
    /// `creatingParentContainersIfNeeded` does.
    pub fn create_container(&mut self, path: &str) {
        self.create(path, None);
        if let Some(n) = self.nodes.get_mut(path) {
            n.container = true;
        }
    }

    /// The session that owns an ephemeral node.
    pub fn ephemeral_owner(&self, path: &str) -> Option<SessionId> {
        self.nodes.get(path)?.ephemeral
    }

    /// The names of `path`'s children.
    pub fn children(&self, path: &str) -> Vec<String> {
        let prefix = format!("{path}/");
        self.nodes
            .range(prefix.clone()..)
            .take_while(|(p, _)| p.starts_with(&prefix))
            .filter_map(|(p, _)| {
                let rest = &p[prefix.len()..];
                (!rest.contains('/')).then(|| rest.to_owned())
            })
            .collect()
    }

    pub fn execute(&mut self, session: SessionId, op: &ZkOp) -> Result<Outcome, Refused> {
        if !self.is_live(session) {
            return Err(Refused::SessionExpired);
        }
        let mut fired = Vec::new();
        let reply = match op {
            ZkOp::CreateParents { path } => {
                let mut at = 0;
                while let Some(i) = path[at + 1..].find('/').map(|i| i + at + 1) {
                    fired.extend(self.create(&path[..i], None));
                    at = i;
                }
                fired.extend(self.create(path, None));
                ZkReply::Done
            }
            ZkOp::CreateSequential { prefix } => {
                let parent = prefix.rsplit_once('/').map_or("", |(p, _)| p);
                match self.nodes.get(parent) {
                    Some(p) if p.ephemeral.is_none() => {
                        let path = format!("{prefix}{:010}", p.cversion);
                        fired = self.create(&path, Some(session));
                        ZkReply::Created(path)
                    }
                    _ => ZkReply::NoNode,
                }
            }
            ZkOp::CreateEphemeral { path } => {
                let parent = path.rsplit_once('/').map_or("", |(p, _)| p);
                match self.nodes.get(parent) {
                    _ if self.nodes.contains_key(path) => ZkReply::NodeExists,
                    Some(p) if p.ephemeral.is_none() => {
                        fired = self.create(path, Some(session));
                        ZkReply::Created(path.clone())
                    }
                    _ => ZkReply::NoNode,
                }
            }
            ZkOp::Delete { path } => {
                if self.nodes.contains_key(path) && self.children(path).is_empty() {
                    fired = self.remove(path);
                    ZkReply::Done
                } else {
                    ZkReply::NoNode
                }
            }
            ZkOp::Children { path } => {
                if self.nodes.contains_key(path) {
                    ZkReply::Children(self.children(path))
                } else {
                    ZkReply::NoNode
                }
            }
            ZkOp::Watch { path } => {
                if self.nodes.contains_key(path) {
                    self.watches
                        .entry(path.clone())
                        .or_default()
                        .insert(session);
                    ZkReply::Done
                } else {
                    ZkReply::NoNode
                }
            }
            ZkOp::Exists { path } => {
                if self.nodes.contains_key(path) {
                    ZkReply::Done
                } else {
                    ZkReply::NoNode
                }
            }
            ZkOp::SetData { path, data } => match self.nodes.get_mut(path) {
                Some(node) => {
                    node.data = data.clone();
                    fired = Self::fire(&mut self.watches, path);
                    ZkReply::Done
                }
                None => ZkReply::NoNode,
            },
            ZkOp::GetData { path, watch } => match self.nodes.get(path) {
                Some(node) => {
                    let data = node.data.clone();
                    if *watch {
                        let watchers = self.watches.entry(path.clone()).or_default();
                        watchers.insert(session);
                    }
                    ZkReply::Data(data)
                }
                None => ZkReply::NoNode,
            },
            ZkOp::WatchChildren { path } => {
                if self.nodes.contains_key(path) {
                    let watchers = self.child_watches.entry(path.clone()).or_default();
                    watchers.insert(session);
                    ZkReply::Children(self.children(path))
                } else {
                    ZkReply::NoNode
                }
            }
        };
        Ok(Outcome { reply, fired })
    }

    /// Creates `path` (empty); the parent's child watches fire.
    fn create(&mut self, path: &str, ephemeral: Option<SessionId>) -> Vec<(SessionId, String)> {
        if path.is_empty() || self.nodes.contains_key(path) {
            return Vec::new();
        }
        let mut fired = Vec::new();
        if let Some((parent, _)) = path.rsplit_once('/')
            && let Some(p) = self.nodes.get_mut(parent)
        {
            p.cversion += 1;
            fired = Self::fire(&mut self.child_watches, parent);
        }
        self.nodes.insert(
            path.to_owned(),
            Node {
                ephemeral,
                ..Node::default()
            },
        );
        fired
    }

    /// The one-shot watches of `path` in `watches`, fired.
    fn fire(
        watches: &mut BTreeMap<String, BTreeSet<SessionId>>,
        path: &str,
    ) -> Vec<(SessionId, String)> {
        let watchers = watches.remove(path).into_iter().flatten();
        watchers.map(|s| (s, path.to_owned())).collect()
    }

    /// Removes `path`; an empty container parent goes with it (ZooKeeper's ContainerManager
    /// does so within a minute, here at once: the worst case).
    fn remove(&mut self, path: &str) -> Vec<(SessionId, String)> {
        self.nodes.remove(path);
        let mut fired = Self::fire(&mut self.watches, path);
        fired.extend(Self::fire(&mut self.child_watches, path));
        if let Some((parent, _)) = path.rsplit_once('/')
            && let Some(p) = self.nodes.get_mut(parent)
        {
            p.cversion += 1;
            fired.extend(Self::fire(&mut self.child_watches, parent));
            if p.container && self.children(parent).is_empty() {
                fired.extend(self.remove(parent));
            }
        }
        fired
    }
}
