//! Shared copies of the record fields many held locks have in common (service,
//! host, session, backtrace), so the hub's table stores each distinct value once.
//! [`crate::fleet::FleetState`] interns every record entering its table.

use std::collections::HashSet;
use std::hash::Hash;
use std::sync::Arc;

use crate::fleet::{LockBody, LockEntry};

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
pub(crate) struct Interner<T: ?Sized> {
    pub(crate) set: HashSet<Arc<T>>,
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
    pub(crate) const MIN_PRUNE: usize = 64;

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
    pub(crate) fn holds(&self, value: &T) -> bool {
        self.set.contains(value)
    }
}

/// The interners of the record fields many locks share.
#[derive(Clone, Debug, Default)]
pub(crate) struct Shared {
    pub(crate) strings: Interner<str>,
    pub(crate) backtraces: Interner<[String]>,
}

impl Shared {
    /// Makes `entry`'s shared fields point at the table's single copies.
    pub(crate) fn intern(&mut self, entry: &mut LockEntry) {
        if let LockBody::Held(r) = &mut entry.body {
            self.strings.intern(&mut r.service);
            self.strings.intern(&mut r.host);
            self.strings.intern(&mut r.session);
            self.backtraces.intern(&mut r.backtrace);
        }
    }
}

/// The same sharing for a snapshot an observer is still reading: each record's
/// common fields are shared as it is parsed, so its own copies are freed at
/// once and their memory reused for the next record. Left to the hub (which
/// interns the snapshot only once it is whole), those copies of every lock
/// would be freed together at the end, leaving holes between the allocations
/// the table keeps that malloc can neither reuse nor give back: about 300
/// bytes per lock of resident memory (docs/performance.md, "Memory with
/// history on"). The hub then finds these shared copies and keeps them.
#[derive(Debug, Default)]
pub struct SnapshotSharing(Shared);

impl SnapshotSharing {
    /// `entry`, its record's common fields shared with the entries before it.
    pub fn share(&mut self, mut entry: LockEntry) -> LockEntry {
        self.0.intern(&mut entry);
        entry
    }
}
