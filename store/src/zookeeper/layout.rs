//! ZooKeeper's lock recipes as read, with no I/O: which node names are
//! contenders ([`parse_node`]), who holds each lock and who waits, and what
//! the dashboard's table must be told when nodes come and go ([`Table`]).
//!
//! A lock is a znode whose children are ephemeral sequential nodes, named by
//! the recipe in ZooKeeper's documentation (`lock-0000000007`, `read-…`,
//! `write-…`, or `<guid>-lock-…`), by Curator (`_c_<uuid>-lock-…`,
//! `_c_<uuid>-__READ__…`, `_c_<uuid>-__WRIT__…`) or by kazoo
//! (`<uuid>__lock__…`, `<uuid>__rlock__…`). The nodes are ordered by their
//! sequence (the last 10 digits, as every library sorts them); the holder is
//! the first, or, when the first is a reader, every reader ahead of the first
//! writer; the rest wait. Other children (persistent nodes, names no library
//! writes) are not contenders and are not shown. The lock's name is its path
//! below ROOT.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use lockscope_model::fleet::zookeeper::{ZkLock, ZkNode, ZkRecipe, ZK_DATA_KEEP_BYTES, ZK_NODES_KEPT};
use lockscope_model::fleet::FamilyDetail;
use lockscope_model::{FleetEvent, LockBody, LockEntry, Snapshot, Waiter};

/// What a child's name says: its sequence, whether it is a reader, whose recipe.
pub(crate) fn parse_node(name: &str) -> Option<(i64, bool, ZkRecipe)> {
    if name.len() < 10 || !name.is_char_boundary(name.len() - 10) {
        return None;
    }
    let (prefix, digits) = name.split_at(name.len() - 10);
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let sequence: i64 = digits.parse().ok()?;
    let (read, recipe) = if prefix.starts_with("_c_") {
        if prefix.ends_with("__READ__") {
            (true, ZkRecipe::Curator)
        } else if prefix.ends_with("__WRIT__") || prefix.ends_with("lock-") {
            (false, ZkRecipe::Curator)
        } else {
            return None;
        }
    } else if prefix.ends_with("__rlock__") {
        (true, ZkRecipe::Kazoo)
    } else if prefix.ends_with("__lock__") {
        (false, ZkRecipe::Kazoo)
    } else if prefix == "read-" {
        (true, ZkRecipe::Recipe)
    } else if prefix == "write-" || prefix.ends_with("lock-") {
        (false, ZkRecipe::Recipe)
    } else {
        return None;
    };
    Some((sequence, read, recipe))
}

/// A session id as ZooKeeper's tools print it.
pub(crate) fn session_hex(id: i64) -> String {
    format!("0x{:x}", id as u64)
}

/// A node's data as shown (`None`: empty).
pub(crate) fn data_text(data: &[u8]) -> Option<String> {
    crate::shown_text(data, ZK_DATA_KEEP_BYTES)
}

/// A contender as read: its stat and data.
pub(crate) fn node(name: &str, stat: &zookeeper_client::Stat, data: &[u8]) -> Option<ZkNode> {
    if stat.ephemeral_owner == 0 {
        return None;
    }
    let (sequence, read, recipe) = parse_node(name)?;
    Some(ZkNode {
        name: name.to_string(),
        sequence,
        read,
        recipe,
        session: session_hex(stat.ephemeral_owner),
        czxid: stat.czxid,
        version: stat.version,
        ctime: stat.ctime,
        data: data_text(data),
    })
}

/// The number of nodes holding a lock whose contenders are `nodes` (in order).
pub(crate) fn holders(nodes: &[ZkNode]) -> u32 {
    match nodes.first() {
        None => 0,
        Some(first) if first.read => nodes.iter().take_while(|n| n.read).count() as u32,
        Some(_) => 1,
    }
}

/// Lock `name` (at znode `path`) as its contenders make it, and the sessions
/// waiting for it (`None`: no contender).
pub(crate) fn derive(name: &str, path: &str, mut nodes: Vec<ZkNode>) -> Option<(LockEntry, BTreeSet<String>)> {
    let holder = nodes.first()?.clone();
    let holding = holders(&nodes);
    let waiters = nodes[holding as usize..].iter().map(|n| n.session.clone()).collect();
    let nodes_total = nodes.len() as u32;
    nodes.truncate(ZK_NODES_KEPT);
    let lock = ZkLock {
        path: path.to_string(),
        holders: holding,
        nodes,
        nodes_total,
        holder_timeout_ms: None,
    };
    let entry = LockEntry {
        name: name.to_string(),
        fence: holder.czxid,
        revision: 0,
        body: LockBody::Foreign {
            session: Some(holder.session),
            written_at: Some(holder.ctime),
            lease: None,
            proposal: None,
            key: None,
            detail: Some(Box::new(FamilyDetail::Zookeeper(lock))),
        },
    };
    Some((entry, waiters))
}

/// Every contender under ROOT by lock, and what the dashboard was last told:
/// the observer feeds it nodes and sends what [`Table::settle`] returns.
#[derive(Debug)]
pub(crate) struct Table {
    root: String,
    /// Contenders per lock name, by (sequence, node name).
    locks: HashMap<String, BTreeMap<(i64, String), ZkNode>>,
    /// The entry and waiters last sent per lock.
    shown: HashMap<String, (LockEntry, BTreeSet<String>)>,
    /// Sessions' negotiated timeouts, where the servers tell them ([`super::cons`]).
    timeouts: super::cons::Timeouts,
}

impl Table {
    pub(crate) fn new(root: &str) -> Table {
        Table {
            root: root.to_string(),
            locks: HashMap::new(),
            shown: HashMap::new(),
            timeouts: Default::default(),
        }
    }

    /// The lock name and child name of a node at absolute `path` (`None`:
    /// not below ROOT by at least a lock and a child).
    pub(crate) fn split<'p>(&self, path: &'p str) -> Option<(&'p str, &'p str)> {
        let below = super::below_root(&self.root, path)?;
        let (name, child) = below.rsplit_once('/')?;
        (!name.is_empty() && !child.is_empty()).then_some((name, child))
    }

    /// The absolute path of lock `name`.
    pub(crate) fn path_of(&self, name: &str) -> String {
        super::lock_path(&self.root, name)
    }

    /// A contender `node` of lock `name` (added or replaced).
    pub(crate) fn put(&mut self, name: &str, node: ZkNode) {
        let nodes = self.locks.entry(name.to_string()).or_default();
        nodes.retain(|(_, n), _| *n != node.name);
        nodes.insert((node.sequence, node.name.clone()), node);
    }

    /// Node `child` of lock `name` is gone; `true` if it was a contender.
    pub(crate) fn delete(&mut self, name: &str, child: &str) -> bool {
        let Some(nodes) = self.locks.get_mut(name) else {
            return false;
        };
        let before = nodes.len();
        nodes.retain(|(_, n), _| n != child);
        let removed = nodes.len() != before;
        if nodes.is_empty() {
            self.locks.remove(name);
        }
        removed
    }

    /// Lock `name` as it stands now, with its holder's session timeout if known.
    pub(crate) fn derive(&self, name: &str) -> Option<(LockEntry, BTreeSet<String>)> {
        let nodes = self.locks.get(name)?;
        let (mut entry, waiters) = derive(name, &self.path_of(name), nodes.values().cloned().collect())?;
        if let LockBody::Foreign {
            session: Some(s),
            detail: Some(d),
            ..
        } = &mut entry.body
        {
            let FamilyDetail::Zookeeper(lock) = &mut **d else {
                return Some((entry, waiters));
            };
            lock.holder_timeout_ms = self.timeouts.get(s.as_str()).copied();
        }
        Some((entry, waiters))
    }

    /// The holder's session of lock `name`.
    fn holder_session(&self, name: &str) -> Option<&str> {
        Some(self.locks.get(name)?.values().next()?.session.as_str())
    }

    /// Whether some holder's timeout is unknown.
    pub(crate) fn holder_timeout_unknown(&self, name: &str) -> bool {
        self.holder_session(name)
            .is_some_and(|s| !self.timeouts.contains_key(s))
    }

    /// Takes the sessions' timeouts as read now; returns the locks whose
    /// holder's timeout changed (to be settled).
    pub(crate) fn set_timeouts(&mut self, timeouts: super::cons::Timeouts) -> Vec<String> {
        let changed = self
            .locks
            .keys()
            .filter(|name| {
                self.holder_session(name)
                    .is_some_and(|s| self.timeouts.get(s) != timeouts.get(s))
            })
            .cloned()
            .collect();
        self.timeouts = timeouts;
        changed
    }

    /// The events that bring the dashboard from what it was told of `names`
    /// to what they are now, at `revision` (a new holder is the old one's
    /// release, then the new one's acquisition).
    pub(crate) fn settle(&mut self, names: impl IntoIterator<Item = String>, revision: i64) -> Vec<FleetEvent> {
        let mut locks = Vec::new();
        let mut waits = Vec::new();
        let names: BTreeSet<String> = names.into_iter().collect();
        for name in names {
            let now = self.derive(&name);
            let before = self.shown.remove(&name);
            let empty = BTreeSet::new();
            let old_waiters = before.as_ref().map_or(&empty, |b| &b.1);
            let new_waiters = now.as_ref().map_or(&empty, |n| &n.1);
            let waiter = |session: &String| Waiter {
                lock: name.clone(),
                session: session.clone(),
            };
            waits.extend(
                old_waiters
                    .difference(new_waiters)
                    .map(|s| FleetEvent::StoppedWaiting(waiter(s))),
            );
            waits.extend(
                new_waiters
                    .difference(old_waiters)
                    .map(|s| FleetEvent::Waiting(waiter(s))),
            );
            match (before, now) {
                (None, None) => {}
                (Some(_), None) => locks.push(FleetEvent::Remove {
                    name: name.clone(),
                    revision,
                }),
                (before, Some((mut entry, waiters))) => {
                    match before {
                        Some((old, _)) if old.fence == entry.fence && old.body == entry.body => {
                            entry.revision = old.revision;
                        }
                        before => {
                            if before.is_some_and(|(old, _)| old.fence != entry.fence) {
                                locks.push(FleetEvent::Remove {
                                    name: name.clone(),
                                    revision,
                                });
                            }
                            entry.revision = revision;
                            locks.push(FleetEvent::Upsert(entry.clone()));
                        }
                    }
                    self.shown.insert(name, (entry, waiters));
                }
            }
        }
        locks.extend(waits);
        locks
    }

    /// The whole table as one reset at `revision`; what was shown becomes
    /// exactly this (unchanged locks keep the revision they were sent with).
    pub(crate) fn snapshot(&mut self, revision: i64) -> Snapshot {
        let mut shown = HashMap::with_capacity(self.locks.len());
        let mut snap = Snapshot {
            revision,
            ..Snapshot::default()
        };
        for name in self.locks.keys() {
            let Some((mut entry, waiters)) = self.derive(name) else {
                continue;
            };
            entry.revision = match self.shown.get(name) {
                Some((old, _)) if old.fence == entry.fence && old.body == entry.body => old.revision,
                _ => revision,
            };
            snap.waiters.extend(waiters.iter().map(|s| Waiter {
                lock: name.clone(),
                session: s.clone(),
            }));
            snap.locks.push(entry.clone());
            shown.insert(name.clone(), (entry, waiters));
        }
        snap.locks.sort_by(|a, b| a.name.cmp(&b.name));
        self.shown = shown;
        snap
    }

    /// Forgets every node (before a fresh read); what was shown is kept.
    pub(crate) fn clear(&mut self) {
        self.locks.clear();
    }

    /// How many locks have contenders.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.locks.len()
    }
}

#[cfg(test)]
#[path = "layout_tests.rs"]
mod tests;
