//! Shows the locks of [ShedLock](https://github.com/lukas-krecan/ShedLock) (the Java
//! scheduler lock) on the dashboard, read-only, from its JDBC provider's table in
//! PostgreSQL or SQLite.
//!
//! ShedLock keeps one row per lock name, never deleted:
//! `shedlock(name, lock_until, locked_at, locked_by)`, timestamps in UTC. A lock is
//! held while `lock_until` is in the future; unlocking sets `lock_until` to now (or
//! to `lockAtLeastUntil`), so a lock also ends by time passing, without any write.
//! The observer therefore polls: every `poll` it reads the whole table and sends the
//! rows whose `lock_until` is later than the dashboard's clock as a
//! [`FleetEvent::Reset`] (the hub's reducer turns it into per-row differences).
//!
//! What is shown, per held row: `locked_by` as owner, session and host; `locked_at`
//! as acquisition and heartbeat time; `lock_until` as both the alert and the
//! auto-unlock deadline; service `shedlock`. What is not: ShedLock records no
//! process id, purpose, backtrace, expected runtime or fencing token (`fence` is
//! always 0), and nothing about waiters (ShedLock skips a busy task instead of
//! waiting). A row whose timestamps cannot be read (NULL, text that is not a date)
//! is shown as [`LockBody::Malformed`] with what was found.
//!
//! Read-only: the observer never runs lockscope's migrations and sends only one
//! `SELECT` (and, on PostgreSQL, the liveness probe's `SELECT 1` on a
//! connection of its own: [`super::probe`]); its connections are also put in
//! read-only mode (PostgreSQL `TRANSACTION READ ONLY`, SQLite `PRAGMA
//! query_only`). A SQLite URL with `mode=rwc` would still create a missing
//! database file when opening it: use a plain `sqlite://path` URL.
//!
//! Clocks: `lock_until` is on the clock of whoever wrote it (the ShedLock host, or
//! the database with `usingDbTime()`), compared with the dashboard's clock; a skew
//! between them shifts when a lock is shown as released by as much. Timestamps
//! must be UTC (ShedLock's default). SQLite: text in any format SQLite's date
//! functions read, or an integer taken as unix milliseconds (what the xerial
//! sqlite-jdbc driver stores by default). Custom column names are not supported.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use futures::future::BoxFuture;
use lockscope_model::record::{MALFORMED_KEEP_BYTES, RECORD_VERSION};
use lockscope_model::{FleetEvent, LockBody, LockEntry, LockRecord, Snapshot};
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{AnyPool, Row};
use tokio::sync::mpsc;
use tracing::warn;

use super::probe::SqlProbe;
use super::Dialect;
use crate::backoff::Backoff;
use crate::link::{run_observer, Link, Session};
use crate::liveness::{while_alive, Heartbeat};
use crate::{now_ms, Observer, ObserverEvent, StoreError};

/// Watches a ShedLock table (see the module documentation).
pub struct ShedLockObserver {
    url: String,
    dialect: Dialect,
    table: String,
    /// Time between two reads of the table.
    pub poll: Duration,
    /// A read that takes longer counts as the database being unreachable.
    pub read_timeout: Duration,
    pub backoff: Backoff,
    /// The held locks of the last read, with the revision each was given.
    shown: HashMap<String, (LockBody, i64)>,
    /// The revision of the last read that changed something.
    revision: i64,
}

impl ShedLockObserver {
    /// ShedLock's default table name.
    pub const DEFAULT_TABLE: &'static str = "shedlock";

    /// `url`: `postgres://…` or `sqlite://path`. `table`: the lock table, `None` for
    /// [`Self::DEFAULT_TABLE`]; a plain SQL identifier, optionally schema-qualified
    /// (`jobs.shedlock`), used unquoted as ShedLock does (PostgreSQL folds it to
    /// lower case). Nothing is connected until [`Observer::run`].
    pub fn new(url: impl Into<String>, table: Option<&str>) -> Result<ShedLockObserver, StoreError> {
        let url = url.into();
        let dialect = if url.starts_with("sqlite:") {
            Dialect::Sqlite
        } else if url.starts_with("postgres:") || url.starts_with("postgresql:") {
            Dialect::Postgres
        } else {
            // Only the scheme: the rest may hold a password.
            let scheme = url.split(':').next().unwrap_or_default();
            return Err(StoreError::Config(format!(
                "ShedLock: {scheme:?} is not a sqlite: or postgres: URL"
            )));
        };
        let table = table.unwrap_or(Self::DEFAULT_TABLE);
        validate_table(table)?;
        Ok(ShedLockObserver {
            url,
            dialect,
            table: table.to_string(),
            poll: Duration::from_secs(1),
            read_timeout: Duration::from_secs(10),
            backoff: Backoff::new(Duration::from_millis(250), Duration::from_secs(10)),
            shown: HashMap::new(),
            revision: 0,
        })
    }

    pub fn table(&self) -> &str {
        &self.table
    }

    /// The one statement the observer sends. Timestamps become unix ms in SQL
    /// because the `Any` driver cannot decode timestamp types; the raw text is read
    /// too, to show what a row held when it cannot be converted.
    fn select(&self) -> String {
        let t = &self.table;
        match self.dialect {
            Dialect::Postgres => {
                let ms = |c: &str| {
                    format!("CASE WHEN isfinite({c}) THEN CAST(EXTRACT(EPOCH FROM {c}) * 1000 AS BIGINT) END")
                };
                format!(
                    "SELECT CAST(name AS TEXT), {}, {}, CAST(locked_by AS TEXT), \
                     CAST(lock_until AS TEXT), CAST(locked_at AS TEXT) FROM {t}",
                    ms("lock_until"),
                    ms("locked_at"),
                )
            }
            Dialect::Sqlite => {
                let ms = |c: &str| {
                    format!(
                        "CASE typeof({c}) WHEN 'integer' THEN {c} \
                         ELSE CAST(ROUND((julianday({c}) - 2440587.5) * 86400000) AS INTEGER) END"
                    )
                };
                format!(
                    "SELECT CAST(name AS TEXT), {}, {}, CAST(locked_by AS TEXT), \
                     CAST(lock_until AS TEXT), CAST(locked_at AS TEXT) FROM {t}",
                    ms("lock_until"),
                    ms("locked_at"),
                )
            }
        }
    }

    async fn connect(&self) -> Result<AnyPool, StoreError> {
        sqlx::any::install_default_drivers();
        let dialect = self.dialect;
        let pool = AnyPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(3))
            .after_connect(move |conn, _| {
                Box::pin(async move {
                    let sql = match dialect {
                        Dialect::Postgres => "SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY",
                        Dialect::Sqlite => "PRAGMA query_only = ON",
                    };
                    sqlx::query(sql).execute(&mut *conn).await?;
                    Ok(())
                })
            })
            .connect(&self.url)
            .await;
        match pool {
            Ok(pool) => Ok(pool),
            // The pool says only that it timed out: one connection says why.
            Err(sqlx::Error::PoolTimedOut) => Err(super::why_not(&self.url, false).await.into()),
            Err(e) => Err(e.into()),
        }
    }

    /// Runs until an error (returned) or until the hub is gone (`Ok`).
    async fn observe(&mut self, link: &mut Link, beat: &Heartbeat) -> Result<(), StoreError> {
        let pool = tokio::time::timeout(self.read_timeout, self.connect())
            .await
            .map_err(|_| StoreError::Timeout(self.read_timeout))??;
        let sql = self.select();
        let mut first = true;
        let mut warned_name = false;
        loop {
            let rows = tokio::time::timeout(self.read_timeout, sqlx::query(&sql).fetch_all(&pool))
                .await
                .map_err(|_| StoreError::Timeout(self.read_timeout))?
                .map_err(|e| StoreError::from(e).of(format!("reading the ShedLock table {}", self.table)))?;
            beat.saw();
            let now = now_ms();
            let mut held = BTreeMap::new();
            for row in &rows {
                match held_body(row, now) {
                    Ok(Some((name, body))) => {
                        held.insert(name, body);
                    }
                    Ok(None) => {}
                    Err(e) if !warned_name => {
                        warned_name = true;
                        warn!(error = %e, table = %self.table, "skipping a ShedLock row whose name is unreadable");
                    }
                    Err(_) => {}
                }
            }
            // After a reconnect, send the table even if unchanged: it may have been
            // a different database.
            if let Some(reset) = self.reset(held, now, first) {
                if link.events(vec![reset]).await.is_err() {
                    return Ok(());
                }
            }
            first = false;
            if link.live().await.is_err() {
                return Ok(());
            }
            tokio::time::sleep(self.poll).await;
            if link.hub_gone() {
                return Ok(());
            }
        }
    }

    /// The reset to send for this read, or `None` if nothing changed since the last.
    ///
    /// Revisions are the observer's own, because the hub's reducer drops an
    /// upsert whose revision is not above the shown one, and a
    /// removal whose revision is not above the removed entry's; ShedLock's
    /// timestamps do not give that (unlocking with `lockAtLeastFor`, or extending
    /// by less than before, moves `lock_until` back). A read that changes anything
    /// gets a revision above every earlier one, at least the dashboard's clock in ms
    /// so that it keeps growing across restarts; each lock keeps the revision of
    /// the read where it last changed.
    fn reset(&mut self, held: BTreeMap<String, LockBody>, now: i64, always: bool) -> Option<FleetEvent> {
        let changed = held.len() != self.shown.len()
            || held
                .iter()
                .any(|(name, body)| self.shown.get(name).is_none_or(|(b, _)| b != body));
        if !changed && !always {
            return None;
        }
        if changed {
            self.revision = (self.revision + 1).max(now);
        }
        let mut locks = Vec::with_capacity(held.len());
        let mut shown = HashMap::with_capacity(held.len());
        for (name, body) in held {
            let revision = match self.shown.get(&name) {
                Some((b, r)) if *b == body => *r,
                _ => self.revision,
            };
            locks.push(LockEntry {
                name: name.clone(),
                fence: 0,
                revision,
                body: body.clone(),
            });
            shown.insert(name, (body, revision));
        }
        self.shown = shown;
        // ShedLock has no waiters and no sessions.
        Some(FleetEvent::Reset(Snapshot {
            revision: self.revision,
            locks,
            ..Snapshot::default()
        }))
    }
}

impl Session for ShedLockObserver {
    fn session<'a>(&'a mut self, link: &'a mut Link) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            // Between two polls, and during a read that hangs (its timeout is
            // far longer), the liveness probe notices a database gone away.
            let mut probe = SqlProbe::open(&self.url, self.dialect).await?;
            let beat = Heartbeat::default();
            while_alive(self.observe(link, &beat), &mut probe, &beat).await
        })
    }
}

impl Observer for ShedLockObserver {
    fn run(self: Box<Self>, events: mpsc::Sender<ObserverEvent>) -> BoxFuture<'static, ()> {
        let link = Link::new(events, self.backoff.clone(), crate::summary::address_of_url(&self.url));
        Box::pin(run_observer(link, "shedlock", *self))
    }
}

/// A plain SQL identifier (ASCII letter or `_`, then letters, digits, `_`; at most
/// 63 bytes, PostgreSQL's limit), optionally preceded by `schema.`: it is put into
/// the statement as is, so nothing else may pass.
pub(crate) fn validate_table(table: &str) -> Result<(), StoreError> {
    let ident = |s: &str| {
        !s.is_empty()
            && s.len() <= 63
            && s.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    let parts: Vec<&str> = table.split('.').collect();
    if parts.len() <= 2 && parts.iter().all(|p| ident(p)) {
        Ok(())
    } else {
        Err(StoreError::Config(format!(
            "ShedLock table name {table:?} is not a plain SQL identifier \
             (letters, digits and _, not starting with a digit, at most 63 bytes), \
             optionally schema-qualified as schema.table"
        )))
    }
}

/// Columns of [`ShedLockObserver::select`].
const NAME: usize = 0;
const LOCK_UNTIL_MS: usize = 1;
const LOCKED_AT_MS: usize = 2;
const LOCKED_BY: usize = 3;
const LOCK_UNTIL_RAW: usize = 4;
const LOCKED_AT_RAW: usize = 5;

/// The row's name and what to show, `Ok(None)` if it is not held at `now` (or has
/// no name), `Err` if its name cannot be read. Everything else that cannot be read
/// makes the row [`LockBody::Malformed`].
fn held_body(row: &AnyRow, now: i64) -> Result<Option<(String, LockBody)>, sqlx::Error> {
    let Some(name) = row.try_get::<Option<String>, _>(NAME)? else {
        return Ok(None);
    };
    let text = |i: usize| row.try_get::<Option<String>, _>(i).unwrap_or_default();
    let ms = |i: usize, raw: usize, column: &str| match row.try_get::<Option<i64>, _>(i) {
        Ok(Some(ms)) => Ok(ms),
        Ok(None) => Err(match text(raw) {
            None => format!("{column} is NULL"),
            Some(raw) => format!("{column} {raw:?} is not a timestamp"),
        }),
        Err(e) => Err(format!("{column}: {e}")),
    };
    let lock_until = ms(LOCK_UNTIL_MS, LOCK_UNTIL_RAW, "lock_until");
    if lock_until.as_ref().is_ok_and(|&until| until <= now) {
        return Ok(None);
    }
    let locked_at = ms(LOCKED_AT_MS, LOCKED_AT_RAW, "locked_at");
    let locked_by = row
        .try_get::<Option<String>, _>(LOCKED_BY)
        .map_err(|e| format!("locked_by: {e}"))
        .and_then(|b| b.ok_or_else(|| "locked_by is NULL".to_string()));
    let body = match (lock_until, locked_at, locked_by) {
        (Ok(lock_until), Ok(locked_at), Ok(locked_by)) => LockBody::Held(LockRecord {
            v: RECORD_VERSION,
            owner: locked_by.clone(),
            session: locked_by.as_str().into(),
            service: "shedlock".into(),
            host: locked_by.as_str().into(),
            pid: 0,
            purpose: format!("ShedLock {name}"),
            backtrace: [].into(),
            acquired_at: locked_at,
            expected_runtime_ms: lock_until.saturating_sub(locked_at).max(0) as u64,
            alert_at: lock_until,
            auto_unlock_at: lock_until,
            heartbeat_at: locked_at,
        }),
        (lock_until, locked_at, locked_by) => {
            let error = [lock_until.err(), locked_at.err(), locked_by.err()]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join("; ");
            let raw = serde_json::json!({
                "name": name,
                "lock_until": text(LOCK_UNTIL_RAW),
                "locked_at": text(LOCKED_AT_RAW),
                "locked_by": text(LOCKED_BY),
            });
            let mut raw = serde_json::to_vec(&raw).expect("JSON values serialise");
            raw.truncate(MALFORMED_KEEP_BYTES);
            LockBody::Malformed {
                raw,
                error: format!("not a readable ShedLock row: {error}"),
            }
        }
    };
    Ok(Some((name, body)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names() {
        for ok in ["shedlock", "ShedLock", "_locks", "jobs.shedlock", "s1.t_2"] {
            assert!(validate_table(ok).is_ok(), "{ok}");
        }
        let long = "x".repeat(64);
        for bad in [
            "",
            "1shed",
            "shed lock",
            "shedlock;DROP TABLE x",
            "a.b.c",
            ".shedlock",
            "shedlock.",
            "\"shedlock\"",
            "shed-lock",
            "shedlöck",
            long.as_str(),
        ] {
            assert!(validate_table(bad).is_err(), "{bad}");
        }
        assert!(ShedLockObserver::new("sqlite://x.db", Some("x;--")).is_err());
        assert!(ShedLockObserver::new("mysql://x", None).is_err());
        assert_eq!(
            ShedLockObserver::new("postgres://h/db", None).unwrap().table(),
            "shedlock"
        );
    }

    fn held(until: i64) -> LockBody {
        LockBody::Held(LockRecord {
            v: RECORD_VERSION,
            owner: "h".into(),
            session: "h".into(),
            service: "shedlock".into(),
            host: "h".into(),
            pid: 0,
            purpose: String::new(),
            backtrace: [].into(),
            acquired_at: 0,
            expected_runtime_ms: until as u64,
            alert_at: until,
            auto_unlock_at: until,
            heartbeat_at: 0,
        })
    }

    #[test]
    fn revisions_let_every_change_through_the_reducer() {
        let mut o = ShedLockObserver::new("sqlite://x.db", None).unwrap();
        let mut hub = lockscope_model::FleetState::default();
        let mut step = |o: &mut ShedLockObserver, locks: &[(&str, i64)], now: i64, always: bool| {
            let held = locks.iter().map(|(n, u)| (n.to_string(), held(*u))).collect();
            let reset = o.reset(held, now, always);
            if let Some(reset) = reset {
                hub.apply(reset);
            }
            let shown: Vec<_> = hub
                .locks()
                .map(|e| (e.name.clone(), e.record().unwrap().auto_unlock_at))
                .collect();
            assert_eq!(
                shown,
                locks.iter().map(|(n, u)| (n.to_string(), *u)).collect::<Vec<_>>()
            );
        };
        step(&mut o, &[("a", 100), ("b", 50)], 10, true);
        let r = o.revision;
        step(&mut o, &[("a", 100), ("b", 50)], 11, false);
        assert_eq!(o.revision, r, "nothing changed");
        // Unlocked with lockAtLeastFor: lock_until moves back.
        step(&mut o, &[("a", 60), ("b", 50)], 12, false);
        // Released (or expired), then taken again.
        step(&mut o, &[("a", 60)], 13, false);
        step(&mut o, &[("a", 60), ("b", 40)], 14, false);
        // The clock going back does not make revisions go back.
        step(&mut o, &[("a", 30), ("b", 40)], 1, false);
        step(&mut o, &[], 2, false);
        assert!(o.reset(BTreeMap::new(), 3, false).is_none());
    }
}
