//! The live state of one fleet and the reducer that changes it.
//!
//! The server's hub runs [`FleetState::apply`] over a store's event stream. It
//! returns what *effectively* changed, as names ([`Changed`]): a full
//! [`FleetEvent::Reset`] (first snapshot, or a resync after the store compacted
//! the history we needed) becomes the names of just the locks that came, went or
//! changed, and the hub's views move exactly those.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::intern::Shared;
use crate::record::LockRecord;
use crate::time::Millis;
use crate::view::RowState;

/// One key under `<prefix>locks/`, as the store last showed it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockEntry {
    /// The lock's name (the key without `<prefix>locks/`).
    pub name: String,
    /// Fencing token: grows with every acquisition of this lock (etcd: `create_revision`).
    pub fence: i64,
    /// Store revision of the value shown (etcd: `mod_revision`); a guarded release
    /// compares on it.
    pub revision: i64,
    pub body: LockBody,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum LockBody {
    Held(LockRecord),
    /// The key exists but its value is not a record this build understands. Shown
    /// as such (the lock is still held as far as the store is concerned).
    Malformed {
        /// The stored bytes, cut to [`MALFORMED_KEEP_BYTES`].
        raw: Vec<u8>,
        error: String,
    },
}

/// How much of a malformed value is kept for display.
pub const MALFORMED_KEEP_BYTES: usize = 4096;

impl LockEntry {
    /// Builds an entry from a stored value; a value that does not parse becomes
    /// [`LockBody::Malformed`] carrying its bytes.
    pub fn from_stored(name: String, fence: i64, revision: i64, raw: &[u8]) -> LockEntry {
        let body = match LockRecord::parse(raw) {
            Ok(rec) => LockBody::Held(rec),
            Err(e) => LockBody::Malformed {
                raw: raw[..raw.len().min(MALFORMED_KEEP_BYTES)].to_vec(),
                error: e.to_string(),
            },
        };
        LockEntry {
            name,
            fence,
            revision,
            body,
        }
    }

    pub fn record(&self) -> Option<&LockRecord> {
        match &self.body {
            LockBody::Held(r) => Some(r),
            LockBody::Malformed { .. } => None,
        }
    }
}

/// A change to a fleet's lock table. Events carry store revisions, so replaying one
/// twice, or out of order for the same lock, changes nothing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum FleetEvent {
    /// The complete table at `revision`, waiters included.
    Reset {
        revision: i64,
        locks: Vec<LockEntry>,
        #[serde(default)]
        waiters: Vec<Waiter>,
    },
    /// A lock was taken, or its record changed.
    Upsert(LockEntry),
    /// A lock was released (deleted at `revision`).
    Remove { name: String, revision: i64 },
    /// A session started waiting for a lock.
    Waiting(Waiter),
    /// A session stopped waiting (it got the lock, gave up, or died).
    StoppedWaiting(Waiter),
}

/// What an event effectively changed: the hub's views re-read these from the
/// table (a lock that is gone was removed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Changed {
    /// The lock was taken, changed or released.
    Lock(String),
    /// Somebody started or stopped waiting for this lock.
    Waiters(String),
}

/// A session blocked on a lock.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Waiter {
    pub lock: String,
    pub session: String,
}

/// A fleet's headline numbers at one instant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Every lock entry, malformed ones included.
    pub held: u64,
    pub overdue: u64,
    pub expired: u64,
    pub malformed: u64,
    /// Sessions waiting for a lock.
    pub waiters: u64,
}

/// The connection between the server and one store, on the server's clock.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum StoreStatus {
    /// Not yet connected since the server started.
    Connecting { since: Millis },
    /// Snapshot taken and watch running.
    Live { since: Millis },
    /// The store cannot be reached; the table shows the last known truth.
    Unreachable {
        since: Millis,
        error: String,
        retry_at: Millis,
    },
}

impl Default for StoreStatus {
    fn default() -> Self {
        StoreStatus::Connecting { since: 0 }
    }
}

/// An entry ordered and looked up by its name, so the table stores each name once.
#[derive(Clone, Debug, PartialEq, Eq)]
struct ByName(LockEntry);

impl Ord for ByName {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.name.cmp(&other.0.name)
    }
}

impl PartialOrd for ByName {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl std::borrow::Borrow<str> for ByName {
    fn borrow(&self) -> &str {
        &self.0.name
    }
}

/// The lock table of one fleet.
#[derive(Clone, Debug, Default)]
pub struct FleetState {
    locks: BTreeSet<ByName>,
    /// Ordered by lock, then session: the waiters of one lock are a range.
    waiters: BTreeSet<Waiter>,
    revision: i64,
    /// A cache of the locks' shared values, no part of the state (not compared).
    shared: Shared,
}

impl PartialEq for FleetState {
    fn eq(&self, other: &Self) -> bool {
        self.locks == other.locks && self.waiters == other.waiters && self.revision == other.revision
    }
}

impl Eq for FleetState {}

impl FleetState {
    /// Applies one event and returns what actually changed, in a deterministic
    /// order. Stale and duplicate events return nothing.
    pub fn apply(&mut self, event: FleetEvent) -> Vec<Changed> {
        match event {
            FleetEvent::Waiting(w) => match self.waiters.insert(w.clone()) {
                true => vec![Changed::Waiters(w.lock)],
                false => Vec::new(),
            },
            FleetEvent::StoppedWaiting(w) => match self.waiters.remove(&w) {
                true => vec![Changed::Waiters(w.lock)],
                false => Vec::new(),
            },
            FleetEvent::Reset {
                revision,
                locks,
                waiters,
            } => {
                let mut changes = Vec::new();
                let mut fresh: BTreeSet<ByName> = BTreeSet::new();
                for mut e in locks {
                    if self.get(&e.name) != Some(&e) {
                        changes.push(Changed::Lock(e.name.clone()));
                    }
                    self.shared.intern(&mut e);
                    fresh.replace(ByName(e));
                }
                // Absent from the whole truth: removed, whatever the store's revision
                // scheme (a SQL row's own counter can run ahead of the reset's).
                changes.extend(
                    self.locks
                        .iter()
                        .filter(|e| !fresh.contains(e.0.name.as_str()))
                        .map(|e| Changed::Lock(e.0.name.clone())),
                );
                self.locks = fresh;
                let waiters: BTreeSet<Waiter> = waiters.into_iter().collect();
                let mut moved: Vec<String> = self
                    .waiters
                    .symmetric_difference(&waiters)
                    .map(|w| w.lock.clone())
                    .collect();
                moved.dedup();
                changes.extend(moved.into_iter().map(Changed::Waiters));
                self.waiters = waiters;
                // A reset is the whole truth, even if the store went back in time
                // (restored from a backup): its revision replaces ours.
                self.revision = revision;
                changes
            }
            FleetEvent::Upsert(mut entry) => {
                self.revision = self.revision.max(entry.revision);
                match self.get(&entry.name) {
                    Some(old) if old.revision >= entry.revision => Vec::new(),
                    _ => {
                        self.shared.intern(&mut entry);
                        let name = entry.name.clone();
                        self.locks.replace(ByName(entry));
                        vec![Changed::Lock(name)]
                    }
                }
            }
            FleetEvent::Remove { name, revision } => {
                self.revision = self.revision.max(revision);
                match self.get(&name) {
                    // Not older than what we show (a store's delete always has a
                    // higher revision than the put).
                    Some(old) if old.revision <= revision => {
                        self.locks.remove(name.as_str());
                        vec![Changed::Lock(name)]
                    }
                    _ => Vec::new(),
                }
            }
        }
    }

    /// Highest store revision seen.
    pub fn revision(&self) -> i64 {
        self.revision
    }

    pub fn len(&self) -> usize {
        self.locks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.locks.is_empty()
    }

    pub fn get(&self, name: &str) -> Option<&LockEntry> {
        self.locks.get(name).map(|e| &e.0)
    }

    /// Locks in name order.
    pub fn locks(&self) -> impl Iterator<Item = &LockEntry> {
        self.locks.iter().map(|e| &e.0)
    }

    /// Locks whose name starts with `prefix`, in name order (a range, not a scan).
    pub fn locks_under<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = &'a LockEntry> + 'a {
        self.locks
            .range::<str, _>((std::ops::Bound::Included(prefix), std::ops::Bound::Unbounded))
            .map(|e| &e.0)
            .take_while(move |e| e.name.starts_with(prefix))
    }

    /// Sessions waiting for `lock`, in order.
    pub fn waiters_of<'a>(&'a self, lock: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        let from = Waiter {
            lock: lock.to_string(),
            session: String::new(),
        };
        self.waiters
            .range(from..)
            .take_while(move |w| w.lock == lock)
            .map(|w| w.session.as_str())
    }

    /// Sessions waiting, for any lock.
    pub fn waiter_count(&self) -> usize {
        self.waiters.len()
    }

    /// Every waiter, ordered by lock then session.
    pub fn waiters(&self) -> impl Iterator<Item = &Waiter> {
        self.waiters.iter()
    }

    /// The headline numbers at `now`.
    pub fn counts(&self, now: Millis) -> Counts {
        let mut c = Counts {
            held: self.locks.len() as u64,
            waiters: self.waiters.len() as u64,
            ..Counts::default()
        };
        for e in self.locks() {
            match RowState::of(e, now) {
                RowState::Healthy => {}
                RowState::Overdue => c.overdue += 1,
                RowState::Expired => c.expired += 1,
                RowState::Malformed => c.malformed += 1,
            }
        }
        c
    }
}

#[cfg(test)]
mod tests;
