//! PostgreSQL advisory locks (`pg_advisory_lock`, `pg_try_advisory_xact_lock`:
//! Rails migrations, GoodJob, Que, golang-migrate, Flyway…) as a fleet: spec
//! `advisory+postgres://…[#OPTIONS]`.
//!
//! The locks of the URL's database, read by polling (`pg_locks` has no change
//! feed): one statement per poll ([`poll`]) over `pg_locks` (`locktype =
//! 'advisory'`, this database) joined with `pg_stat_activity`, bounded by a row
//! limit, plus `pg_blocking_pids` of every backend waiting on any heavyweight
//! lock (so waits-for chains through other locks are seen: [`graph`]). A lock
//! is named by its key (`KEY`: one bigint, `objsubid = 1`; `K1:K2`: two int4,
//! `objsubid = 2`) or by the name a mapping gives that key. Its holder and
//! waiters are backends, shown as the sessions `PID@BACKEND_START_US`.
//!
//! Admin actions ([`PgAdvisoryFleet`]): PostgreSQL cannot release another
//! backend's advisory lock; the only lever is ending the holder's backend
//! (`pg_terminate_backend`: its connection, every lock and its open
//! transaction, rolled back). The fleet's guarded release is that terminate,
//! fenced by the holder the page showed: the fence is [`fence_of`] the
//! holder's pid and `backend_start`, and the statement that signals checks
//! both ([`signal`]), so a reused pid is never hit. Cancelling a waiter
//! (`pg_cancel_backend`) is [`PgAdvisoryFleet::cancel`], guarded the same way;
//! the admin door's cancel ([`FleetStore::cancel_waiter`]) also needs the
//! backend to be still waiting for that lock's key.
//! Blacklisting is refused; the unlocker never acts here.

pub mod graph;
mod observer;
pub mod poll;
mod spec;

pub use observer::AdvisoryObserver;
pub(crate) use spec::parse_spec;
pub use spec::AdvisoryTarget;

use std::time::Duration;

use futures::future::BoxFuture;
use lockscope_model::admin::Role;
use lockscope_model::fleet::pg_advisory::AdvisoryKey;
use lockscope_model::fleet::FamilyDetail;
use lockscope_model::record::BlacklistRecord;
use lockscope_model::LockBody;
use sqlx::postgres::{PgPool, PgPoolOptions};
use tokio::sync::OnceCell;

use crate::fleet::{Cancel, FleetStore, Foreign, Leadership, Release, Removed, UnlockerInfo};
use crate::protocol::Blacklisting;
use crate::{Observer, StoreError};

/// How long one statement may take before the database counts as unreachable.
pub(crate) const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a terminate waits for the backend to end (`pg_terminate_backend`'s timeout).
pub const TERMINATE_WAIT: Duration = Duration::from_secs(5);

/// The fence of a holder backend: FNV-1a (64-bit) of its pid and
/// `backend_start` (unix µs), top bit cleared: one backend always gives the
/// same fence, a reused pid (another `backend_start`) all but certainly
/// another.
pub fn fence_of(pid: i32, backend_start_us: i64) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in pid.to_le_bytes().iter().chain(backend_start_us.to_le_bytes().iter()) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h & (i64::MAX as u64)) as i64
}

/// The session id a backend is shown as: `PID@BACKEND_START_US`.
pub fn session_of(pid: i32, backend_start_us: i64) -> String {
    format!("{pid}@{backend_start_us}")
}

/// What a guarded signal did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// That backend (pid and start) was signalled.
    Sent,
    /// No backend with that pid and start is there any more: nothing done.
    Gone,
}

/// Which signal: `pg_cancel_backend` (the current query) or
/// `pg_terminate_backend` (the whole connection).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lever {
    Cancel,
    Terminate,
}

/// Signals backend `pid` only if it is still the one started at
/// `backend_start_us`: the check and the signal are one statement, so a pid
/// reused by a new backend since the page was read is never hit. A terminate
/// waits up to [`TERMINATE_WAIT`] for the backend to end.
pub async fn signal(pool: &PgPool, lever: Lever, pid: i32, backend_start_us: i64) -> Result<Signal, StoreError> {
    signal_if(pool, lever, pid, backend_start_us, None).await
}

/// [`signal`], and with `waiting_on`, only while that backend still waits for
/// that advisory key (`granted = false`), checked in the same statement: a
/// waiter that got the lock meanwhile is running its own next statement,
/// which a cancel must not hit.
async fn signal_if(
    pool: &PgPool,
    lever: Lever,
    pid: i32,
    backend_start_us: i64,
    waiting_on: Option<AdvisoryKey>,
) -> Result<Signal, StoreError> {
    let call = match lever {
        Lever::Cancel => "pg_cancel_backend(pid)".to_string(),
        Lever::Terminate => format!("pg_terminate_backend(pid, {})", TERMINATE_WAIT.as_millis()),
    };
    // The key as pg_locks has it (poll::LockRow::key, inverted): objsubid, classid, objid.
    let waiting = waiting_on.map(|key| match key {
        AdvisoryKey::Bigint(k) => (1, (k as u64 >> 32) as i64, (k as u64 & 0xffff_ffff) as i64),
        AdvisoryKey::Pair(a, b) => (2, i64::from(a as u32), i64::from(b as u32)),
    });
    let condition = match waiting {
        Some(_) => {
            " AND EXISTS (SELECT 1 FROM pg_locks l WHERE l.pid = a.pid AND l.locktype = 'advisory' AND NOT l.granted \
               AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
               AND l.objsubid = $3 AND CAST(l.classid AS BIGINT) = $4 AND CAST(l.objid AS BIGINT) = $5)"
        }
        None => "",
    };
    let sql = format!(
        "SELECT {call} FROM pg_stat_activity a \
         WHERE a.pid = $1 AND CAST(EXTRACT(EPOCH FROM a.backend_start) * 1000000 AS BIGINT) = $2{condition}"
    );
    let mut query = sqlx::query_scalar::<_, bool>(&sql).bind(pid).bind(backend_start_us);
    if let Some((sub, classid, objid)) = waiting {
        query = query.bind(sub as i16).bind(classid).bind(objid);
    }
    let done = tokio::time::timeout(READ_TIMEOUT + TERMINATE_WAIT, query.fetch_optional(pool))
        .await
        .map_err(|_| StoreError::Timeout(READ_TIMEOUT + TERMINATE_WAIT))?
        .map_err(|e| StoreError::from(e).of(format!("signalling backend {pid}")))?;
    Ok(match done {
        Some(_) => Signal::Sent,
        None => Signal::Gone,
    })
}

/// A pool of one connection to `url`, within [`READ_TIMEOUT`].
pub(crate) async fn connect(url: &str) -> Result<PgPool, StoreError> {
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_secs(3))
        .after_connect(|conn, _| {
            Box::pin(async move {
                sqlx::query("SET application_name = 'lockscope'")
                    .execute(&mut *conn)
                    .await?;
                Ok(())
            })
        })
        .connect(url);
    match tokio::time::timeout(READ_TIMEOUT, pool).await {
        Ok(r) => r.map_err(StoreError::from),
        Err(_) => Err(StoreError::Timeout(READ_TIMEOUT)),
    }
}

/// Why an advisory lock's holder cannot be blacklisted.
pub const NO_BLACKLIST: &str = "PostgreSQL advisory locks are held by database backends, not lockscope sessions: \
     there is nothing to blacklist (terminate the holder's backend with a release instead)";

/// The admin side of an `advisory+postgres://` fleet (see the module docs).
pub struct PgAdvisoryFleet {
    target: AdvisoryTarget,
    pool: OnceCell<PgPool>,
}

impl PgAdvisoryFleet {
    pub fn new(target: AdvisoryTarget) -> PgAdvisoryFleet {
        PgAdvisoryFleet {
            target,
            pool: OnceCell::new(),
        }
    }

    async fn pool(&self) -> Result<&PgPool, StoreError> {
        self.pool.get_or_try_init(|| connect(&self.target.url)).await
    }

    /// Cancels waiter `pid`'s current statement (its `pg_advisory_lock` call
    /// fails with `canceling statement due to user request`), only if it is
    /// still the backend started at `backend_start_us`.
    pub async fn cancel(&self, pid: i32, backend_start_us: i64) -> Result<Signal, StoreError> {
        signal(self.pool().await?, Lever::Cancel, pid, backend_start_us).await
    }

    /// Cancels the wait of `waiter` (`PID@BACKEND_START_US`, as the lock
    /// shows its waiters) for lock `name`: only if the lock still lists it as a
    /// waiter, and (checked in the signalling statement) it is still that
    /// backend and still waits for that key.
    async fn cancel_waiting(&self, name: &str, waiter: &str) -> Result<Cancel, StoreError> {
        let Some(now) = self.read(name).await? else {
            return Ok(Cancel::NotWaiting(None));
        };
        let lock = match &now.body {
            LockBody::Foreign { detail: Some(d), .. } => match &**d {
                FamilyDetail::PgAdvisory(l) => Some(l),
                _ => None,
            },
            _ => None,
        };
        let found = lock.and_then(|l| {
            l.waiters
                .iter()
                .find(|w| w.session == waiter)
                .map(|w| (w.pid, w.backend_start_us, l.key))
        });
        let Some((pid, start, key)) = found else {
            return Ok(Cancel::NotWaiting(Some(now)));
        };
        match signal_if(self.pool().await?, Lever::Cancel, pid, start, Some(key)).await? {
            Signal::Sent => Ok(Cancel::Cancelled),
            Signal::Gone => Ok(Cancel::NotWaiting(self.read(name).await?)),
        }
    }

    /// Terminates backend `pid` only if it is still the one started at
    /// `backend_start_us`.
    pub async fn terminate(&self, pid: i32, backend_start_us: i64) -> Result<Signal, StoreError> {
        signal(self.pool().await?, Lever::Terminate, pid, backend_start_us).await
    }

    /// Lock `name` as the database has it now (`None`: not held).
    pub async fn read(&self, name: &str) -> Result<Option<lockscope_model::LockEntry>, StoreError> {
        crate::validate_name(name)?;
        let read = poll::read(self.pool().await?, &self.target).await?;
        let mut levels = Default::default();
        let snapshot = poll::build(&self.target, read, &mut levels);
        Ok(snapshot.locks.into_iter().find(|e| e.name == name))
    }
}

/// The admin actions these locks refuse like every foreign family's.
const FOREIGN: Foreign = Foreign {
    no_unlocker: "the unlocker never acts on PostgreSQL advisory locks: they have no expiry",
};

impl FleetStore for PgAdvisoryFleet {
    fn source(&self) -> String {
        self.target.source()
    }

    fn address(&self) -> String {
        crate::summary::address_of_url(&self.target.url)
    }

    fn writable(&self) -> bool {
        true
    }

    fn observer(&self) -> Box<dyn Observer> {
        Box::new(AdvisoryObserver::new(self.target.clone()))
    }

    /// docs/operations.md: "The release needs the admin role": it ends the
    /// holder's whole connection (every lock and transaction on it).
    fn release_needs(&self) -> Role {
        Role::Admin
    }

    /// Terminates the holder's backend if `fence` still names it ([`fence_of`]).
    fn release<'a>(&'a self, name: &'a str, fence: i64) -> BoxFuture<'a, Result<Release, StoreError>> {
        Box::pin(async move {
            let Some(now) = self.read(name).await? else {
                return Ok(Release::NotHeld);
            };
            let holder = poll::holder_of(&now).map(|h| (h.pid, h.backend_start_us));
            let Some((pid, start)) = holder.filter(|_| now.fence == fence) else {
                return Ok(Release::Changed(now));
            };
            match self.terminate(pid, start).await? {
                Signal::Sent => Ok(Release::Released(Removed { revision: None })),
                Signal::Gone => Ok(match self.read(name).await? {
                    Some(now) => Release::Changed(now),
                    None => Release::NotHeld,
                }),
            }
        })
    }

    /// An advisory lock shows no owner: `owner` is not compared (the fence
    /// names the holder's backend).
    fn release_seen<'a>(
        &'a self,
        name: &'a str,
        fence: i64,
        _owner: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Release, StoreError>> {
        self.release(name, fence)
    }

    fn blacklist<'a>(&'a self, _: &'a BlacklistRecord) -> BoxFuture<'a, Result<Blacklisting, StoreError>> {
        Foreign::no_blacklist(NO_BLACKLIST)
    }

    fn session_registered<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<bool, StoreError>> {
        Foreign::no_blacklist(NO_BLACKLIST)
    }

    fn lift_blacklist<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<bool, StoreError>> {
        FOREIGN.lift_blacklist()
    }

    /// `pg_cancel_backend` of a waiter the lock still lists, fenced by its pid,
    /// its backend start and its wait for this key.
    fn cancel_waiter<'a>(&'a self, name: &'a str, waiter: &'a str) -> BoxFuture<'a, Result<Cancel, StoreError>> {
        Box::pin(self.cancel_waiting(name, waiter))
    }

    fn campaign<'a>(&'a self, _: &'a str, _: Duration) -> BoxFuture<'a, Result<Box<dyn Leadership>, StoreError>> {
        FOREIGN.campaign()
    }

    fn unlocker(&self) -> BoxFuture<'_, Result<Option<UnlockerInfo>, StoreError>> {
        FOREIGN.unlocker()
    }

    fn no_unlocker(&self) -> Option<&'static str> {
        FOREIGN.no_unlocker()
    }
}

#[cfg(test)]
mod tests;
