//! The live state of one fleet and the reducer that changes it.
//!
//! The server's hub runs [`FleetState::apply`] over a store's event stream. It
//! returns what *effectively* changed, as names ([`Changed`]): a full
//! [`FleetEvent::Reset`] (first snapshot, or a resync after the store compacted
//! the history we needed) becomes the names of just the locks, waiters and
//! sessions that came, went or changed (and the sessions whose holder state
//! moved), and the hub's views move exactly those. The table keeps the locks,
//! waiters, sessions and blacklist, and the deadlocks found among them.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::session::{BlacklistEntry, Deadlocks, Holder, SessionEntry, Sessions};
use crate::time::Millis;

/// A change to a fleet's lock table. Lock events carry store revisions, so
/// replaying one twice, or out of order for the same lock, changes nothing;
/// session, waiter and blacklist events are applied in the order they come (an
/// observer sends them in store order).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum FleetEvent {
    /// The complete table: locks, waiters, sessions, blacklist.
    Reset(Snapshot),
    /// A lock was taken, or its record changed.
    Upsert(LockEntry),
    /// A lock was released (deleted at `revision`).
    Remove { name: String, revision: i64 },
    /// A session started waiting for a lock.
    Waiting(Waiter),
    /// A session stopped waiting (it got the lock, gave up, or died).
    StoppedWaiting(Waiter),
    /// A session registered or heartbeat.
    Session(SessionEntry),
    /// A session is gone (closed, or its registration ran out).
    SessionGone { id: String },
    /// A session was blacklisted (or its entry rewritten).
    Blacklisted(BlacklistEntry),
    /// A session's blacklist entry was removed.
    BlacklistLifted { session: String },
}

/// The whole truth of a store at one revision, as an observer reads it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    pub revision: i64,
    pub locks: Vec<LockEntry>,
    #[serde(default)]
    pub waiters: Vec<Waiter>,
    /// Every registered session; `None` for a store that keeps no sessions
    /// (holders are then [`Holder::Unknown`]).
    #[serde(default)]
    pub sessions: Option<Vec<SessionEntry>>,
    #[serde(default)]
    pub blacklist: Vec<BlacklistEntry>,
}

/// What an event effectively changed: the hub's views re-read these from the
/// table (a lock that is gone was removed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Changed {
    /// The lock was taken, changed or released.
    Lock(String),
    /// Somebody started or stopped waiting for this lock.
    Waiters(String),
    /// A session registered, heartbeat, went, or was blacklisted or lifted.
    Session(String),
    /// What is known of this session as a holder ([`Holder`]) changed: the state
    /// of every lock it holds may have (the views keep which locks those are).
    Holder(String),
}

/// A session blocked on a lock.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Waiter {
    pub lock: String,
    pub session: String,
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
    sessions: Sessions,
    deadlocks: Deadlocks,
    /// A cache of the locks' shared values, no part of the state (not compared).
    shared: Shared,
}

impl PartialEq for FleetState {
    fn eq(&self, other: &Self) -> bool {
        self.locks == other.locks
            && self.waiters == other.waiters
            && self.revision == other.revision
            && self.sessions == other.sessions
    }
}

impl Eq for FleetState {}

impl FleetState {
    /// Applies one event and returns what actually changed, in a deterministic
    /// order. Stale and duplicate events return nothing.
    pub fn apply(&mut self, event: FleetEvent) -> Vec<Changed> {
        let waits_moved = matches!(
            event,
            FleetEvent::Waiting(_) | FleetEvent::StoppedWaiting(_) | FleetEvent::Reset(_)
        ) || matches!(&event, FleetEvent::Upsert(e) if self.has_waiters(&e.name))
            || matches!(&event, FleetEvent::Remove { name, .. } if self.has_waiters(name));
        let mut changes = self.apply_event(event);
        if waits_moved {
            self.find_deadlocks(&mut changes);
        }
        changes
    }

    fn apply_event(&mut self, event: FleetEvent) -> Vec<Changed> {
        match event {
            FleetEvent::Waiting(w) => match self.waiters.insert(w.clone()) {
                true => vec![Changed::Waiters(w.lock)],
                false => Vec::new(),
            },
            FleetEvent::StoppedWaiting(w) => match self.waiters.remove(&w) {
                true => vec![Changed::Waiters(w.lock)],
                false => Vec::new(),
            },
            FleetEvent::Reset(snapshot) => self.reset(snapshot),
            FleetEvent::Upsert(mut entry) => {
                self.revision = self.revision.max(entry.revision);
                match self.get(&entry.name) {
                    // Older is stale. At the same revision only a different
                    // body is news: what an observer learned beside the
                    // store's writes (an etcd mutex holder's lease TTL, read
                    // again) as of the last revision it applied.
                    Some(old) if old.revision > entry.revision || (old.revision == entry.revision && *old == entry) => {
                        Vec::new()
                    }
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
            FleetEvent::Session(entry) => {
                let id = entry.id.clone();
                let before = self.sessions.holder(&id);
                if self.sessions.sessions.get(&id) == Some(&entry) {
                    return Vec::new();
                }
                self.sessions.sessions.insert(id.clone(), entry);
                self.session_changed(&id, before)
            }
            FleetEvent::SessionGone { id } => {
                let before = self.sessions.holder(&id);
                match self.sessions.sessions.remove(&id) {
                    Some(_) => self.session_changed(&id, before),
                    None => Vec::new(),
                }
            }
            FleetEvent::Blacklisted(entry) => {
                let id = entry.session.clone();
                let before = self.sessions.holder(&id);
                if self.sessions.blacklist.get(&id) == Some(&entry) {
                    return Vec::new();
                }
                self.sessions.blacklist.insert(id.clone(), entry);
                self.session_changed(&id, before)
            }
            FleetEvent::BlacklistLifted { session } => {
                let before = self.sessions.holder(&session);
                match self.sessions.blacklist.remove(&session) {
                    Some(_) => self.session_changed(&session, before),
                    None => Vec::new(),
                }
            }
        }
    }

    /// What session `id`'s change did: the session itself, and its holder
    /// state if that moved.
    fn session_changed(&self, id: &str, before: Holder) -> Vec<Changed> {
        let mut changes = vec![Changed::Session(id.to_string())];
        if self.sessions.holder(id) != before {
            changes.push(Changed::Holder(id.to_string()));
        }
        changes
    }

    fn has_waiters(&self, lock: &str) -> bool {
        self.waiters_of(lock).next().is_some()
    }

    /// Recomputes the deadlocks and reports the locks and sessions whose flag moved.
    fn find_deadlocks(&mut self, changes: &mut Vec<Changed>) {
        let found = Deadlocks::find_with(
            self.waiters.iter().map(|w| (w.session.as_str(), w.lock.as_str())),
            |lock| self.get(lock).and_then(|e| e.holder_session()),
            self.direct_waits(),
        );
        if found == self.deadlocks {
            return;
        }
        let old = std::mem::replace(&mut self.deadlocks, found);
        let new = &self.deadlocks;
        changes.extend(
            old.locks
                .symmetric_difference(&new.locks)
                .map(|l| Changed::Lock(l.clone())),
        );
        changes.extend(
            old.sessions
                .symmetric_difference(&new.sessions)
                .map(|s| Changed::Session(s.clone())),
        );
    }

    /// Waits-for edges beyond waits on the table's locks, from the holders of
    /// the locks somebody waits for (a holder can only be on a cycle if
    /// somebody waits for it): a PostgreSQL advisory lock's holder blocked by
    /// other backends of the fleet ([`pg_advisory::PgBackend::waits_for`]).
    /// Bounded by the number of waits.
    fn direct_waits(&self) -> impl Iterator<Item = (&str, &str, &str)> {
        let mut locks: Vec<&str> = self.waiters.iter().map(|w| w.lock.as_str()).collect();
        locks.dedup();
        locks
            .into_iter()
            .filter_map(|lock| self.get(lock))
            .filter_map(|e| match &e.body {
                LockBody::Foreign {
                    session: Some(holder),
                    detail: Some(d),
                    ..
                } => match &**d {
                    FamilyDetail::PgAdvisory(pg) => Some((e.name.as_str(), holder.as_str(), pg.holder()?)),
                    _ => None,
                },
                _ => None,
            })
            .flat_map(|(lock, holder, backend)| backend.waits_for.iter().map(move |to| (holder, to.as_str(), lock)))
    }

    /// What is known of the session holding `entry` (a malformed entry, or a
    /// foreign row without a session, names none).
    pub fn holder(&self, entry: &LockEntry) -> Holder {
        match entry.holder_session() {
            Some(s) => self.sessions.holder(s),
            None => Holder::Unknown,
        }
    }

    /// The lock's state at `now`.
    pub fn state_of(&self, entry: &LockEntry, now: Millis) -> RowState {
        RowState::of(entry, self.holder(entry), now)
    }

    pub fn sessions(&self) -> &Sessions {
        &self.sessions
    }

    /// Sessions and locks on a wait-for cycle.
    pub fn deadlocks(&self) -> &Deadlocks {
        &self.deadlocks
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

    /// Locks named after `name` (not it), in name order (a range, not a scan).
    pub fn locks_after<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a LockEntry> + 'a {
        self.locks
            .range::<str, _>((std::ops::Bound::Excluded(name), std::ops::Bound::Unbounded))
            .map(|e| &e.0)
    }

    /// Locks named before `name` (not it), in reverse name order (a range, not a scan).
    pub fn locks_before_rev<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a LockEntry> + 'a {
        self.locks
            .range::<str, _>((std::ops::Bound::Unbounded, std::ops::Bound::Excluded(name)))
            .rev()
            .map(|e| &e.0)
    }

    /// Locks whose name starts with `prefix`, in name order (a range, not a scan).
    pub fn locks_under<'a>(&'a self, prefix: &'a str) -> impl DoubleEndedIterator<Item = &'a LockEntry> + 'a {
        use std::ops::Bound;
        // The first name past every name starting with `prefix`: the prefix with
        // its last character that has a successor moved up to it (none: no end).
        // Bounded so, the range reads no name (counting it touches no string).
        let mut past = prefix.to_string();
        let end = loop {
            let Some(c) = past.pop() else { break None };
            if let Some(next) = (c as u32 + 1..=char::MAX as u32).find_map(char::from_u32) {
                past.push(next);
                break Some(past);
            }
        };
        let end = end.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
        self.locks.range::<str, _>((Bound::Included(prefix), end)).map(|e| &e.0)
    }

    /// [`FleetState::locks_under`] in reverse name order (a range, not a scan).
    pub fn locks_under_rev<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = &'a LockEntry> + 'a {
        self.locks_under(prefix).rev()
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
    /// Whether `w` is waiting now.
    pub fn is_waiting(&self, w: &Waiter) -> bool {
        self.waiters.contains(w)
    }

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
            c.add(self.state_of(e, now), 1);
        }
        c
    }
}

mod counts;
mod entry;
pub mod etcd_mutex;
pub mod foreign_sessions;
mod intern;
pub mod mutex_queue;
pub mod pg_advisory;
pub mod redis;
mod reset;
mod state;
pub mod zookeeper;
pub use counts::{Counts, StoreStatus};
pub use entry::{FamilyDetail, LeaseInfo, LockBody, LockEntry, TokenKey, LEASE_KEYS_KEPT};
use intern::Shared;
pub use intern::SnapshotSharing;
pub use state::RowState;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod session_tests;
