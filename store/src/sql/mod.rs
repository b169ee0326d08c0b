//! The lockscope protocol on SQL tables: SQLite (the embedded default) and
//! PostgreSQL, through sqlx's `Any` driver so that one code path serves both
//! wherever the dialects agree (`docs/protocol.md`, "SQL").
//!
//! A lock is a row of `lockscope_locks` that is never deleted: `owner IS NULL`
//! means free, and `fence` is bumped by the acquiring statement itself, so the
//! fencing token grows across acquisitions. Every write is one statement that
//! compares what it must (free / our fence / not blacklisted).
//!
//! Waiting: PostgreSQL notifies releases (`LISTEN lockscope_locks`, from a
//! trigger); SQLite has no notifications, so waiters back off with jitter.
//!
//! Here: the store ([`SqlLocks`]: connection, reads the observer uses). Beside
//! it: `locks` (the protocol's writes), `observer` and `sessions` (what the
//! dashboard reads), `commits` (SQLite: another connection's commit wakes the
//! observer), `listen` (PostgreSQL notifications), `schema` (migrations),
//! `shedlock` (the read-only ShedLock observer), `unlocker` (the unlocker
//! election, on the database's own clock: [`Dialect::now_ms`]), `busy` (a
//! SQLite file held by another writer: the admin side's short busy timeout,
//! and the write probe that tells the page writes are blocked).

mod busy;
mod commits;
mod listen;
mod locks;
mod observer;
mod probe;
pub(crate) mod schema;
pub(crate) mod sessions;
mod shedlock;
mod unlocker;

pub use busy::{sqlite_primary_code, WriteWatch, ADMIN_BUSY_TIMEOUT, WRITE_PROBE_EVERY};
pub use observer::SqlObserver;
pub(crate) use probe::SqlProbe;
pub(crate) use shedlock::validate_table;
pub use shedlock::ShedLockObserver;
pub use unlocker::SqlLeadership;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::TryStreamExt;
use lockscope_model::fleet::SnapshotSharing;
use lockscope_model::{FleetEvent, LockEntry};
use sqlx::any::{AnyPoolOptions, AnyQueryResult, AnyRow};
use sqlx::AnyPool;
use sqlx::Row;
use tokio::sync::broadcast;

pub use schema::SCHEMA_VERSION;

use listen::{listen, Change};

type Query<'q> = sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>;

use crate::StoreError;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    Sqlite,
    Postgres,
}

impl Dialect {
    /// The dialect of a `sqlite:…` or `postgres:…` URL.
    pub fn of_url(url: &str) -> Result<Dialect, StoreError> {
        if url.starts_with("sqlite:") {
            Ok(Dialect::Sqlite)
        } else if url.starts_with("postgres:") || url.starts_with("postgresql:") {
            Ok(Dialect::Postgres)
        } else {
            Err(StoreError::Config(format!(
                "not a sqlite: or postgres: URL: {}",
                crate::spec::redact(url)
            )))
        }
    }

    /// The database's own clock, in unix ms, as a SQL expression: the one clock
    /// the unlocker's lease is measured on (never a replica's: two replicas'
    /// clocks are never compared). Statements write it as `DB_NOW_MS`
    /// (`SqlLocks::sql_at_db_now`). PostgreSQL: `clock_timestamp()`, the time
    /// of the call, not of the transaction's start.
    pub fn now_ms(self) -> &'static str {
        match self {
            Dialect::Postgres => "(extract(epoch from clock_timestamp()) * 1000)::bigint",
            Dialect::Sqlite => "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)",
        }
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        match e {
            e if busy::is_busy(&e) => StoreError::Busy {
                what: "another connection holds the database's write lock".into(),
                source: Some(e.into()),
            },
            e @ sqlx::Error::Io(_) => StoreError::unreachable("database", e),
            e @ sqlx::Error::PoolTimedOut => StoreError::unreachable("no database connection available", e),
            other => StoreError::backend("database", other),
        }
    }
}

/// How long opening a store waits for its first connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// SQLite, on every new connection: WAL lets the dashboard read while workers
/// write; writers queue on the database lock (sqlx's default busy timeout is
/// 5 s, or `busy`: the admin side's [`ADMIN_BUSY_TIMEOUT`]). The server's own
/// SQLite files (the audit log, the history) are opened the same way.
pub async fn prepare_sqlite(conn: &mut sqlx::AnyConnection, busy: Option<Duration>) -> Result<(), sqlx::Error> {
    if let Some(busy) = busy {
        // First: the statements below may themselves wait for the lock.
        let q = format!("PRAGMA busy_timeout = {}", busy.as_millis());
        sqlx::query(&q).execute(&mut *conn).await?;
    }
    sqlx::query("PRAGMA journal_mode = WAL").execute(&mut *conn).await?;
    sqlx::query("PRAGMA synchronous = NORMAL").execute(&mut *conn).await?;
    Ok(())
}

/// Why the pool made no connection in time. sqlx's pool retries a refused
/// connection and a failed preparation until its timeout and then says only
/// that it timed out; one connection made here (prepared by [`prepare_sqlite`]
/// if `prepare`) says why ("connection refused", "file is not a database").
/// `PoolTimedOut` again if it succeeds or hangs.
pub(super) async fn why_not(url: &str, prepare: bool) -> sqlx::Error {
    use sqlx::Connection;
    let attempt = async {
        let mut conn = sqlx::AnyConnection::connect(url).await?;
        if prepare {
            prepare_sqlite(&mut conn, None).await?;
        }
        let _ = conn.close().await;
        Ok::<(), sqlx::Error>(())
    };
    match tokio::time::timeout(CONNECT_TIMEOUT, attempt).await {
        Ok(Err(e)) => e,
        Ok(Ok(())) | Err(_) => sqlx::Error::PoolTimedOut,
    }
}

/// A SQL lock store (cheap to clone: a connection pool and shared counters).
#[derive(Clone)]
pub struct SqlLocks {
    pool: AnyPool,
    dialect: Dialect,
    /// Statements sent, for tests that check waiting is not polling.
    statements: Arc<AtomicU64>,
    /// PostgreSQL only: what the triggers notify.
    notified: Option<broadcast::Sender<Change>>,
}

impl SqlLocks {
    /// Connects to `sqlite://path` or `postgres://…`, applying migrations.
    pub async fn connect(url: &str) -> Result<SqlLocks, StoreError> {
        Self::connect_with(url, None).await
    }

    /// [`Self::connect`] for the dashboard's admin side (force-release,
    /// blacklist, the unlocker): on SQLite a write waits at most
    /// [`ADMIN_BUSY_TIMEOUT`] for another connection's write lock, then fails
    /// with [`StoreError::Busy`] having written nothing.
    pub async fn connect_admin(url: &str) -> Result<SqlLocks, StoreError> {
        Self::connect_with(url, Some(ADMIN_BUSY_TIMEOUT)).await
    }

    async fn connect_with(url: &str, busy: Option<Duration>) -> Result<SqlLocks, StoreError> {
        sqlx::any::install_default_drivers();
        let dialect = Dialect::of_url(url)?;
        let opts = AnyPoolOptions::new()
            .max_connections(8)
            .acquire_timeout(CONNECT_TIMEOUT);
        let opts = if dialect == Dialect::Sqlite {
            opts.after_connect(move |conn, _| Box::pin(prepare_sqlite(conn, busy)))
        } else {
            opts
        };
        let opening = || format!("opening {}", crate::spec::redact(url));
        let pool = match opts.connect(url).await {
            Ok(pool) => pool,
            Err(sqlx::Error::PoolTimedOut) => {
                return Err(StoreError::from(why_not(url, dialect == Dialect::Sqlite).await).of(opening()))
            }
            Err(e) => return Err(StoreError::from(e).of(opening())),
        };
        // Two processes opening a fresh SQLite file at once (a dashboard and a
        // worker) both create the schema; sqlx locks only PostgreSQL, so the
        // loser's migration fails and is rolled back, and a second run finds
        // the schema there.
        let mut tries = 0;
        while let Err(e) = schema::migrator(dialect).run(&pool).await {
            // A file another process holds is busy, not racing us: the
            // admin side says so at once rather than waiting again.
            let held = busy.is_some() && matches!(&e, sqlx::migrate::MigrateError::Execute(e) if busy::is_busy(e));
            let retry = dialect == Dialect::Sqlite
                && tries < 3
                && !held
                && !matches!(e, sqlx::migrate::MigrateError::VersionMissing(_));
            if !retry {
                return Err(schema_error(e, url));
            }
            tries += 1;
            tokio::time::sleep(std::time::Duration::from_millis(50 * tries)).await;
        }
        let notified = match dialect {
            Dialect::Postgres => Some(listen(url).await?),
            Dialect::Sqlite => None,
        };
        Ok(SqlLocks {
            pool,
            dialect,
            statements: Arc::new(AtomicU64::new(0)),
            notified,
        })
    }

    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// Statements this store (and its clones) has sent.
    pub fn statements(&self) -> u64 {
        self.statements.load(Ordering::Relaxed)
    }

    /// The statement in this dialect: SQL is written with `$1`-style parameters,
    /// which SQLite spells `?1`.
    fn sql(&self, q: &'static str) -> std::borrow::Cow<'static, str> {
        self.statements.fetch_add(1, Ordering::Relaxed);
        match self.dialect {
            Dialect::Postgres => q.into(),
            Dialect::Sqlite => q.replace('$', "?").into(),
        }
    }

    /// [`Self::sql`] for a statement built at run time.
    fn sql_owned(&self, q: String) -> String {
        self.statements.fetch_add(1, Ordering::Relaxed);
        match self.dialect {
            Dialect::Postgres => q,
            Dialect::Sqlite => q.replace('$', "?"),
        }
    }

    /// [`Self::sql`] for a statement that reads the database's clock, written
    /// `DB_NOW_MS` ([`Dialect::now_ms`]).
    fn sql_at_db_now(&self, q: &str) -> String {
        self.sql_owned(q.replace("DB_NOW_MS", self.dialect.now_ms()))
    }

    async fn exec<'q>(&self, q: Query<'q>) -> Result<AnyQueryResult, StoreError> {
        Ok(q.execute(&self.pool).await?)
    }

    async fn one<'q>(&self, q: Query<'q>) -> Result<Option<AnyRow>, StoreError> {
        Ok(q.fetch_optional(&self.pool).await?)
    }

    async fn blacklisted(&self, session: &str) -> Result<bool, StoreError> {
        let q = self.sql(locks::IS_BLACKLISTED);
        Ok(self.one(sqlx::query(&q).bind(session)).await?.is_some())
    }

    /// All held locks, in name order (the observer's snapshot).
    pub async fn held(&self) -> Result<Vec<LockEntry>, StoreError> {
        let q =
            self.sql("SELECT name, fence, revision, record FROM lockscope_locks WHERE owner IS NOT NULL ORDER BY name");
        // Each row is parsed as it arrives: a million rows' records never pile
        // up beside the entries made of them.
        let mut rows = sqlx::query(&q).fetch(&self.pool);
        let mut sharing = SnapshotSharing::default();
        let mut locks = Vec::new();
        while let Some(row) = rows.try_next().await? {
            locks.push(sharing.share(entry_of(&row)?));
        }
        Ok(locks)
    }

    /// Writes raw text as lock `name`'s record, held, bypassing the protocol: for
    /// tests and demos of how malformed records are shown.
    pub async fn put_raw(&self, name: &str, value: &[u8]) -> Result<(), StoreError> {
        let q = self.sql(
            "INSERT INTO lockscope_locks (name, fence, owner, session, record, revision) \
             VALUES ($1, 1, 'raw', NULL, $2, 1) \
             ON CONFLICT (name) DO UPDATE SET fence = lockscope_locks.fence + 1, owner = 'raw', \
             session = NULL, record = excluded.record, revision = lockscope_locks.revision + 1",
        );
        let text = String::from_utf8_lossy(value).into_owned();
        self.exec(sqlx::query(&q).bind(name).bind(text)).await?;
        Ok(())
    }

    /// Every registered session, in id order.
    pub(crate) async fn session_rows(&self) -> Result<Vec<SessionRow>, StoreError> {
        let q = self.sql("SELECT session, record, waiting_for, expires_at FROM lockscope_sessions ORDER BY session");
        let rows = sqlx::query(&q).fetch_all(&self.pool).await?;
        rows.iter()
            .map(|r| {
                Ok(SessionRow {
                    id: r.try_get(0)?,
                    record: r.try_get(1)?,
                    waiting_for: r.try_get(2)?,
                    expires_at: r.try_get(3)?,
                })
            })
            .collect()
    }

    /// Every blacklist entry, in session order.
    pub(crate) async fn blacklist_rows(&self) -> Result<Vec<(String, String)>, StoreError> {
        let q = self.sql("SELECT session, record FROM lockscope_blacklist ORDER BY session");
        let rows = sqlx::query(&q).fetch_all(&self.pool).await?;
        rows.iter().map(|r| Ok((r.try_get(0)?, r.try_get(1)?))).collect()
    }

    /// SQLite: the change counters the triggers keep (schema v3, v4).
    pub(crate) async fn changes(&self) -> Result<Changes, StoreError> {
        let q = self.sql("SELECT counter, removals, sessions FROM lockscope_changes WHERE id = 1");
        let row = self
            .one(sqlx::query(&q))
            .await?
            .ok_or_else(|| StoreError::backend_msg("the lockscope_changes row is missing"))?;
        Ok(Changes {
            counter: row.try_get(0)?,
            removals: row.try_get(1)?,
            sessions: row.try_get(2)?,
        })
    }

    /// SQLite: lock rows written after change `seq`, in change order, at most
    /// `limit` of them, each as the event it stands for, with its change number.
    pub(crate) async fn changed_since(&self, seq: i64, limit: i64) -> Result<Vec<(i64, FleetEvent)>, StoreError> {
        let q = self.sql(
            "SELECT name, fence, revision, record, owner, seq FROM lockscope_locks \
             WHERE seq > $1 ORDER BY seq LIMIT $2",
        );
        let rows = sqlx::query(&q).bind(seq).bind(limit).fetch_all(&self.pool).await?;
        rows.iter()
            .map(|r| Ok((r.try_get::<i64, _>(5)?, event_of(r)?)))
            .collect()
    }

    /// The current rows of these locks, each as the event it stands for; `None`
    /// if a row is gone (deleted by hand: the caller re-reads the table).
    pub(crate) async fn rows_named(&self, names: &[String]) -> Result<Option<Vec<FleetEvent>>, StoreError> {
        let mut events = Vec::with_capacity(names.len());
        // Chunks keep the statement under every driver's parameter limit.
        for chunk in names.chunks(500) {
            let params: Vec<String> = (1..=chunk.len()).map(|i| format!("${i}")).collect();
            let q = format!(
                "SELECT name, fence, revision, record, owner FROM lockscope_locks WHERE name IN ({})",
                params.join(", ")
            );
            let q = self.sql_owned(q);
            let mut query = sqlx::query(&q);
            for n in chunk {
                query = query.bind(n);
            }
            let rows = query.fetch_all(&self.pool).await?;
            if rows.len() != chunk.len() {
                return Ok(None);
            }
            for r in &rows {
                events.push(event_of(r)?);
            }
        }
        Ok(Some(events))
    }
}

/// The change counters of a SQLite lock store (schema v3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Changes {
    /// Bumped by every change; lock rows carry the value of their last change as `seq`.
    pub counter: i64,
    /// Bumped by every deleted lock row.
    pub removals: i64,
    /// Bumped by every write to a session or blacklist row.
    pub sessions: i64,
}

/// A row of `lockscope_sessions` as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SessionRow {
    pub id: String,
    pub record: String,
    pub waiting_for: Option<String>,
    /// The holder's clock: `heartbeat_at` plus the session's ttl.
    pub expires_at: i64,
}

fn schema_error(e: sqlx::migrate::MigrateError, url: &str) -> StoreError {
    use sqlx::migrate::MigrateError;
    let where_ = url.split('?').next().unwrap_or(url);
    match e {
        MigrateError::Execute(e) if busy::is_busy(&e) => StoreError::from(e).of(format!(
            "migrating the lockscope schema in {where_}: another connection holds the database's write lock"
        )),
        MigrateError::VersionMissing(v) => StoreError::Config(format!(
            "the lockscope schema in {where_} is at version {v}, newer than this lockscope understands \
             (version {SCHEMA_VERSION}); upgrade lockscope, or point it at another database"
        )),
        other => StoreError::backend(format!("migrating the lockscope schema in {where_}"), other),
    }
}

fn entry_of(row: &AnyRow) -> Result<LockEntry, StoreError> {
    let name: String = row.try_get(0)?;
    let fence: i64 = row.try_get(1)?;
    let revision: i64 = row.try_get(2)?;
    let record: Option<String> = row.try_get(3)?;
    Ok(LockEntry::from_stored(
        name,
        fence,
        revision,
        record.unwrap_or_default().as_bytes(),
    ))
}

/// A lock row (`name, fence, revision, record, owner`) as the event it stands for:
/// a free row (`owner IS NULL`) is the release of the lock, at the row's revision.
fn event_of(row: &AnyRow) -> Result<FleetEvent, StoreError> {
    let owner: Option<String> = row.try_get(4)?;
    if owner.is_some() {
        return Ok(FleetEvent::Upsert(entry_of(row)?));
    }
    Ok(FleetEvent::Remove {
        name: row.try_get(0)?,
        revision: row.try_get(2)?,
    })
}

fn json_of<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).expect("records serialise")
}
