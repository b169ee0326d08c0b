//! The audit log of admin actions, and the browser's sign-in sessions, in SQL
//! (SQLite, by default a file of its own beside the embedded store's, or
//! PostgreSQL).
//!
//! The log is **append-only**: [`AuditLog`] can add an entry and read entries,
//! and has no way to change or remove one. Every attempt is recorded, refused
//! ones too ([`AuditEntry`]); ids are assigned by the database and increase, so
//! "newest first" is "highest id first". Entries are exported for incident
//! reviews as CSV or NDJSON ([`to_csv`], [`to_ndjson`]).
//!
//! Sign-in sessions: a browser that signs in gets a random secret in its cookie
//! and a CSRF token for its forms; the database keeps only the secret's SHA-256,
//! so reading the table (or a backup of it) does not let anyone sign in.
//!
//! Attempts without an identity are not a row each: anyone can make them, so
//! they are tallied, one row per source and minute with their count
//! ([`AuditLog::tally`], `tally`).
//!
//! An admin attempt is never lost from the log: an entry the database cannot
//! take now is queued in a durable spool and written when it can
//! ([`AuditLog::ready`], [`AuditLog::record`]: `record`; `spool`); an existing install's entries are carried
//! over when the log moves to its own file (`import`).
//!
//! Layout: here, [`AuditLog`] (opening, appending, reading entries); `error`
//! ([`AuditError`]); `sessions` (sign-in sessions: [`NewSession`], [`WebSession`]);
//! `sql` (URLs, tables, rows); `export` (CSV, NDJSON); `tally` (attempts
//! without an identity); `record` (the door an action's entry takes: a
//! place reserved before acting, the write or the queue after); `spool`
//! (entries waiting for the database);
//! `import` (entries carried over from the lock store's file).

mod error;
pub(crate) mod export;
mod import;
mod record;
mod sessions;
pub mod spool;
pub(crate) mod sql;
pub mod tally;

use error::db_error;
pub use error::AuditError;
pub use export::{to_csv, to_ndjson, FIELDS};
pub use import::default_file;
pub use record::{Permit, AUDIT_WRITE_TIMEOUT, SPOOL_FLUSH_TIMEOUT};
pub use sessions::{NewSession, WebSession};

use std::net::IpAddr;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use lockscope_model::admin::{AuditEntry, AuditQuery};
use lockscope_store::sql::Dialect;
use sqlx::any::AnyPoolOptions;
use sqlx::{AnyPool, Row};

use sql::{sql, Bind};

/// Where [`AuditLog::record`] put an entry.
#[derive(Clone, Debug)]
pub enum Recorded {
    /// In the log, with the id it assigned.
    Written(AuditEntry),
    /// In the spool (on disk): written to the log, in order, when the database
    /// takes writes again. `why`: what the database said.
    Queued { entry: AuditEntry, why: String },
}

/// How long a write to an SQLite audit log waits for another connection's
/// write lock before the entry is queued instead ([`AuditLog::record`]; any
/// database's write is bounded by [`AUDIT_WRITE_TIMEOUT`]).
pub const AUDIT_BUSY_TIMEOUT: Duration = Duration::from_secs(1);

/// How often queued entries are tried again.
pub const SPOOL_FLUSH_EVERY: Duration = Duration::from_secs(1);

/// The audit log and sign-in sessions (cheap to clone: a shared connection pool).
#[derive(Clone)]
pub struct AuditLog {
    inner: Arc<Inner>,
}

struct Inner {
    pool: AnyPool,
    dialect: Dialect,
    /// The database, without credentials, for errors.
    shown: String,
    /// Attempts without an identity, counted until their minute is over.
    tally: Mutex<tally::Tally>,
    /// Entries waiting for the database (SQLite: `PATH.spool` beside the log;
    /// PostgreSQL: where [`AuditLog::set_spool`] says).
    spool: std::sync::OnceLock<spool::Spool>,
    /// Why this log has no spool, when another process owns it: this log
    /// then allows no action ([`AuditLog::ready`]).
    no_spool: std::sync::OnceLock<String>,
}

impl std::fmt::Debug for AuditLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditLog").field("db", &self.inner.shown).finish()
    }
}

impl AuditLog {
    /// Opens the log in `sqlite:PATH` (the file, and its directory, are created
    /// if missing) or `postgres://…`, creating its tables if absent. An
    /// SQLite log queues what it cannot take in `PATH.spool`, which it owns
    /// for its lifetime ([`AuditLog::set_spool`]).
    pub async fn open(url: &str) -> Result<AuditLog, AuditError> {
        Self::open_with(url, true).await
    }

    /// Opens the log to read it (and append directly, as an import does):
    /// it takes no spool, so a server using the same log keeps its own, and
    /// it allows no action ([`AuditLog::ready`]).
    pub async fn open_read_only(url: &str) -> Result<AuditLog, AuditError> {
        Self::open_with(url, false).await
    }

    async fn open_with(url: &str, spooled: bool) -> Result<AuditLog, AuditError> {
        let target = sql::target(url).map_err(AuditError::Config)?;
        target
            .create_dir()
            .map_err(|(what, source)| AuditError::Io { what, source })?;
        sqlx::any::install_default_drivers();
        let opts = AnyPoolOptions::new()
            .max_connections(4)
            .acquire_timeout(Duration::from_secs(3));
        let opts = match target.dialect {
            Dialect::Sqlite => sql::sqlite_wal_busy(opts, Some(AUDIT_BUSY_TIMEOUT)),
            Dialect::Postgres => opts,
        };
        let pool = opts
            .connect(&target.url)
            .await
            .map_err(|e| db_error(&target.shown, "opening the database", e))?;
        let log = AuditLog {
            inner: Arc::new(Inner {
                pool,
                dialect: target.dialect,
                shown: target.shown,
                tally: Mutex::new(tally::Tally::new(
                    crate::settings::Limits::default().audit_sources_per_minute,
                )),
                spool: std::sync::OnceLock::new(),
                no_spool: std::sync::OnceLock::new(),
            }),
        };
        log.create_tables().await?;
        if let (Some(file), true) = (&target.file, spooled) {
            let mut path = file.clone().into_os_string();
            path.push(".spool");
            log.set_spool(std::path::Path::new(&path))?;
        }
        tokio::spawn(write_tallies(Arc::downgrade(&log.inner)));
        tokio::spawn(record::flush_spool(Arc::downgrade(&log.inner)));
        Ok(log)
    }

    /// Queues entries the database cannot take in the file `path` (an SQLite
    /// log has its spool beside it already; this one is kept). A spool
    /// another process owns is not used: this log then refuses every action
    /// before it acts (`503`, [`AuditLog::ready`]; logged), because it could
    /// not keep their entries while the database does not take them.
    pub fn set_spool(&self, path: &std::path::Path) -> Result<(), AuditError> {
        let spool = match spool::Spool::open(path) {
            Ok(spool) => spool,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let why = format!(
                    "its spool {} is another process's: one server per audit spool",
                    path.display()
                );
                tracing::error!("{why}; admin actions and auto-releases are refused");
                let _ = self.inner.no_spool.set(why);
                return Ok(());
            }
            Err(source) => {
                return Err(AuditError::Io {
                    what: format!("reading the audit spool {}", path.display()),
                    source,
                })
            }
        };
        if spool.pending() > 0 {
            tracing::warn!(path = %path.display(), entries = spool.pending(), "audit entries queued by an earlier run: writing them");
        }
        let _ = self.inner.spool.set(spool);
        Ok(())
    }

    /// For `/metrics`: entries waiting in the spool, and entries ever queued.
    pub fn spool_counts(&self) -> (usize, u64) {
        self.inner
            .spool
            .get()
            .map_or((0, 0), |s| (s.pending(), s.queued_total()))
    }

    /// At most this many sources get tally rows of their own in a minute
    /// (`[limits] audit_sources_per_minute`).
    pub fn set_tally_sources(&self, sources: usize) {
        self.inner.tally.lock().unwrap().set_sources(sources);
    }

    /// Counts `entry`, an attempt without an identity from `peer`: written as
    /// part of its source's row of the minute, when that minute is over. The
    /// entry is returned as it was (id 0: not yet written).
    pub fn tally(&self, entry: &AuditEntry, peer: Option<IpAddr>) -> AuditEntry {
        let source = crate::client::source(peer);
        let mut tally = self.inner.tally.lock().unwrap();
        tally.add(entry, source, tokio::time::Instant::now());
        entry.clone()
    }

    /// Writes the tally rows of finished minutes (`all`: the current
    /// minute's too, as at shutdown). A row that cannot be written is logged
    /// and dropped.
    pub async fn flush_tally(&self, all: bool) {
        let rows = self.inner.tally.lock().unwrap().take(tokio::time::Instant::now(), all);
        for row in rows {
            if let Err(e) = self.append(&row).await {
                tracing::error!(error = %e, ?row, "a tally of attempts without an identity could not be written");
            }
        }
    }

    /// For `/metrics`: attempts without an identity tallied so far, the
    /// rows made of them, and the sources a minute may have rows of their
    /// own (`[limits] audit_sources_per_minute`).
    pub fn tally_counts(&self) -> (u64, u64, usize) {
        let t = self.inner.tally.lock().unwrap();
        (t.attempts, t.rows, t.sources())
    }

    async fn create_tables(&self) -> Result<(), AuditError> {
        let what = "creating the tables";
        let mut tx = self.inner.pool.begin().await.map_err(|e| self.error(what, e))?;
        if self.inner.dialect == Dialect::Postgres {
            sqlx::query(sql::PG_SCHEMA_LOCK)
                .execute(&mut *tx)
                .await
                .map_err(|e| self.error(what, e))?;
        }
        for statement in sql::schema(self.inner.dialect) {
            sqlx::query(statement)
                .execute(&mut *tx)
                .await
                .map_err(|e| self.error(what, e))?;
        }
        if self.inner.dialect == Dialect::Sqlite {
            let has: i64 = sqlx::query(sql::KEY_COLUMN_MISSING)
                .fetch_one(&mut *tx)
                .await
                .and_then(|r| r.try_get(0))
                .map_err(|e| self.error(what, e))?;
            if has == 0 {
                sqlx::query(sql::ADD_KEY_COLUMN)
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| self.error(what, e))?;
            }
        }
        for statement in sql::key_steps(self.inner.dialect) {
            sqlx::query(statement)
                .execute(&mut *tx)
                .await
                .map_err(|e| self.error(what, e))?;
        }
        tx.commit().await.map_err(|e| self.error(what, e))
    }

    fn error(&self, what: &'static str, source: sqlx::Error) -> AuditError {
        db_error(&self.inner.shown, what, source)
    }

    fn sql<'q>(&self, q: &'q str) -> std::borrow::Cow<'q, str> {
        sql(self.inner.dialect, q)
    }

    /// Records `entry` (its `id` is ignored) and returns it as stored, with the
    /// id the log assigned: greater than every id before it.
    pub async fn append(&self, entry: &AuditEntry) -> Result<AuditEntry, AuditError> {
        self.append_keyed(entry, None).await
    }

    /// [`AuditLog::append`] under `key`: nothing is written if an entry with
    /// this key is there already (then `RowNotFound`).
    pub(crate) async fn append_keyed(&self, entry: &AuditEntry, key: Option<&str>) -> Result<AuditEntry, AuditError> {
        let q = self.sql(sql::INSERT);
        let row = bind_entry(sqlx::query(&q), entry)
            .bind(key)
            // `fetch_all`, not `fetch_one`: SQLite hands out the RETURNING row
            // before the statement completes and commits, so stopping at the row
            // would drop a failure to commit (a full disk) on the floor.
            .fetch_all(&self.inner.pool)
            .await
            .map_err(|e| self.error("appending an entry", e))?;
        let row = row
            .first()
            .ok_or_else(|| self.error("appending an entry", sqlx::Error::RowNotFound))?;
        let id: i64 = row.try_get(0).map_err(|e| self.error("appending an entry", e))?;
        Ok(AuditEntry { id, ..entry.clone() })
    }

    /// The entries `q` selects, newest first, at most `q.limit` (default 1000,
    /// never more than [`lockscope_model::admin::MAX_AUDIT_ROWS`]).
    pub async fn query(&self, q: &AuditQuery) -> Result<Vec<AuditEntry>, AuditError> {
        self.select(q, None).await
    }

    /// Like [`AuditLog::query`], among the entries of `fleets` only (what a
    /// reader limited to those fleets may see; the limit counts those).
    pub async fn query_fleets(&self, q: &AuditQuery, fleets: &[String]) -> Result<Vec<AuditEntry>, AuditError> {
        self.select(q, Some(fleets)).await
    }

    async fn select(&self, q: &AuditQuery, fleets: Option<&[String]>) -> Result<Vec<AuditEntry>, AuditError> {
        let what = "reading entries";
        let (text, binds) = sql::select(q, fleets);
        let text = self.sql(&text);
        let mut query = sqlx::query(&text);
        for b in binds {
            query = match b {
                Bind::Text(s) => query.bind(s),
                Bind::Int(i) => query.bind(i),
            };
        }
        let rows = query
            .fetch_all(&self.inner.pool)
            .await
            .map_err(|e| self.error(what, e))?;
        rows.iter()
            .map(|r| sql::entry_of(r).map_err(|e| self.error(what, e)))
            .collect()
    }

    /// The entry with this id, if there is one.
    pub async fn get(&self, id: i64) -> Result<Option<AuditEntry>, AuditError> {
        let what = "reading an entry";
        let q = sql::select_one();
        let q = self.sql(&q);
        let row = sqlx::query(&q)
            .bind(id)
            .fetch_optional(&self.inner.pool)
            .await
            .map_err(|e| self.error(what, e))?;
        row.as_ref()
            .map(sql::entry_of)
            .transpose()
            .map_err(|e| self.error(what, e))
    }
}

/// `q` (an `INSERT` of the entry's columns) with `entry`'s values bound.
fn bind_entry<'q>(
    q: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
    entry: &'q AuditEntry,
) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>> {
    q.bind(entry.at)
        .bind(entry.actor.as_str())
        .bind(entry.role.map(|r| r.as_str()))
        .bind(entry.via.as_str())
        .bind(entry.action.map(|a| a.as_str()))
        .bind(entry.fleet.as_str())
        .bind(entry.target.as_str())
        .bind(entry.fence)
        .bind(entry.reason.as_str())
        .bind(entry.outcome.map(|o| o.as_str()))
        .bind(entry.detail.as_str())
}

/// Writes finished minutes' tallies, until the log is dropped.
async fn write_tallies(log: Weak<Inner>) {
    let mut every = tokio::time::interval(tally::FLUSH_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let Some(inner) = log.upgrade() else { return };
        AuditLog { inner }.flush_tally(false).await;
    }
}

#[cfg(test)]
mod tests;
