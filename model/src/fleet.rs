//! The live state of one fleet and the reducer that changes it.
//!
//! The server's hub runs [`FleetState::apply`] over a store's event stream. It
//! returns what *effectively* changed, as names ([`Changed`]): a full
//! [`FleetEvent::Reset`] (first snapshot, or a resync after the store compacted
//! the history we needed) becomes the names of just the locks that came, went or
//! changed, and the hub's views move exactly those.

use std::collections::{BTreeSet, HashSet};
use std::hash::Hash;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

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

/// One shared allocation per distinct value of a record field among the held
/// locks (a service's name, a host, a session, a backtrace): a lock entering the
/// table gives up its own copy for the shared one.
///
/// Values no lock uses any more are found by `Arc::strong_count` (1: only the
/// interner holds it) and dropped by a prune, a pass over the whole set. A prune
/// runs when a new value is about to be added and the set has grown to twice its
/// size after the last prune (at least [`Interner::MIN_PRUNE`]): between two
/// prunes at least as many values were added as the previous prune kept, so the
/// pass costs O(1) amortised per added value, and the set never holds more than
/// about twice the values in use at the last prune (or the minimum). Dropping a
/// value at its last use instead would cost a lookup on every release and every
/// replaced record; never pruning would keep every session ever seen.
#[derive(Debug)]
struct Interner<T: ?Sized> {
    set: HashSet<Arc<T>>,
    /// The set's size after the last prune.
    kept: usize,
}

// Not derived: a derive would require `T: Clone`, which `str` is not.
impl<T: ?Sized> Clone for Interner<T> {
    fn clone(&self) -> Self {
        Interner {
            set: self.set.clone(),
            kept: self.kept,
        }
    }
}

impl<T: ?Sized> Default for Interner<T> {
    fn default() -> Self {
        Interner {
            set: HashSet::new(),
            kept: 0,
        }
    }
}

impl<T: ?Sized + Hash + Eq> Interner<T> {
    /// Below this size the set is never pruned.
    const MIN_PRUNE: usize = 64;

    /// Replaces `value` by the shared copy of it, which it becomes if it is new.
    fn intern(&mut self, value: &mut Arc<T>) {
        if let Some(shared) = self.set.get(&**value) {
            if !Arc::ptr_eq(shared, value) {
                *value = shared.clone();
            }
            return;
        }
        if self.set.len() >= (2 * self.kept).max(Self::MIN_PRUNE) {
            self.prune();
        }
        self.set.insert(value.clone());
    }

    /// Drops the values only the interner holds.
    fn prune(&mut self) {
        self.set.retain(|v| Arc::strong_count(v) > 1);
        self.kept = self.set.len();
        if self.set.capacity() > 4 * self.kept.max(Self::MIN_PRUNE) {
            self.set.shrink_to(2 * self.kept.max(Self::MIN_PRUNE));
        }
    }

    #[cfg(test)]
    fn holds(&self, value: &T) -> bool {
        self.set.contains(value)
    }
}

/// The interners of the record fields many locks share.
#[derive(Clone, Debug, Default)]
struct Shared {
    strings: Interner<str>,
    backtraces: Interner<[String]>,
}

impl Shared {
    /// Makes `entry`'s shared fields point at the table's single copies.
    fn intern(&mut self, entry: &mut LockEntry) {
        if let LockBody::Held(r) = &mut entry.body {
            self.strings.intern(&mut r.service);
            self.strings.intern(&mut r.host);
            self.strings.intern(&mut r.session);
            self.backtraces.intern(&mut r.backtrace);
        }
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
mod tests {
    use super::*;
    use crate::record::sample;

    fn held(name: &str, fence: i64, revision: i64) -> LockEntry {
        LockEntry {
            name: name.into(),
            fence,
            revision,
            body: LockBody::Held(sample(&format!("o{fence}"))),
        }
    }
    fn up(name: &str, fence: i64, revision: i64) -> FleetEvent {
        FleetEvent::Upsert(held(name, fence, revision))
    }
    fn rm(name: &str, revision: i64) -> FleetEvent {
        FleetEvent::Remove {
            name: name.into(),
            revision,
        }
    }
    fn reset(revision: i64, locks: Vec<LockEntry>) -> FleetEvent {
        FleetEvent::Reset {
            revision,
            locks,
            waiters: vec![],
        }
    }

    fn lock(name: &str) -> Changed {
        Changed::Lock(name.into())
    }

    fn waiter(lock: &str, session: &str) -> Waiter {
        Waiter {
            lock: lock.into(),
            session: session.into(),
        }
    }

    struct Case {
        name: &'static str,
        start: Vec<FleetEvent>,
        event: FleetEvent,
        changes: Vec<Changed>,
        names_after: Vec<&'static str>,
    }

    #[test]
    fn reducer_table() {
        let cases = vec![
            Case {
                name: "acquire",
                start: vec![],
                event: up("a", 5, 5),
                changes: vec![lock("a")],
                names_after: vec!["a"],
            },
            Case {
                name: "release",
                start: vec![up("a", 5, 5)],
                event: rm("a", 6),
                changes: vec![lock("a")],
                names_after: vec![],
            },
            Case {
                name: "duplicate upsert is ignored",
                start: vec![up("a", 5, 5)],
                event: up("a", 5, 5),
                changes: vec![],
                names_after: vec!["a"],
            },
            Case {
                name: "stale upsert is ignored",
                start: vec![up("a", 5, 7)],
                event: up("a", 5, 6),
                changes: vec![],
                names_after: vec!["a"],
            },
            Case {
                name: "heartbeat updates in place",
                start: vec![up("a", 5, 5)],
                event: up("a", 5, 8),
                changes: vec![lock("a")],
                names_after: vec!["a"],
            },
            Case {
                name: "remove of an absent lock is ignored",
                start: vec![],
                event: rm("a", 3),
                changes: vec![],
                names_after: vec![],
            },
            Case {
                name: "stale remove does not delete a newer acquisition",
                start: vec![up("a", 9, 9)],
                event: rm("a", 8),
                changes: vec![],
                names_after: vec!["a"],
            },
            Case {
                name: "reset into empty state lists every lock",
                start: vec![],
                event: reset(10, vec![held("b", 2, 2), held("a", 1, 1)]),
                changes: vec![lock("b"), lock("a")],
                names_after: vec!["a", "b"],
            },
            Case {
                name: "reset after compaction emits only the difference",
                start: vec![up("keep", 1, 1), up("gone", 2, 2), up("moved", 3, 3)],
                event: reset(20, vec![held("keep", 1, 1), held("moved", 15, 15), held("new", 18, 18)]),
                changes: vec![lock("moved"), lock("new"), lock("gone")],
                names_after: vec!["keep", "moved", "new"],
            },
            Case {
                name: "identical reset changes nothing",
                start: vec![up("a", 1, 1)],
                event: reset(30, vec![held("a", 1, 1)]),
                changes: vec![],
                names_after: vec!["a"],
            },
        ];
        for c in cases {
            let mut s = FleetState::default();
            for e in c.start {
                s.apply(e);
            }
            let got = s.apply(c.event);
            assert_eq!(got, c.changes, "{}: changes", c.name);
            let names: Vec<&str> = s.locks().map(|e| e.name.as_str()).collect();
            assert_eq!(names, c.names_after, "{}: table", c.name);
        }
    }

    #[test]
    fn a_reset_removes_what_it_lacks_whatever_the_revisions() {
        // A store whose row revisions run ahead of its reset revision (SQL rows
        // count their own writes): the removal still happens.
        let mut s = FleetState::default();
        s.apply(up("b", 2, 2));
        s.apply(up("e", 60, 60));
        assert_eq!(s.apply(reset(10, vec![held("b", 2, 2)])), vec![lock("e")]);
        assert_eq!(s.locks().map(|e| e.name.as_str()).collect::<Vec<_>>(), vec!["b"]);
        assert_eq!(s.revision(), 10, "a reset's revision replaces ours");
    }

    #[test]
    fn malformed_values_become_entries() {
        let e = LockEntry::from_stored("x".into(), 4, 4, b"not json at all");
        match &e.body {
            LockBody::Malformed { raw, error } => {
                assert_eq!(raw, b"not json at all");
                assert!(error.contains("not a lock record"), "{error}");
            }
            other => panic!("expected malformed, got {other:?}"),
        }
        let big = vec![b'x'; MALFORMED_KEEP_BYTES * 2];
        match LockEntry::from_stored("y".into(), 1, 1, &big).body {
            LockBody::Malformed { raw, .. } => assert_eq!(raw.len(), MALFORMED_KEEP_BYTES),
            other => panic!("expected malformed, got {other:?}"),
        }
    }

    #[test]
    fn counts_by_liveness() {
        let mut s = FleetState::default();
        s.apply(up("a", 1, 1));
        s.apply(FleetEvent::Upsert(LockEntry::from_stored("bad".into(), 2, 2, b"x")));
        s.apply(FleetEvent::Waiting(waiter("a", "s1")));
        let r = sample("o");
        let c = |held, overdue, expired, malformed| Counts {
            held,
            overdue,
            expired,
            malformed,
            waiters: 1,
        };
        assert_eq!(s.counts(r.alert_at - 1), c(2, 0, 0, 1));
        assert_eq!(s.counts(r.alert_at), c(2, 1, 0, 1));
        assert_eq!(s.counts(r.auto_unlock_at), c(2, 0, 1, 1));
    }

    #[test]
    fn waiters_come_and_go_and_resets_diff_them() {
        let mut s = FleetState::default();
        assert_eq!(
            s.apply(FleetEvent::Waiting(waiter("a", "s1"))),
            vec![Changed::Waiters("a".into())]
        );
        assert_eq!(
            s.apply(FleetEvent::Waiting(waiter("a", "s1"))),
            vec![],
            "duplicates change nothing"
        );
        s.apply(FleetEvent::Waiting(waiter("a", "s2")));
        s.apply(FleetEvent::Waiting(waiter("ab", "s3")));
        assert_eq!(
            s.waiters_of("a").collect::<Vec<_>>(),
            vec!["s1", "s2"],
            "not ab's waiter"
        );
        assert_eq!(s.apply(FleetEvent::StoppedWaiting(waiter("zz", "s9"))), vec![]);
        let changes = s.apply(FleetEvent::Reset {
            revision: 5,
            locks: vec![],
            waiters: vec![waiter("a", "s2"), waiter("b", "s4")],
        });
        assert_eq!(
            changes,
            vec![
                Changed::Waiters("a".into()),
                Changed::Waiters("ab".into()),
                Changed::Waiters("b".into()),
            ]
        );
        assert_eq!(s.waiters().count(), 2);
    }

    /// An entry as an observer hands it over: parsed from its JSON, so none of its
    /// strings is shared with anything yet.
    fn parsed(name: &str, revision: i64, service: &str, session: &str) -> LockEntry {
        let mut r = sample(&format!("o{revision}"));
        r.service = service.into();
        r.session = session.into();
        r.backtrace = backtrace(service).into();
        LockEntry::from_stored(name.into(), revision, revision, &r.to_json())
    }

    fn backtrace(service: &str) -> Vec<String> {
        vec![format!("{service}::run"), "main".to_string()]
    }

    fn record<'a>(s: &'a FleetState, name: &str) -> &'a LockRecord {
        s.get(name).and_then(LockEntry::record).expect("held")
    }

    #[test]
    fn locks_share_their_common_values() {
        let mut s = FleetState::default();
        let (a, b) = (parsed("a", 1, "billing", "s-1"), parsed("b", 2, "billing", "s-1"));
        let (ra, rb) = (a.record().unwrap(), b.record().unwrap());
        assert!(!Arc::ptr_eq(&ra.service, &rb.service), "parsed apart");
        s.apply(FleetEvent::Upsert(a));
        s.apply(reset(
            3,
            vec![s.get("a").unwrap().clone(), b, parsed("c", 3, "search", "s-1")],
        ));
        let (ra, rb, rc) = (record(&s, "a"), record(&s, "b"), record(&s, "c"));
        assert!(Arc::ptr_eq(&ra.service, &rb.service), "one service, one allocation");
        assert!(Arc::ptr_eq(&ra.host, &rc.host));
        assert!(Arc::ptr_eq(&ra.session, &rc.session));
        assert!(
            Arc::ptr_eq(&ra.backtrace, &rb.backtrace),
            "one call site, one backtrace"
        );
        assert!(!Arc::ptr_eq(&ra.backtrace, &rc.backtrace));
        assert_eq!(&*rc.service, "search");
        // A heartbeat (a newer record of the same lock) shares them too.
        s.apply(FleetEvent::Upsert(parsed("b", 4, "billing", "s-1")));
        assert!(Arc::ptr_eq(&record(&s, "a").service, &record(&s, "b").service));
        assert_eq!(s, s.clone(), "the interner is no part of the state");
    }

    #[test]
    fn values_no_lock_uses_are_dropped_after_churn() {
        let mut s = FleetState::default();
        s.apply(FleetEvent::Upsert(parsed("keep", 1, "billing", "s-keep")));
        for i in 0..10 {
            s.apply(FleetEvent::Upsert(parsed(
                &format!("gone-{i}"),
                2 + i,
                "retired",
                "s-gone",
            )));
        }
        for i in 0..10 {
            s.apply(rm(&format!("gone-{i}"), 100 + i));
        }
        assert!(s.shared.strings.holds("retired"), "not yet pruned: nothing new came");
        // Each interner prunes only when it grows: churn of short-lived locks of
        // ever new services and sessions (so new backtraces too), released at once.
        let mut revision = 1_000;
        for i in 0..1_000 {
            revision += 2;
            let (service, session) = (format!("batch-{i}"), format!("s-{i}"));
            s.apply(FleetEvent::Upsert(parsed("churn", revision, &service, &session)));
            s.apply(rm("churn", revision + 1));
        }
        let strings = &s.shared.strings;
        assert!(!strings.holds("retired") && !strings.holds("s-gone"), "dropped");
        let backtraces = &s.shared.backtraces;
        assert!(!backtraces.holds(&backtrace("retired")), "dropped");
        assert!(backtraces.holds(&backtrace("billing")), "still in use");
        assert!(backtraces.set.len() <= 2 * Interner::<[String]>::MIN_PRUNE);
        assert!(strings.holds("billing") && strings.holds("s-keep"), "still in use");
        assert!(
            strings.set.len() <= 2 * Interner::<str>::MIN_PRUNE,
            "{} values kept",
            strings.set.len()
        );
        assert_eq!(&*record(&s, "keep").service, "billing");
    }

    #[test]
    fn liveness_follows_the_deadlines() {
        let r = sample("o");
        assert_eq!(RowState::of_record(&r, r.alert_at - 1), RowState::Healthy);
        assert_eq!(RowState::of_record(&r, r.alert_at), RowState::Overdue);
        assert_eq!(RowState::of_record(&r, r.auto_unlock_at), RowState::Expired);
    }
}
