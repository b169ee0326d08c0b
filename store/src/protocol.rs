//! The operations of the lock protocol that differ per store. The client library
//! ([`crate::client`]) is written once on top of this trait; etcd and SQL
//! implement it and pass the same contract suite (`crate::testing::contract`,
//! run by `store/tests/it/contract_etcd.rs` and `contract_sql.rs`).
//!
//! Every write is a compare-and-set: on the lock's fencing token for the holder's
//! own operations, and on the session's absence from the blacklist for anything
//! that would extend its hold.

use std::future::Future;
use std::time::Duration;

use lockscope_model::record::{BlacklistRecord, SessionRecord, Stored};
use lockscope_model::{LockEntry, LockRecord};

use crate::StoreError;

/// Where a blocked acquirer resumes watching (etcd: the failed attempt's revision).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaitFrom(pub i64);

/// The outcome of one attempt to take a lock.
#[derive(Clone, Debug)]
pub enum Attempt {
    /// Ours; `fence` is the fencing token of this acquisition.
    Acquired { fence: i64 },
    /// Held by someone else (as seen in the same atomic step).
    Busy { holder: Option<LockEntry>, from: WaitFrom },
}

/// The outcome of extending a held lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Extend {
    Extended,
    /// The lock is no longer this acquisition: released by someone else (force-
    /// release, unlocker) and possibly re-acquired.
    Lost,
    /// The session is blacklisted: it may not extend anything.
    Blacklisted,
}

/// What a blacklist write did. It is a create-if-absent in the store, never an
/// overwrite: a second blacklisting of one session changes nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Blacklisting {
    /// The entry was written: the session was not blacklisted.
    Written,
    /// Nothing written: the session has an entry already, this one (as stored;
    /// `None`: it vanished before it could be read back, lifted meanwhile).
    Exists(Option<Stored<BlacklistRecord>>),
}

/// A session's registration, as the store needs it back (etcd: the lease).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionLease(pub i64);

pub trait LockStore: Clone + Send + Sync + 'static {
    /// Registers a session; refused with [`StoreError::Blacklisted`] for a
    /// blacklisted id. `ttl`: how long the registration outlives the last heartbeat.
    fn open_session(
        &self,
        session: &SessionRecord,
        ttl: Duration,
    ) -> impl Future<Output = Result<SessionLease, StoreError>> + Send;

    /// Publishes the session record (heartbeat time, counters, what it waits for)
    /// and keeps the registration alive. Refused when blacklisted.
    fn session_heartbeat(
        &self,
        lease: SessionLease,
        session: &SessionRecord,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Removes the session's registration (and its waiter entries).
    fn close_session(&self, lease: SessionLease, session: &str) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Creates the lock holding `record` if it is free and the session is not
    /// blacklisted, in one atomic step.
    fn try_acquire(&self, name: &str, record: &LockRecord) -> impl Future<Output = Result<Attempt, StoreError>> + Send;

    /// Rewrites the record of a held lock (new `heartbeat_at`, `auto_unlock_at`),
    /// only if `fence` still holds it and the session is not blacklisted.
    fn extend(
        &self,
        name: &str,
        fence: i64,
        record: &LockRecord,
    ) -> impl Future<Output = Result<Extend, StoreError>> + Send;

    /// Deletes the lock only if `fence` still holds it. `false`: nothing deleted.
    fn release(&self, name: &str, fence: i64) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Marks (or unmarks) the session as waiting for `name`, visibly to observers.
    fn set_waiting(
        &self,
        lease: SessionLease,
        session: &str,
        name: &str,
        waiting: bool,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Returns once `name` may have been released after `from` (or after `max`
    /// at the latest; stores without notifications wait a jittered backoff).
    fn wait_released(
        &self,
        name: &str,
        from: WaitFrom,
        max: Duration,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Blacklists a session, from now on it cannot acquire or extend: creates
    /// its entry only if it has none, in one atomic step (an existing entry is
    /// kept as it is, and returned).
    fn blacklist(&self, entry: &BlacklistRecord) -> impl Future<Output = Result<Blacklisting, StoreError>> + Send;

    /// Whether the session is registered in the store now (opened, not closed
    /// or run out). Read from the store itself, not from any observer's view.
    fn session_registered(&self, session: &str) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Removes a session's blacklist entry; `false`: there was none.
    fn lift_blacklist(&self, session: &str) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// The lock as stored now, if held.
    fn get(&self, name: &str) -> impl Future<Output = Result<Option<LockEntry>, StoreError>> + Send;
}
