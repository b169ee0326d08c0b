//! etcd's native mutex layout as read, with no I/O: which lock a key belongs
//! to, who holds each lock and who waits, and what the dashboard's table must
//! be told when keys come and go ([`Table`]).
//!
//! A contender's key is `PREFIX<NAME>/<lease id in hex>`, on that lease (what
//! `concurrency.Mutex` and `concurrency.Election` write, hence `etcdctl lock`
//! and `etcdctl elect`). The lock is `NAME`; its holder is the key with the
//! lowest create revision, whose create revision is the fencing token the
//! library hands out; the other keys are its waiters, in create-revision
//! order, which the entry carries ([`EtcdMutexLock`]: the fleet table keeps
//! waiters by session) with when each key's creation was seen live. A key that does not fit (no `/<lease>` after a name, a last segment
//! that is not hex, a key not on the lease it names) is shown as its own
//! malformed lock, named by everything after the prefix, never dropped.

use std::collections::{BTreeSet, HashMap};

use lockscope_model::fleet::etcd_mutex::{EtcdMutexLock, MutexWaiter, MUTEX_WAITERS_KEPT};
use lockscope_model::fleet::{FamilyDetail, LeaseInfo};
use lockscope_model::record::MALFORMED_KEEP_BYTES;
use lockscope_model::time::Millis;
use lockscope_model::{FleetEvent, LockBody, LockEntry, Snapshot, Waiter};

/// Longest election proposal shown (the rest is cut, on a char boundary).
/// Fixed: a proposal names the leader (a host, an address), which fits many
/// times over; the cut bounds what each lock of a fleet keeps in memory and
/// sends to every page.
pub(crate) const PROPOSAL_KEEP_BYTES: usize = 1024;

/// What the part of a key after the prefix names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Key {
    /// A contender for lock `name`, on lease `lease`.
    Contender { name: String, lease: i64 },
    /// Not the layout: shown as the malformed lock `name` (the whole rest).
    Malformed { name: String, error: String },
}

/// Reads `rest` (a key without the prefix). `on_lease`: the lease the key is
/// on (`None`: unknown, as in a delete event, which carries no lease).
pub(crate) fn parse_key(rest: &str, on_lease: Option<i64>) -> Key {
    let bad = |error: String| Key::Malformed {
        name: rest.to_string(),
        error,
    };
    let Some((name, suffix)) = rest.rsplit_once('/') else {
        return bad("not NAME/<lease id in hex>: no '/' in the key after the prefix".into());
    };
    if name.is_empty() {
        return bad("not NAME/<lease id in hex>: the lock name is empty".into());
    }
    let hex = !suffix.is_empty() && suffix.len() <= 16 && suffix.bytes().all(|b| b.is_ascii_hexdigit());
    let Some(lease) = hex.then(|| u64::from_str_radix(suffix, 16).ok()).flatten() else {
        return bad(format!(
            "not NAME/<lease id in hex>: {suffix:?} is not a lease id in hex"
        ));
    };
    let lease = lease as i64;
    match on_lease {
        Some(on) if on != lease => bad(format!(
            "the key names lease {lease:x} but is on {}",
            match on {
                0 => "no lease".to_string(),
                on => format!("lease {on:x}"),
            }
        )),
        _ => Key::Contender {
            name: name.to_string(),
            lease,
        },
    }
}

/// A lease id as etcd's tools print it.
pub(crate) fn lease_hex(lease: i64) -> String {
    format!("{lease:x}")
}

/// One key as last read.
#[derive(Clone, Debug)]
struct Stored {
    lease: i64,
    create: i64,
    modified: i64,
    value: Vec<u8>,
    /// Why the key is not the layout (`None`: a contender).
    error: Option<String>,
    /// When its creation was seen live (`None`: it came in a snapshot).
    created_at: Option<Millis>,
}

/// Every key of one lock name, by create revision (then key: one
/// transaction may create several).
#[derive(Clone, Debug, Default)]
struct Group {
    keys: BTreeSet<(i64, Vec<u8>)>,
}

/// The whole layout under a prefix, and what the dashboard was last told of
/// it: the observer feeds it keys, and sends what [`Table::settle`] returns.
#[derive(Debug, Default)]
pub(crate) struct Table {
    keys: HashMap<Vec<u8>, (String, Stored)>,
    groups: HashMap<String, Group>,
    /// The entry and waiters last sent per lock.
    shown: HashMap<String, (LockEntry, BTreeSet<String>)>,
    /// What `LeaseTimeToLive` said of each holder's lease.
    pub(crate) leases: HashMap<i64, LeaseInfo>,
}

impl Table {
    /// A put of `key` (`rest`: the key without the prefix). Returns the lock
    /// name it belongs to. `live_at`: when the observer's watch delivered it
    /// (`None`: read from a snapshot); a key created by this very put was
    /// then written at about that time, which gives its waiter's wait age.
    pub(crate) fn put(
        &mut self,
        key: &[u8],
        rest: &str,
        kv: &etcd_client::KeyValue,
        live_at: Option<Millis>,
    ) -> String {
        let created_at = live_at.filter(|_| kv.create_revision() == kv.mod_revision());
        let revs = (kv.create_revision(), kv.mod_revision(), created_at);
        self.put_at(key, rest, kv.lease(), revs, kv.value())
    }

    /// A put of a key read with no time of its creation (tests).
    #[cfg(test)]
    pub(crate) fn put_raw(
        &mut self,
        key: &[u8],
        rest: &str,
        lease: i64,
        create: i64,
        modified: i64,
        value: &[u8],
    ) -> String {
        self.put_at(key, rest, lease, (create, modified, None), value)
    }

    /// `revs`: create and mod revision, and when the key was created if known
    /// (a rewrite of the same key keeps the time its creation was seen).
    fn put_at(
        &mut self,
        key: &[u8],
        rest: &str,
        lease: i64,
        (create, modified, created_at): (i64, i64, Option<Millis>),
        value: &[u8],
    ) -> String {
        let kept = self
            .keys
            .get(key)
            .filter(|(_, s)| s.create == create)
            .and_then(|(_, s)| s.created_at);
        self.delete(key);
        let (name, lease, error) = match parse_key(rest, Some(lease)) {
            Key::Contender { name, lease } => (name, lease, None),
            Key::Malformed { name, error } => (name, lease, Some(error)),
        };
        let stored = Stored {
            lease,
            create,
            modified,
            value: value.to_vec(),
            error,
            created_at: created_at.or(kept),
        };
        self.groups
            .entry(name.clone())
            .or_default()
            .keys
            .insert((create, key.to_vec()));
        self.keys.insert(key.to_vec(), (name.clone(), stored));
        name
    }

    /// A delete of `key`: the lock name it belonged to, if it was known.
    pub(crate) fn delete(&mut self, key: &[u8]) -> Option<String> {
        let (name, stored) = self.keys.remove(key)?;
        if let Some(group) = self.groups.get_mut(&name) {
            group.keys.remove(&(stored.create, key.to_vec()));
            if group.keys.is_empty() {
                self.groups.remove(&name);
            }
        }
        Some(name)
    }

    /// The holder's key of lock `name`: (key, lease, create revision, mod revision).
    pub(crate) fn holder(&self, name: &str) -> Option<(&[u8], i64, i64, i64)> {
        let group = self.groups.get(name)?;
        group.keys.iter().find_map(|(_, k)| {
            let (_, s) = self.keys.get(k)?;
            s.error
                .is_none()
                .then_some((k.as_slice(), s.lease, s.create, s.modified))
        })
    }

    /// The leases holding locks `names` now.
    pub(crate) fn holder_leases<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> BTreeSet<i64> {
        names.into_iter().filter_map(|n| self.holder(n)).map(|h| h.1).collect()
    }

    /// The locks held now by any of `leases` (one pass over the table).
    pub(crate) fn names_held_by(&self, leases: &BTreeSet<i64>) -> Vec<String> {
        self.groups
            .keys()
            .filter(|n| self.holder(n).is_some_and(|h| leases.contains(&h.1)))
            .cloned()
            .collect()
    }

    /// The leases holding any lock now.
    pub(crate) fn all_holder_leases(&self) -> BTreeSet<i64> {
        self.holder_leases(self.groups.keys().map(String::as_str))
    }

    /// Lock `name` as it stands (its revision 0) and the sessions (leases in
    /// hex) waiting for it. The first contender holds it; a lock of only
    /// malformed keys shows the oldest of them.
    pub(crate) fn derive(&self, name: &str) -> Option<(LockEntry, BTreeSet<String>)> {
        let group = self.groups.get(name)?;
        let stored: Vec<&Stored> = group
            .keys
            .iter()
            .filter_map(|(_, k)| self.keys.get(k))
            .map(|(_, s)| s)
            .collect();
        let mut contenders = stored.iter().filter(|s| s.error.is_none());
        let Some(holder) = contenders.next() else {
            let first = stored.first()?;
            let mut raw = first.value.clone();
            raw.truncate(MALFORMED_KEEP_BYTES);
            let entry = LockEntry {
                name: name.to_string(),
                fence: first.create,
                revision: 0,
                body: LockBody::Malformed {
                    raw,
                    error: first.error.clone().unwrap_or_default(),
                },
            };
            return Some((entry, BTreeSet::new()));
        };
        let contenders: Vec<&&Stored> = contenders.collect();
        let queue: Vec<MutexWaiter> = contenders
            .iter()
            .take(MUTEX_WAITERS_KEPT)
            .map(|s| MutexWaiter {
                lease: lease_hex(s.lease),
                create_revision: s.create,
                created_at: s.created_at,
            })
            .collect();
        let waiters = contenders.iter().map(|s| lease_hex(s.lease)).collect();
        // Only a lock with waiters carries the queue: the hub keeps every
        // lock's body, and most locks have none.
        let detail = (!queue.is_empty()).then(|| Box::new(FamilyDetail::EtcdMutex(EtcdMutexLock { waiters: queue })));
        let entry = LockEntry {
            name: name.to_string(),
            fence: holder.create,
            revision: 0,
            body: LockBody::Foreign {
                session: Some(lease_hex(holder.lease)),
                written_at: None,
                lease: self.leases.get(&holder.lease).cloned().map(Box::new),
                proposal: proposal_of(&holder.value),
                key: None,
                detail,
            },
        };
        Some((entry, waiters))
    }

    /// The events that bring the dashboard from what it was told of `names`
    /// to what they are now, as of the store change at `revision` (a holder
    /// that changed is the old one's release, then the new one's acquisition).
    pub(crate) fn settle(&mut self, names: impl IntoIterator<Item = String>, revision: i64) -> Vec<FleetEvent> {
        let mut locks = Vec::new();
        let mut waits = Vec::new();
        let names: BTreeSet<String> = names.into_iter().collect();
        for name in names {
            let now = self.derive(&name);
            let before = self.shown.remove(&name);
            let (old_waiters, new_waiters) = (
                before.as_ref().map(|b| b.1.clone()).unwrap_or_default(),
                now.as_ref().map(|n| n.1.clone()).unwrap_or_default(),
            );
            let waiter = |session: &String| Waiter {
                lock: name.clone(),
                session: session.clone(),
            };
            waits.extend(
                old_waiters
                    .difference(&new_waiters)
                    .map(|s| FleetEvent::StoppedWaiting(waiter(s))),
            );
            waits.extend(
                new_waiters
                    .difference(&old_waiters)
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
                        Some((old, _)) => {
                            if old.fence != entry.fence {
                                locks.push(FleetEvent::Remove {
                                    name: name.clone(),
                                    revision,
                                });
                            }
                            entry.revision = revision;
                            locks.push(FleetEvent::Upsert(entry.clone()));
                        }
                        None => {
                            entry.revision = revision;
                            locks.push(FleetEvent::Upsert(entry.clone()));
                        }
                    }
                    self.shown.insert(name.clone(), (entry, waiters));
                }
            }
        }
        locks.extend(waits);
        locks
    }

    /// The whole table at store revision `revision`, as one reset; what was
    /// shown becomes exactly this. Each lock keeps the revision it was last
    /// sent with, or gets its holder key's mod revision.
    pub(crate) fn snapshot(&mut self, revision: i64) -> Snapshot {
        let names: Vec<String> = self.groups.keys().cloned().collect();
        let mut shown = HashMap::with_capacity(names.len());
        let mut snap = Snapshot {
            revision,
            ..Snapshot::default()
        };
        for name in names {
            let Some((mut entry, waiters)) = self.derive(&name) else {
                continue;
            };
            entry.revision = match self.shown.get(&name) {
                Some((old, _)) if old.fence == entry.fence => old.revision,
                _ => self.holder(&name).map_or(entry.fence, |h| h.3),
            };
            snap.waiters.extend(waiters.iter().map(|s| Waiter {
                lock: name.clone(),
                session: s.clone(),
            }));
            snap.locks.push(entry.clone());
            shown.insert(name, (entry, waiters));
        }
        snap.locks.sort_by(|a, b| a.name.cmp(&b.name));
        self.shown = shown;
        // A lease is not a lockscope session: this store keeps none.
        snap
    }

    /// Forgets every key (before a fresh read after compaction); what was
    /// shown is kept, so the next snapshot keeps unchanged locks' revisions.
    pub(crate) fn clear_keys(&mut self) {
        self.keys.clear();
        self.groups.clear();
    }
}

/// An election's value as its proposal (`None`: empty, as a mutex's key is).
fn proposal_of(value: &[u8]) -> Option<String> {
    crate::shown_text(value, PROPOSAL_KEEP_BYTES)
}

#[cfg(test)]
mod tests;
