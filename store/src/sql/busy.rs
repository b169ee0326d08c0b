//! A SQLite file held by another writer (another process in `BEGIN EXCLUSIVE`,
//! a long batch job): reads go on (WAL), writes wait for the database lock.
//!
//! - The dashboard's admin side (force-release, blacklist, the unlocker) waits
//!   at most [`ADMIN_BUSY_TIMEOUT`] for it, then fails with
//!   [`StoreError::Busy`](crate::StoreError::Busy) having written nothing
//!   (`SQLITE_BUSY` ends the statement before it changes anything), so an
//!   operator gets a quick "store busy, nothing released" instead of a request
//!   that hangs.
//! - [`WriteWatch`] wraps a SQLite store's observer: every
//!   [`WRITE_PROBE_EVERY`] it tries a write that changes nothing, and while that
//!   waits past the busy timeout the fleet's status is
//!   [`StoreStatus::WritesBlocked`]; it goes back to the observer's `Live` by
//!   itself when the file frees up. Events are passed on as they come: the
//!   observer keeps reading while writes are blocked.

use std::time::Duration;

use futures::future::BoxFuture;
use lockscope_model::StoreStatus;
use tokio::sync::mpsc;

use super::SqlLocks;
use crate::{now_ms, Observer, ObserverEvent, StoreError};

/// How long a write of the dashboard's admin side waits for a SQLite file's
/// write lock before it gives up, having written nothing (docs/operations.md,
/// "A busy store").
pub const ADMIN_BUSY_TIMEOUT: Duration = Duration::from_secs(1);

/// How often [`WriteWatch`] tries a write.
pub const WRITE_PROBE_EVERY: Duration = Duration::from_secs(2);

/// A write that changes nothing but needs the database's write lock (SQLite
/// takes it for any `DELETE`, whatever it matches).
const PROBE: &str = "DELETE FROM lockscope_locks WHERE 0 = 1";

/// Whether `e` is SQLite's "database is locked" (`SQLITE_BUSY` and its
/// extended codes) or "database table is locked" (`SQLITE_LOCKED`).
pub(crate) fn is_busy(e: &sqlx::Error) -> bool {
    matches!(sqlite_primary_code(e), Some(5 | 6))
}

/// SQLite's primary result code of `e` (the low byte of its extended code),
/// if `e` is an SQLite database error.
pub fn sqlite_primary_code(e: &sqlx::Error) -> Option<i64> {
    let code = e.as_database_error()?.code()?.parse::<i64>().ok()?;
    Some(code & 0xff)
}

/// A SQLite store's observer, with its writes watched (see the module docs).
pub struct WriteWatch {
    inner: Box<dyn Observer>,
    url: String,
}

impl WriteWatch {
    pub fn new(inner: Box<dyn Observer>, url: &str) -> WriteWatch {
        WriteWatch {
            inner,
            url: url.to_string(),
        }
    }
}

impl Observer for WriteWatch {
    fn run(self: Box<Self>, events: mpsc::Sender<ObserverEvent>) -> BoxFuture<'static, ()> {
        Box::pin(watch(self.inner, self.url, events))
    }

    /// The wrapped observer's: this one only adds the write probe.
    fn resume_history(&mut self, revision: i64) -> bool {
        self.inner.resume_history(revision)
    }
}

/// `Some(line)` while a write waits past the busy timeout.
type Probed = Option<String>;

async fn watch(inner: Box<dyn Observer>, url: String, events: mpsc::Sender<ObserverEvent>) {
    let (tx, mut rx) = mpsc::channel(16);
    let mut observer = inner.run(tx);
    let (probe_tx, mut probes) = mpsc::channel::<Probed>(1);
    let prober = tokio::spawn(probe(url, probe_tx));
    // What the observer said last, and whether writes are blocked (since when, why).
    let mut said: Option<StoreStatus> = None;
    let mut blocked: Option<(i64, String)> = None;
    let shown = |said: &Option<StoreStatus>, blocked: &Option<(i64, String)>| match (said, blocked) {
        (Some(StoreStatus::Live { .. }), Some((since, error))) => Some(StoreStatus::WritesBlocked {
            since: *since,
            error: error.clone(),
        }),
        (said, _) => said.clone(),
    };
    loop {
        let before = shown(&said, &blocked);
        tokio::select! {
            _ = &mut observer => break,
            ev = rx.recv() => match ev {
                None => break,
                Some(ObserverEvent::Status(s)) => said = Some(s),
                Some(other) => {
                    if events.send(other).await.is_err() {
                        break;
                    }
                }
            },
            p = probes.recv() => match p {
                None => break,
                Some(None) => blocked = None,
                Some(Some(error)) => {
                    if blocked.is_none() {
                        blocked = Some((now_ms(), error));
                    }
                }
            },
        }
        let after = shown(&said, &blocked);
        if after != before {
            if let Some(status) = after {
                if events.send(ObserverEvent::Status(status)).await.is_err() {
                    break;
                }
            }
        }
    }
    prober.abort();
}

/// Tries a write every [`WRITE_PROBE_EVERY`] and says whether it was blocked
/// (any other failure is the observer's to report). Ends when nobody listens.
async fn probe(url: String, results: mpsc::Sender<Probed>) {
    let mut store: Option<SqlLocks> = None;
    let mut tick = tokio::time::interval(WRITE_PROBE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if results.is_closed() {
            return;
        }
        let result = match &store {
            Some(s) => s.write_probe().await,
            None => match SqlLocks::connect_admin(&url).await {
                Ok(s) => {
                    let r = s.write_probe().await;
                    store = Some(s);
                    r
                }
                Err(e) => Err(e),
            },
        };
        let said = match result {
            Ok(()) => None,
            Err(StoreError::Busy { .. }) => Some(format!(
                "writes blocked: another process holds the database's write lock (a write waited {} s and gave up); \
                 admin actions are refused until it frees up",
                ADMIN_BUSY_TIMEOUT.as_secs()
            )),
            // Not known to be blocked: the observer says what else is wrong.
            Err(_) => None,
        };
        if results.send(said).await.is_err() {
            return;
        }
    }
}

impl SqlLocks {
    /// A write that changes nothing: `Err(StoreError::Busy)` when another
    /// connection holds the write lock past this store's busy timeout.
    pub async fn write_probe(&self) -> Result<(), StoreError> {
        sqlx::query(PROBE).execute(&self.pool).await?;
        Ok(())
    }
}
