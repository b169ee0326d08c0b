//! The dashboard's handle on one fleet's store: its observer, and the guarded
//! admin actions. The server holds one `Arc<dyn FleetStore>` per fleet and never
//! knows which kind of store is behind it ([`crate::spec::StoreSpec::open`]).
//!
//! Every action is a compare-and-set in the store: a release deletes the lock
//! only if it is still the acquisition the operator saw (its fencing token, and
//! for an operator's release its owner id too), and says what is there instead
//! when it is not; a blacklisting creates the session's entry only if it has
//! none.
//!
//! The **unlocker** role (auto-releasing expired locks) is held by one dashboard
//! replica at a time, elected through the fleet's own store
//! ([`FleetStore::campaign`]). Its releases are fenced twice in one store
//! transaction: by the lock's fencing token, and by the leadership's term, so a
//! replica that lost the role (paused past its lease, say) releases nothing.

use std::time::Duration;

use futures::future::BoxFuture;
use lockscope_model::admin::Role;
use lockscope_model::record::BlacklistRecord;
use lockscope_model::LockEntry;
use tokio::sync::OnceCell;

use crate::protocol::{Blacklisting, LockStore};
use crate::spec::{AnyLocks, StoreSpec};
use crate::{Observer, StoreError};

mod outcome;
pub use outcome::{Cancel, Fenced, Release, Removed, UnlockerInfo, NO_CANCEL};

/// The unlocker role, held: returned by [`FleetStore::campaign`]. Keep it alive
/// more often than its ttl (a third of it is usual); once [`keep_alive`] returns
/// `false` or a release returns [`Fenced::Deposed`], the role is gone for good
/// (campaign again for a new term). Dropped without [`resign`], it leaves the
/// lease to run out (another replica is elected one ttl later).
///
/// [`keep_alive`]: Leadership::keep_alive
/// [`resign`]: Leadership::resign
pub trait Leadership: Send + Sync {
    /// This leadership's term: larger than every earlier election's in this
    /// fleet (etcd: the leader key's `create_revision`; SQL: a counter in the row).
    fn term(&self) -> i64;

    /// The name this leadership campaigned with.
    fn candidate(&self) -> &str;

    /// Renews the lease. `Ok(false)`: the role was lost (the lease ran out,
    /// another replica was elected) – stop acting. An error says nothing either
    /// way: try again, and stop acting when the ttl has passed without a success.
    fn keep_alive(&self) -> BoxFuture<'_, Result<bool, StoreError>>;

    /// Deletes lock `name` only if it is still exactly the version the caller
    /// saw — acquisition `fence` at store revision `revision`, so not extended
    /// since (an extension moves `auto_unlock_at`) — and this leadership is still
    /// current (its term, unexpired), all compared in one store transaction. A
    /// lost leadership returns [`Fenced::Deposed`] and deletes nothing.
    fn release<'a>(&'a self, name: &'a str, fence: i64, revision: i64) -> BoxFuture<'a, Result<Fenced, StoreError>>;

    /// Gives the role up now, so another replica is elected without waiting for
    /// the lease to run out (best effort: an error leaves the lease to expire).
    fn resign(self: Box<Self>) -> BoxFuture<'static, Result<(), StoreError>>;
}

/// One fleet's store, as the dashboard uses it. Object-safe: the server holds
/// `Arc<dyn FleetStore>`.
pub trait FleetStore: Send + Sync + 'static {
    /// Where the locks live, for people (no credentials).
    fn source(&self) -> String;

    /// What the store's client connects to, for people (no credentials): the
    /// start of a failure's summary line ([`StoreError::summary`]).
    fn address(&self) -> String;

    /// Whether admin actions can succeed here (`false`: every one is refused
    /// with [`StoreError::ReadOnly`]).
    fn writable(&self) -> bool;

    /// A new observer of the fleet (the hub runs one, and makes a new one never).
    fn observer(&self) -> Box<dyn Observer>;

    /// Every lock name's fencing counter, held or free, where the store keeps
    /// one that outlives releases (SQL: a row per name); `None` elsewhere.
    /// After a restart the history tells from it how many acquisitions it did
    /// not see.
    fn fences(&self) -> BoxFuture<'_, Result<Option<Vec<(String, i64)>>, StoreError>> {
        Box::pin(async { Ok(None) })
    }

    /// Deletes lock `name` only if `fence` still holds it.
    fn release<'a>(&'a self, name: &'a str, fence: i64) -> BoxFuture<'a, Result<Release, StoreError>>;

    /// An operator's release: deletes lock `name` only if it is still exactly
    /// the acquisition they saw, fencing token `fence` with record owner `owner`
    /// (fresh per acquisition; `None`: the lock showed no owner, a malformed
    /// value or a foreign schema's row). The owner is compared on a read of the
    /// lock, the fence by the store's compare-and-set right after it: a fence
    /// never names two acquisitions of one lock (etcd: the key's
    /// `create_revision`; SQL and ScyllaDB: a counter per lock that survives
    /// its releases), so the two together name one acquisition, whatever other
    /// locks share its fence.
    fn release_seen<'a>(
        &'a self,
        name: &'a str,
        fence: i64,
        owner: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Release, StoreError>>;

    /// The least role a force-release needs here: an operator's, as it ends
    /// one acquisition, unless this family's release does more than that
    /// (PostgreSQL advisory locks: it terminates the holder's whole backend,
    /// so an admin's). The door asks the higher of this and the action's.
    fn release_needs(&self) -> Role {
        Role::Operator
    }

    /// Blacklists `entry.session` (it can no longer acquire, extend or
    /// heartbeat) if it has no entry yet; an entry already there is kept as it
    /// is and returned ([`Blacklisting::Exists`]).
    fn blacklist<'a>(&'a self, entry: &'a BlacklistRecord) -> BoxFuture<'a, Result<Blacklisting, StoreError>>;

    /// Whether `session` is registered in the store now (read from the store,
    /// never from an observer's view, which lags).
    fn session_registered<'a>(&'a self, session: &'a str) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Lifts a blacklist entry; `false`: there was none.
    fn lift_blacklist<'a>(&'a self, session: &'a str) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Cancels `waiter`'s wait for lock `name` (the waiting statement fails;
    /// its session and every other lock it holds stay), only if it is still
    /// that waiter (a session id as the lock shows it, naming one backend):
    /// otherwise nothing is cancelled and the answer is the lock as it is now.
    /// Refused ([`NO_CANCEL`]) by every family but PostgreSQL's advisory locks.
    fn cancel_waiter<'a>(&'a self, _name: &'a str, _waiter: &'a str) -> BoxFuture<'a, Result<Cancel, StoreError>> {
        Box::pin(async { Err(StoreError::Unsupported(NO_CANCEL)) })
    }

    /// Campaigns for this fleet's unlocker role as `candidate` (a replica's name,
    /// shown to people; 1–512 bytes): returns once elected, holding a lease of
    /// `ttl` that the returned [`Leadership`] must keep alive. Waits as long as
    /// another replica holds the role (drop the future to stop campaigning);
    /// errors only when the store fails. Refused on read-only stores
    /// ([`StoreError::ReadOnly`]).
    fn campaign<'a>(
        &'a self,
        candidate: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<Box<dyn Leadership>, StoreError>>;

    /// Who holds the unlocker role now, if anyone (for the UI and other replicas).
    fn unlocker(&self) -> BoxFuture<'_, Result<Option<UnlockerInfo>, StoreError>>;

    /// Why the unlocker never acts on this fleet, whatever its configured mode
    /// (`None`: it may). A read-only store says so; a foreign lock family
    /// (another library's locks) gives its own reason ([`Foreign::no_unlocker`]).
    /// The overview shows the reason instead of a mode.
    fn no_unlocker(&self) -> Option<&'static str> {
        (!self.writable()).then_some(READ_ONLY_UNLOCKER)
    }
}

/// Why the unlocker never acts on a read-only fleet ([`FleetStore::no_unlocker`]).
pub const READ_ONLY_UNLOCKER: &str = "this fleet's store is read-only: nothing can be released";

/// A store lockscope may write: etcd, SQLite, PostgreSQL, ScyllaDB.
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
        self.locks.get_or_try_init(|| self.spec.connect_admin()).await
    }
}

impl FleetStore for WritableFleet {
    fn source(&self) -> String {
        self.spec.source()
    }

    fn address(&self) -> String {
        self.spec.address()
    }

    fn writable(&self) -> bool {
        true
    }

    fn observer(&self) -> Box<dyn Observer> {
        self.spec.observer()
    }

    fn fences(&self) -> BoxFuture<'_, Result<Option<Vec<(String, i64)>>, StoreError>> {
        Box::pin(async move {
            match self.locks().await? {
                AnyLocks::Sql(s) => s.fences().await.map(Some),
                _ => Ok(None),
            }
        })
    }

    fn release<'a>(&'a self, name: &'a str, fence: i64) -> BoxFuture<'a, Result<Release, StoreError>> {
        Box::pin(async move {
            let locks = self.locks().await?;
            if let Some(removed) = locks.release_removing(name, fence).await? {
                return Ok(Release::Released(removed));
            }
            Ok(match locks.get(name).await? {
                Some(now) => Release::Changed(now),
                None => Release::NotHeld,
            })
        })
    }

    fn release_seen<'a>(
        &'a self,
        name: &'a str,
        fence: i64,
        owner: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Release, StoreError>> {
        Box::pin(async move {
            let locks = self.locks().await?;
            match locks.get(name).await? {
                None => return Ok(Release::NotHeld),
                Some(now) if now.fence != fence || owner_of(&now) != owner => return Ok(Release::Changed(now)),
                Some(_) => {}
            }
            self.release(name, fence).await
        })
    }

    fn blacklist<'a>(&'a self, entry: &'a BlacklistRecord) -> BoxFuture<'a, Result<Blacklisting, StoreError>> {
        Box::pin(async move { self.locks().await?.blacklist(entry).await })
    }

    fn session_registered<'a>(&'a self, session: &'a str) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move { self.locks().await?.session_registered(session).await })
    }

    fn lift_blacklist<'a>(&'a self, session: &'a str) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move { self.locks().await?.lift_blacklist(session).await })
    }

    fn campaign<'a>(
        &'a self,
        candidate: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<Box<dyn Leadership>, StoreError>> {
        Box::pin(async move {
            validate_candidate(candidate)?;
            self.locks().await?.campaign(candidate, ttl).await
        })
    }

    fn unlocker(&self) -> BoxFuture<'_, Result<Option<UnlockerInfo>, StoreError>> {
        Box::pin(async move { self.locks().await?.unlocker().await })
    }
}

/// The admin actions every foreign lock family (locks another library makes:
/// `etcd_mutex`, `redis_set`, `redlock`, `zookeeper`, `pg_advisory`) refuses
/// the same way, each with its own reason: the families' `FleetStore` impls
/// answer those methods through one of these, so none writes the refusals
/// again (and a writable fleet never inherits them by default).
pub(crate) struct Foreign {
    /// Why the unlocker never acts on these locks ([`StoreError::Config`]).
    pub(crate) no_unlocker: &'static str,
}

impl Foreign {
    /// Blacklisting, and asking whether a session is registered, where the
    /// family has no sessions lockscope can end: refused with the reason `why`
    /// ([`StoreError::Unsupported`]).
    pub(crate) fn no_blacklist<T: Send + 'static>(why: &'static str) -> BoxFuture<'static, Result<T, StoreError>> {
        Box::pin(async move { Err(StoreError::Unsupported(why)) })
    }

    /// Lifting a blacklist: there is never an entry to lift.
    pub(crate) fn lift_blacklist(&self) -> BoxFuture<'static, Result<bool, StoreError>> {
        Box::pin(async { Ok(false) })
    }

    /// Campaigning for the unlocker role: refused with the family's reason.
    pub(crate) fn campaign(&self) -> BoxFuture<'static, Result<Box<dyn Leadership>, StoreError>> {
        let why = self.no_unlocker;
        Box::pin(async move { Err(StoreError::Config(why.to_string())) })
    }

    /// Who holds the unlocker role: nobody, ever.
    pub(crate) fn unlocker(&self) -> BoxFuture<'static, Result<Option<UnlockerInfo>, StoreError>> {
        Box::pin(async { Ok(None) })
    }

    /// Why the unlocker never acts here ([`FleetStore::no_unlocker`]): the
    /// family's reason, always.
    pub(crate) fn no_unlocker(&self) -> Option<&'static str> {
        Some(self.no_unlocker)
    }
}

/// The owner id of the acquisition `entry` shows (`None`: a malformed value, a
/// foreign schema's row).
pub fn owner_of(entry: &LockEntry) -> Option<&str> {
    entry.record().map(|r| r.owner.as_str())
}

/// A candidate's name: 1–512 bytes (it is shown, and stored in the store).
fn validate_candidate(candidate: &str) -> Result<(), StoreError> {
    if candidate.is_empty() || candidate.len() > 512 {
        return Err(StoreError::Config(format!(
            "an unlocker candidate is named by 1 to 512 bytes, not {}",
            candidate.len()
        )));
    }
    Ok(())
}

/// The lock's state after a fenced release changed nothing although the
/// leadership was current: free, or another acquisition.
pub(crate) fn not_released(now: Option<LockEntry>) -> Fenced {
    Fenced::Done(match now {
        Some(now) => Release::Changed(now),
        None => Release::NotHeld,
    })
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

    fn address(&self) -> String {
        self.spec.address()
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

    fn release_seen<'a>(
        &'a self,
        _: &'a str,
        _: i64,
        _: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Release, StoreError>> {
        self.refuse()
    }

    fn blacklist<'a>(&'a self, _: &'a BlacklistRecord) -> BoxFuture<'a, Result<Blacklisting, StoreError>> {
        self.refuse()
    }

    fn session_registered<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<bool, StoreError>> {
        self.refuse()
    }

    fn lift_blacklist<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<bool, StoreError>> {
        self.refuse()
    }

    fn campaign<'a>(&'a self, _: &'a str, _: Duration) -> BoxFuture<'a, Result<Box<dyn Leadership>, StoreError>> {
        self.refuse()
    }

    fn unlocker(&self) -> BoxFuture<'_, Result<Option<UnlockerInfo>, StoreError>> {
        self.refuse()
    }
}

#[cfg(test)]
mod foreign_tests {
    use lockscope_model::record::BlacklistRecord;

    use crate::spec::StoreSpec;
    use crate::StoreError;

    /// Every foreign family answers the actions it cannot do through
    /// [`super::Foreign`], with its own reason, without touching its store
    /// (nothing listens on port 1).
    #[tokio::test]
    async fn foreign_families_refuse_the_unlocker_and_have_nothing_to_lift() {
        for (spec, reason) in [
            (
                "zk://127.0.0.1:1/locks",
                "the unlocker never acts on ZooKeeper locks: they end with their sessions",
            ),
            (
                "redis://127.0.0.1:1",
                "the unlocker never acts on Redis locks: they end with their TTL",
            ),
            (
                "redlock+redis://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3",
                "the unlocker never acts on Redis locks: they end with their TTL",
            ),
            (
                "etcd-mutex:127.0.0.1:1#/mx/",
                "the unlocker never acts on etcd's native mutexes: they end with their leases",
            ),
            (
                "advisory+postgres://u@127.0.0.1:1/db",
                "the unlocker never acts on PostgreSQL advisory locks: they have no expiry",
            ),
        ] {
            let fleet = StoreSpec::parse(spec).unwrap().open().unwrap();
            match fleet.campaign("replica-1", std::time::Duration::from_secs(5)).await {
                Err(StoreError::Config(why)) => assert_eq!(why, reason, "{spec}"),
                Err(e) => panic!("{spec}: {e}"),
                Ok(_) => panic!("{spec}: elected"),
            }
            assert!(fleet.unlocker().await.unwrap().is_none(), "{spec}");
            // issue 27: "The unlocker never acts on a foreign fleet (say so in the overview)."
            assert_eq!(fleet.no_unlocker(), Some(reason), "{spec}");
            assert!(!fleet.lift_blacklist("s").await.unwrap(), "{spec}");
            if !spec.starts_with("etcd-mutex:") {
                let entry = BlacklistRecord::new("s", "op", "test", 0);
                assert!(
                    matches!(fleet.blacklist(&entry).await, Err(StoreError::Unsupported(_))),
                    "{spec}"
                );
                assert!(
                    matches!(fleet.session_registered("s").await, Err(StoreError::Unsupported(_))),
                    "{spec}"
                );
            }
        }
        // A lockscope fleet the unlocker may act on; a read-only one it never does.
        let etcd = StoreSpec::parse("etcd:127.0.0.1:1").unwrap().open().unwrap();
        assert_eq!(etcd.no_unlocker(), None);
        let shedlock = StoreSpec::parse("shedlock+sqlite:/nonexistent/s.db")
            .unwrap()
            .open()
            .unwrap();
        assert_eq!(shedlock.no_unlocker(), Some(super::READ_ONLY_UNLOCKER));
    }
}
