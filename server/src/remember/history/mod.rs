//! The lock history: every event the hubs derive, kept in SQL (a SQLite file of
//! its own by default, PostgreSQL when replicas share it), queried and exported
//! for incident reviews, and replayed into the lock table at any instant.
//!
//! Writing never blocks a hub: each hub's [`Recorder`] puts events on one
//! bounded queue without waiting, and a writer task inserts them in batches
//! (`INSERT … ON CONFLICT (id) DO NOTHING`: ids come from what the store said,
//! so replicas and restarts never duplicate). A full queue drops the events and
//! counts them ([`HistoryStats::dropped`], shown on the page and in
//! `/metrics`): the history says it has a gap rather than slowing the live view.
//!
//! Readers never starve the writer: the writer has a connection of its own
//! (a pool of one no reader uses); pages, charts and time travel read on
//! [`READ_CONNECTIONS`]; exports on a small pool of their own, a page at a
//! time, admitted under per-identity and total caps (`admit`).
//!
//! Time travel: the writer stores a checkpoint of each fleet's table every
//! [`CHECKPOINT_EVERY`] events (or the table's size, if larger, so checkpoints
//! cost O(1) per event); the table at T is the checkpoint before T plus the
//! events after it up to T ([`History::table_at`]). A checkpoint is stored in
//! parts of at most [`PART_BYTES`], so taking one holds a part, not the fleet.
//!
//! Layout: here, [`History`] (open, query, time travel); `retention`; `writer`
//! (the queue, batches, when to checkpoint); `write` (the writer's
//! connection: a batch's transaction, SQLite's cache for it); `checkpoint` (writing and reading
//! them, in parts); `resync` (a first snapshot's ends, a
//! restart's gap); `cursor` (how far each fleet's history goes); `sql`
//! (tables, statements, rows);
//! `export` (CSV and NDJSON, streamed); `admit` (the exports' limits);
//! `charts` (what the charts count); `health` (the writer's numbers, whether
//! it is recording, and the gaps it records when it could not).

mod admit;
mod charts;
mod checkpoint;
mod cursor;
mod export;
pub mod health;
mod resync;
mod retention;
mod sql;
mod write;
mod writer;

pub use crate::settings::ExportLimits;
pub use admit::{ExportPermit, Refused, RETRY_AFTER};
pub use checkpoint::PART_BYTES;
pub use cursor::{Cursor, Unseen};
pub use export::{event_bytes, stream_export, Format, EXPORT_PAGE_BYTES, EXPORT_PAGE_ROWS};
pub use health::HistoryStats;
pub use retention::Retention;
pub use write::WRITER_CACHE_BYTES;
pub use writer::{Recorder, BACKLOG_AHEAD};

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt, TryFutureExt};
use lockscope_model::history::{HistoryEvent, HistoryQuery, Replay, TableAt, DEFAULT_HISTORY_ROWS};
use lockscope_model::time::Millis;
use lockscope_store::sql::Dialect;
use sqlx::any::AnyPoolOptions;
use sqlx::{AnyPool, Row};

/// How far before its checkpoint a table's replay starts (clock differences
/// between replicas up to this much cannot hide an end).
pub const REPLAY_OVERLAP_MS: Millis = 60_000;

/// Events between two checkpoints of a fleet (at least).
pub const CHECKPOINT_EVERY: u64 = 10_000;

/// Events written per transaction at most (the writer's batches, and what
/// counts as a catch-up for the writer's page cache).
const MAX_WRITE: usize = 5_000;

/// The most a query's events ([`History::query`]: the JSON answer, the
/// review page's list and timeline) may take, counted as
/// [`export::event_bytes`]; past it the query fails with
/// [`HistoryError::TooLarge`] (exports stream pages instead).
pub const MAX_ANSWER_BYTES: usize = 16 << 20;

/// Connections of the pool that pages, charts, time travel, checkpoints and
/// the retention read on (the writer and the exports have their own).
pub const READ_CONNECTIONS: u32 = 4;

/// What went wrong with the history. Database errors keep sqlx's error as the
/// source; no message shows the database password.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error("history: {0}")]
    Config(String),
    #[error("history: {what}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("history in {db}: {what} failed")]
    Database {
        db: String,
        what: &'static str,
        #[source]
        source: sqlx::Error,
    },
    #[error("history in {db}: migrating the tables failed")]
    Migrate {
        db: String,
        #[source]
        source: sqlx::migrate::MigrateError,
    },
    /// Asked for an instant before the oldest one kept.
    #[error("history: {0}")]
    OutOfRange(String),
    /// An export ended before its end (its client took nothing for too long).
    #[error("history export: {0}")]
    Export(String),
    /// A query's events past [`MAX_ANSWER_BYTES`]: `fit` of them fit.
    #[error(
        "the answer would be larger than {} MiB (lock records can be 256 KiB each): the first {fit} events fit; \
         ask limit={fit} or less, narrow the range, or export with format=ndjson or csv, which streams any size",
        MAX_ANSWER_BYTES >> 20
    )]
    TooLarge { fit: usize },
}

/// The history (cheap to clone).
#[derive(Clone)]
pub struct History {
    inner: Arc<Inner>,
}

struct Inner {
    /// Pages, charts, time travel, checkpoints, the retention.
    pool: AnyPool,
    /// The writer's batches only: one connection no reader can take.
    write: AnyPool,
    /// Exports' pages ([`ExportLimits::connections`]).
    export: AnyPool,
    exports: Arc<admit::Exports>,
    dialect: Dialect,
    shown: String,
    stats: Arc<HistoryStats>,
    queue: tokio::sync::mpsc::Sender<writer::Item>,
    /// SQLite's `max_page_count` for the writer ([`History::cap_pages`]; 0: never set).
    cap: std::sync::atomic::AtomicU32,
}

impl std::fmt::Debug for History {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("History").field("db", &self.inner.shown).finish()
    }
}

impl History {
    /// Opens (creating and migrating) the history in `sqlite:PATH` or
    /// `postgres://…`, and starts its writer and, if given, its retention (a
    /// server applies one; a tool that only reads, such as an export, does not,
    /// though opening still creates and migrates the tables: it needs a role
    /// that may).
    pub async fn open(url: &str, retention: Option<Retention>) -> Result<History, HistoryError> {
        History::open_with(url, retention, ExportLimits::default()).await
    }

    /// [`History::open`] with the exports' limits.
    pub async fn open_with(
        url: &str,
        retention: Option<Retention>,
        limits: ExportLimits,
    ) -> Result<History, HistoryError> {
        let target = crate::remember::audit::sql::target(url).map_err(HistoryError::Config)?;
        target
            .create_dir()
            .map_err(|(what, source)| HistoryError::Io { what, source })?;
        sqlx::any::install_default_drivers();
        let db = target.shown.clone();
        if target.dialect == Dialect::Postgres {
            // The schema must exist before a connection can point at it. Two
            // replicas starting at once on a new database both create it: one
            // failed on the catalog's unique index until they took turns.
            use sqlx::Connection;
            let mut conn = sqlx::AnyConnection::connect(&target.url)
                .await
                .map_err(|source| db_error(&db, "opening the database", source))?;
            let create = async {
                let mut tx = conn.begin().await?;
                sqlx::query(crate::remember::audit::sql::PG_SCHEMA_LOCK)
                    .execute(&mut *tx)
                    .await?;
                sqlx::query(&format!("CREATE SCHEMA IF NOT EXISTS {}", sql::PG_SCHEMA))
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await
            };
            create
                .await
                .map_err(|source| db_error(&db, "creating its schema", source))?;
        }
        // Time travel replays a fleet's events in one long statement: sqlx's
        // statement log (and its slow-statement warning) is off.
        let connect: sqlx::any::AnyConnectOptions = target
            .url
            .parse()
            .map_err(|source| db_error(&db, "reading its URL", source))?;
        let connect = sqlx::ConnectOptions::disable_statement_logging(connect);
        let open = |options: AnyPoolOptions| {
            options
                .connect_with(connect.clone())
                .map_err(|source| db_error(&db, "opening the database", source))
        };
        let pool = open(pool_options(target.dialect, READ_CONNECTIONS)).await?;
        let write = open(write::options(target.dialect)).await?;
        let export = open(pool_options(target.dialect, limits.connections.max(1))).await?;
        sql::migrator(target.dialect)
            .run(&pool)
            .await
            .map_err(|source| HistoryError::Migrate { db: db.clone(), source })?;
        let stats = Arc::new(HistoryStats {
            limits,
            ..HistoryStats::default()
        });
        let (queue, rx) = tokio::sync::mpsc::channel(writer::QUEUE_BATCHES);
        let history = History {
            inner: Arc::new(Inner {
                pool,
                write,
                export,
                exports: Arc::new(admit::Exports::new(stats.clone())),
                dialect: target.dialect,
                shown: db,
                stats,
                queue,
                cap: Default::default(),
            }),
        };
        tokio::spawn(writer::run(history.clone(), rx));
        if let Some(retention) = retention {
            tokio::spawn(retention::keep(history.clone(), retention));
        }
        Ok(history)
    }

    /// A recorder for `fleet`'s hub.
    pub fn recorder(&self, fleet: &str) -> Recorder {
        Recorder::new(fleet, self.clone())
    }

    pub fn stats(&self) -> &Arc<HistoryStats> {
        &self.inner.stats
    }

    /// The database, without credentials.
    pub fn shown(&self) -> &str {
        &self.inner.shown
    }

    fn error(&self, what: &'static str, source: sqlx::Error) -> HistoryError {
        db_error(&self.inner.shown, what, source)
    }

    fn sql<'q>(&self, q: &'q str) -> std::borrow::Cow<'q, str> {
        crate::remember::audit::sql::sql(self.inner.dialect, q)
    }

    /// Waits until every event queued before this call is written (or
    /// dropped), for at most `within`: whether it was. A count that follows
    /// sees all this server had seen when it started.
    pub async fn flush(&self, within: Duration) -> bool {
        let (done, written) = tokio::sync::oneshot::channel();
        let wait = async { self.inner.queue.send(writer::Item::Flush(done)).await.is_ok() && written.await.is_ok() };
        tokio::time::timeout(within, wait).await.unwrap_or(false)
    }

    /// The events matching `q`, oldest first, at most its limit; an error
    /// ([`HistoryError::TooLarge`], saying how many fit) rather than more than
    /// [`MAX_ANSWER_BYTES`] of them.
    pub async fn query(&self, q: &HistoryQuery) -> Result<Vec<HistoryEvent>, HistoryError> {
        self.query_within(q, MAX_ANSWER_BYTES).await
    }

    /// [`History::query`] with a byte budget of `budget`.
    pub async fn query_within(&self, q: &HistoryQuery, budget: usize) -> Result<Vec<HistoryEvent>, HistoryError> {
        let limit = q.limit.unwrap_or(DEFAULT_HISTORY_ROWS);
        let mut events = std::pin::pin!(self.events(q, Some(limit)));
        let (mut out, mut bytes) = (Vec::new(), 0);
        while let Some(ev) = events.next().await {
            let ev = ev?;
            bytes += export::event_bytes(&ev);
            if bytes > budget {
                return Err(HistoryError::TooLarge { fit: out.len() });
            }
            out.push(ev);
        }
        Ok(out)
    }

    /// The events matching `q`, oldest first, as the database streams them
    /// (memory stays flat however many there are). The statement holds a read
    /// connection until the stream ends: for readers that keep up (time
    /// travel); exports page instead (`export.rs`).
    pub fn events(
        &self,
        q: &HistoryQuery,
        limit: Option<u32>,
    ) -> impl Stream<Item = Result<HistoryEvent, HistoryError>> + Send + 'static {
        let (clause, binds) = sql::filter(q);
        let limit = limit.map(|n| format!(" LIMIT {n}")).unwrap_or_default();
        self.event_rows(&format!("WHERE {clause} ORDER BY at, seq{limit}"), binds)
    }

    /// The events of `SELECT … FROM history_events {rest}`, streamed as they
    /// are read; the first error ends the stream.
    fn event_rows(
        &self,
        rest: &str,
        binds: Vec<sql::Bind>,
    ) -> impl Stream<Item = Result<HistoryEvent, HistoryError>> + Send + 'static {
        let text = self
            .sql(&format!("SELECT {} FROM history_events {rest}", sql::COLUMNS))
            .into_owned();
        let this = self.clone();
        // The query borrows its text: the stream owns both (and the pool).
        async_stream(move |tx| async move {
            let mut rows = sql::bind(sqlx::query(&text), binds).fetch(&this.inner.pool);
            while let Some(row) = rows.next().await {
                let item = row
                    .and_then(|r| sql::event(&r))
                    .map_err(|e| this.error("reading events", e));
                let stop = item.is_err();
                if tx.send(item).await.is_err() || stop {
                    break;
                }
            }
        })
    }

    /// The lock table of `fleet` as it stood at `at`: the checkpoint before it,
    /// then every event after that up to `at`.
    pub async fn table_at(&self, fleet: &str, at: Millis) -> Result<TableAt, HistoryError> {
        self.check_floor(fleet, at).await?;
        let mut replay = Replay::default();
        let checkpoint = match self.stored_before(fleet, at).await? {
            Some(stored) => {
                let at = stored.at;
                self.load(fleet, stored, &mut replay).await?;
                Some(at)
            }
            None => None,
        };
        // From a little before the checkpoint: replicas' clocks differ, so an
        // acquisition and its end can sit on either side of it; replaying both
        // again is harmless (see `Replay`), missing one end is a ghost lock.
        let q = HistoryQuery {
            fleet: fleet.to_string(),
            from: checkpoint.map(|c| c - REPLAY_OVERLAP_MS),
            to: Some(at),
            ..HistoryQuery::default()
        };
        let mut replayed = 0;
        let mut events = std::pin::pin!(self.events(&q, None));
        while let Some(ev) = events.next().await {
            replay.apply(&ev?);
            replayed += 1;
        }
        // Moved out, not copied: a fleet's whole table, once (a checkpoint of a
        // million-lock fleet held it twice).
        Ok(TableAt {
            fleet: fleet.to_string(),
            at,
            locks: std::mem::take(&mut replay.locks).into_values().collect(),
            waiters: std::mem::take(&mut replay.waiters).into_iter().collect(),
            checkpoint,
            replayed,
            ..TableAt::default()
        })
    }

    /// An error if `at` is before the oldest history kept for `fleet`.
    async fn check_floor(&self, fleet: &str, at: Millis) -> Result<(), HistoryError> {
        match self.floor(fleet).await? {
            Some(floor) if at < floor => Err(HistoryError::OutOfRange(format!(
                "{} is before the oldest history kept for {fleet} ({})",
                lockscope_model::time::rfc3339(at),
                lockscope_model::time::rfc3339(floor)
            ))),
            _ => Ok(()),
        }
    }

    /// The oldest instant whose table can be rebuilt, once the retention has
    /// removed events (before that, history starts at its first event).
    async fn floor(&self, fleet: &str) -> Result<Option<Millis>, HistoryError> {
        let q = self.sql("SELECT at FROM history_floor WHERE fleet = $1");
        let row = sqlx::query(&q)
            .bind(fleet)
            .fetch_optional(&self.inner.pool)
            .await
            .map_err(|e| self.error("reading the retention floor", e))?;
        row.map(|r| r.try_get::<i64, _>("at"))
            .transpose()
            .map_err(|e| self.error("reading the retention floor", e))
    }

    /// Events written so far (for tests and the bench).
    pub fn written(&self) -> u64 {
        self.inner.stats.written.load(Ordering::Relaxed)
    }
}

/// A pool of `max` connections to the history (WAL for SQLite; PostgreSQL's
/// `search_path` on the history's schema).
fn pool_options(dialect: Dialect, max: u32) -> AnyPoolOptions {
    let opts = AnyPoolOptions::new()
        .max_connections(max)
        .acquire_timeout(Duration::from_secs(5));
    match dialect {
        Dialect::Sqlite => crate::remember::audit::sql::sqlite_wal(opts),
        Dialect::Postgres => opts.after_connect(|conn, _| {
            Box::pin(async move {
                sqlx::query(&format!("SET search_path TO {}", sql::PG_SCHEMA))
                    .execute(&mut *conn)
                    .await?;
                Ok(())
            })
        }),
    }
}

/// A stream fed by a task (a query's rows outlive no borrow this way).
fn async_stream<T, F, Fut>(f: F) -> impl Stream<Item = T> + Send + 'static
where
    T: Send + 'static,
    F: FnOnce(tokio::sync::mpsc::Sender<T>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    // A small channel: the producer runs at most this far ahead of the reader
    // (64 events: 16 MiB at most, each record being at most 256 KiB).
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(f(tx));
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|t| (t, rx)) })
}

fn db_error(db: &str, what: &'static str, source: sqlx::Error) -> HistoryError {
    HistoryError::Database {
        db: db.to_string(),
        what,
        source,
    }
}

#[cfg(test)]
pub(crate) mod tests;
