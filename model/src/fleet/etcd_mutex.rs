//! What lockscope knows of one etcd native mutex beyond the common foreign
//! fields ([`crate::fleet::FamilyDetail::EtcdMutex`]): its waiters in create-
//! revision order, the order `concurrency.Mutex` grants them the lock (each
//! waiter watches the delete of the key created just before its own).
//!
//! The fleet table keeps waiters as (lock, session) pairs ordered by session;
//! a lease id says nothing of when its key was written, so the order and the
//! wait ages come from here (read from a fleet's table by
//! [`super::mutex_queue`]).
//!
//! A leaf: the types only, so `entry` can name them without an import circle.

use serde::{Deserialize, Serialize};

use crate::time::Millis;

/// The most waiters [`EtcdMutexLock::waiters`] keeps (the head of the queue):
/// every waiter's arrival or departure resends the lock's entry, so a queue of
/// thousands would cost thousands of entries' bytes per change. The waiters
/// past it are still in the fleet's table, listed after these by session.
pub const MUTEX_WAITERS_KEPT: usize = 100;

/// One contender key behind the holder.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MutexWaiter {
    /// Its lease in hex: its session.
    pub lease: String,
    /// Its key's create revision: its place in the queue.
    pub create_revision: i64,
    /// When that revision was written, on this server's clock (unix ms), where
    /// known: the observer saw the key's creation live in its watch. `None`:
    /// the key was there when the observer read the prefix (etcd keeps no time
    /// per revision), so its wait is known only from when it was first seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<Millis>,
}

/// An etcd native mutex (or election) with waiters.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EtcdMutexLock {
    /// The contenders after the holder, in create-revision order (the first
    /// is the next holder), the first [`MUTEX_WAITERS_KEPT`] of them.
    pub waiters: Vec<MutexWaiter>,
}
