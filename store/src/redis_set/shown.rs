//! What the dashboard was last told of each Redis lock, and the events that
//! bring it to what was read now: only what changed. A lock read again with
//! the same holder, count, waiters and expiry sends nothing (a reconciling
//! rescan of an unchanged database emits no event); a TTL is compared as the
//! instant it runs out (within [`TTL_SLACK_MS`]), so the clock ticking is not
//! a change but an extension is. A new holder is the old one's release, then
//! the new one's acquisition (as for etcd's mutexes).

use std::collections::{BTreeSet, HashMap};

use lockscope_model::fleet::FamilyDetail;
use lockscope_model::{FleetEvent, LockBody, LockEntry, Snapshot, Waiter};

/// How far two reads of one expiry may disagree and still be the same
/// expiry (the time between the read and `read_at`).
pub(crate) const TTL_SLACK_MS: i64 = 250;

/// A lock as read, with the sessions waiting for it.
pub(crate) type Found = (LockEntry, BTreeSet<String>);

#[derive(Debug, Default)]
pub(crate) struct Shown {
    locks: HashMap<String, Found>,
}

/// `e` without when it was read, and the instants its TTLs run out.
fn timeless(e: &LockEntry) -> (LockEntry, Vec<Option<i64>>) {
    let mut e = e.clone();
    let mut ends = Vec::new();
    if let LockBody::Foreign { key, detail, .. } = &mut e.body {
        let read_at = key.as_ref().map_or(0, |k| k.read_at);
        if let Some(k) = key {
            ends.push(k.ttl_ms.map(|t| k.read_at + t));
            k.ttl_ms = None;
            k.read_at = 0;
        }
        if let Some(d) = detail {
            if let FamilyDetail::Redlock(r) = &mut **d {
                for m in &mut r.masters {
                    ends.push(m.ttl_ms.take().map(|t| read_at + t));
                }
            }
        }
    }
    e.revision = 0;
    (e, ends)
}

/// Whether `new` says nothing `old` did not (see the module docs).
pub(crate) fn same(old: &LockEntry, new: &LockEntry) -> bool {
    let ((a, a_ends), (b, b_ends)) = (timeless(old), timeless(new));
    a == b
        && a_ends.len() == b_ends.len()
        && a_ends.iter().zip(&b_ends).all(|(x, y)| match (x, y) {
            (Some(x), Some(y)) => (x - y).abs() <= TTL_SLACK_MS,
            (None, None) => true,
            _ => false,
        })
}

impl Shown {
    /// Everything read, as one reset: what was shown becomes exactly this.
    /// An unchanged lock keeps the revision it was last sent with.
    pub(crate) fn reset(&mut self, found: Vec<Found>, revision: i64) -> Snapshot {
        let mut snap = Snapshot {
            revision,
            ..Snapshot::default()
        };
        let mut locks = HashMap::with_capacity(found.len());
        for (mut entry, waiters) in found {
            if let Some((old, _)) = self.locks.get(&entry.name).filter(|(old, _)| same(old, &entry)) {
                entry = old.clone();
            }
            snap.waiters.extend(waiters.iter().map(|s| Waiter {
                lock: entry.name.clone(),
                session: s.clone(),
            }));
            snap.locks.push(entry.clone());
            locks.insert(entry.name.clone(), (entry, waiters));
        }
        snap.locks.sort_by(|a, b| a.name.cmp(&b.name));
        self.locks = locks;
        snap
    }

    /// The names shown now.
    pub(crate) fn names(&self) -> impl Iterator<Item = &String> {
        self.locks.keys()
    }

    /// The events that bring what was shown of `names` to `found` (a name
    /// not in `found` is no longer held); `revision` numbers each event.
    pub(crate) fn settle(
        &mut self,
        names: impl IntoIterator<Item = String>,
        found: Vec<Found>,
        mut revision: impl FnMut() -> i64,
    ) -> Vec<FleetEvent> {
        let mut now: HashMap<String, Found> = found.into_iter().map(|f| (f.0.name.clone(), f)).collect();
        let mut names: BTreeSet<String> = names.into_iter().collect();
        names.extend(now.keys().cloned());
        let (mut locks, mut waits) = (Vec::new(), Vec::new());
        for name in names {
            let before = self.locks.remove(&name);
            let after = now.remove(&name);
            let empty = BTreeSet::new();
            let (old_w, new_w) = (
                before.as_ref().map_or(&empty, |b| &b.1),
                after.as_ref().map_or(&empty, |a| &a.1),
            );
            let waiter = |s: &String| Waiter {
                lock: name.clone(),
                session: s.clone(),
            };
            waits.extend(old_w.difference(new_w).map(|s| FleetEvent::StoppedWaiting(waiter(s))));
            waits.extend(new_w.difference(old_w).map(|s| FleetEvent::Waiting(waiter(s))));
            match (before, after) {
                (None, None) => {}
                (Some(_), None) => locks.push(FleetEvent::Remove {
                    name: name.clone(),
                    revision: revision(),
                }),
                (before, Some((mut entry, waiters))) => {
                    match before {
                        Some((old, _)) if same(&old, &entry) => entry = old,
                        Some((old, _)) => {
                            if old.fence != entry.fence {
                                locks.push(FleetEvent::Remove {
                                    name: name.clone(),
                                    revision: revision(),
                                });
                            }
                            entry.revision = revision();
                            locks.push(FleetEvent::Upsert(entry.clone()));
                        }
                        None => {
                            entry.revision = revision();
                            locks.push(FleetEvent::Upsert(entry.clone()));
                        }
                    }
                    self.locks.insert(name.clone(), (entry, waiters));
                }
            }
        }
        locks.extend(waits);
        locks
    }
}
