//! The dashboard's handle on one fleet's store: its observer, and the guarded
//! admin actions. The server holds one `Arc<dyn FleetStore>` per fleet and never
//! knows which kind of store is behind it ([`crate::spec::StoreSpec::open`]).
//!
//! Every action is a compare-and-set in the store: a release deletes the lock
//! only if it is still the acquisition the operator saw (its fencing token), and
//! says what is there instead when it is not.

use futures::future::BoxFuture;
use lockscope_model::record::BlacklistRecord;
use lockscope_model::LockEntry;
use tokio::sync::OnceCell;

use crate::protocol::LockStore;
use crate::spec::{AnyLocks, StoreSpec};
use crate::{Observer, StoreError};

/// What a guarded release did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Release {
    /// The acquisition with that fencing token was deleted.
    Released,
    /// Nothing deleted: the lock is free (released or expired meanwhile).
    NotHeld,
    /// Nothing deleted: the lock is now this other acquisition (or record).
    Changed(LockEntry),
}

/// One fleet's store, as the dashboard uses it. Object-safe: the server holds
/// `Arc<dyn FleetStore>`.
pub trait FleetStore: Send + Sync + 'static {
    /// Where the locks live, for people (no credentials).
    fn source(&self) -> String;

    /// Whether admin actions can succeed here (`false`: every one is refused
    /// with [`StoreError::ReadOnly`]).
    fn writable(&self) -> bool;

    /// A new observer of the fleet (the hub runs one, and makes a new one never).
    fn observer(&self) -> Box<dyn Observer>;

    /// Deletes lock `name` only if `fence` still holds it.
    fn release<'a>(&'a self, name: &'a str, fence: i64) -> BoxFuture<'a, Result<Release, StoreError>>;

    /// Blacklists `entry.session`: it can no longer acquire, extend or heartbeat.
    fn blacklist<'a>(&'a self, entry: &'a BlacklistRecord) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Lifts a blacklist entry; `false`: there was none.
    fn lift_blacklist<'a>(&'a self, session: &'a str) -> BoxFuture<'a, Result<bool, StoreError>>;
}

/// A store lockscope may write: etcd, SQLite, PostgreSQL.
pub(crate) struct WritableFleet {
    spec: StoreSpec,
    /// Connected on the first action, so that starting the dashboard never waits
    /// for (or fails on) a store the observer will report unreachable anyway.
    locks: OnceCell<AnyLocks>,
}

impl WritableFleet {
    pub(crate) fn new(spec: StoreSpec) -> WritableFleet {
        WritableFleet {
            spec,
            locks: OnceCell::new(),
        }
    }

    async fn locks(&self) -> Result<&AnyLocks, StoreError> {
        self.locks.get_or_try_init(|| self.spec.connect()).await
    }
}

impl FleetStore for WritableFleet {
    fn source(&self) -> String {
        self.spec.source()
    }

    fn writable(&self) -> bool {
        true
    }

    fn observer(&self) -> Box<dyn Observer> {
        self.spec.observer()
    }

    fn release<'a>(&'a self, name: &'a str, fence: i64) -> BoxFuture<'a, Result<Release, StoreError>> {
        Box::pin(async move {
            let locks = self.locks().await?;
            if locks.release(name, fence).await? {
                return Ok(Release::Released);
            }
            Ok(match locks.get(name).await? {
                Some(now) => Release::Changed(now),
                None => Release::NotHeld,
            })
        })
    }

    fn blacklist<'a>(&'a self, entry: &'a BlacklistRecord) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move { self.locks().await?.blacklist(entry).await })
    }

    fn lift_blacklist<'a>(&'a self, session: &'a str) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move { self.locks().await?.lift_blacklist(session).await })
    }
}

/// A store lockscope only reads (ShedLock): every action is refused.
pub(crate) struct ReadOnlyFleet {
    spec: StoreSpec,
}

impl ReadOnlyFleet {
    pub(crate) fn new(spec: StoreSpec) -> ReadOnlyFleet {
        ReadOnlyFleet { spec }
    }

    fn refuse<T: Send + 'static>(&self) -> BoxFuture<'static, Result<T, StoreError>> {
        let store = self.spec.source();
        Box::pin(async move { Err(StoreError::ReadOnly { store }) })
    }
}

impl FleetStore for ReadOnlyFleet {
    fn source(&self) -> String {
        self.spec.source()
    }

    fn writable(&self) -> bool {
        false
    }

    fn observer(&self) -> Box<dyn Observer> {
        self.spec.observer()
    }

    fn release<'a>(&'a self, _: &'a str, _: i64) -> BoxFuture<'a, Result<Release, StoreError>> {
        self.refuse()
    }

    fn blacklist<'a>(&'a self, _: &'a BlacklistRecord) -> BoxFuture<'a, Result<(), StoreError>> {
        self.refuse()
    }

    fn lift_blacklist<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<bool, StoreError>> {
        self.refuse()
    }
}
