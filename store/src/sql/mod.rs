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

mod listen;
mod observer;
mod schema;
mod sessions;
mod shedlock;

pub use observer::SqlObserver;
pub(crate) use shedlock::validate_table;
pub use shedlock::ShedLockObserver;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lockscope_model::record::{BlacklistRecord, SessionRecord};
use lockscope_model::{FleetEvent, LockEntry, LockRecord};
use sqlx::any::{AnyPoolOptions, AnyQueryResult, AnyRow};
use sqlx::AnyPool;
use sqlx::Row;
use tokio::sync::broadcast;

pub use schema::SCHEMA_VERSION;

use listen::{listen, Change};

type Query<'q> = sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>;

use crate::protocol::{Attempt, Extend, LockStore, SessionLease, WaitFrom};
use crate::{validate_name, StoreError};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    Sqlite,
    Postgres,
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        match e {
            e @ sqlx::Error::Io(_) => StoreError::unreachable("database", e),
            e @ sqlx::Error::PoolTimedOut => StoreError::unreachable("no database connection available", e),
            other => StoreError::backend("database", other),
        }
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
        sqlx::any::install_default_drivers();
        let dialect = if url.starts_with("sqlite:") {
            Dialect::Sqlite
        } else if url.starts_with("postgres:") || url.starts_with("postgresql:") {
            Dialect::Postgres
        } else {
            return Err(StoreError::Config(format!("not a sqlite: or postgres: URL: {url}")));
        };
        let opts = AnyPoolOptions::new()
            .max_connections(8)
            .acquire_timeout(Duration::from_secs(3));
        let opts = if dialect == Dialect::Sqlite {
            // WAL lets the dashboard read while workers write; writers queue on the
            // database lock (sqlx's default busy timeout is 5 s).
            opts.after_connect(|conn, _| {
                Box::pin(async move {
                    sqlx::query("PRAGMA journal_mode = WAL").execute(&mut *conn).await?;
                    sqlx::query("PRAGMA synchronous = NORMAL").execute(&mut *conn).await?;
                    Ok(())
                })
            })
        } else {
            opts
        };
        let pool = opts.connect(url).await.map_err(|e| match StoreError::from(e) {
            StoreError::Backend { source, .. } => StoreError::Backend {
                what: format!("opening {}", crate::spec::redact(url)),
                source,
            },
            StoreError::Unreachable { source, .. } => StoreError::Unreachable {
                what: crate::spec::redact(url),
                source,
            },
            other => other,
        })?;
        schema::migrator(dialect)
            .run(&pool)
            .await
            .map_err(|e| schema_error(e, url))?;
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

    async fn exec<'q>(&self, q: Query<'q>) -> Result<AnyQueryResult, StoreError> {
        Ok(q.execute(&self.pool).await?)
    }

    async fn one<'q>(&self, q: Query<'q>) -> Result<Option<AnyRow>, StoreError> {
        Ok(q.fetch_optional(&self.pool).await?)
    }

    async fn blacklisted(&self, session: &str) -> Result<bool, StoreError> {
        let q = self.sql("SELECT 1 FROM lockscope_blacklist WHERE session = $1");
        Ok(self.one(sqlx::query(&q).bind(session)).await?.is_some())
    }

    /// All held locks, in name order (the observer's snapshot).
    pub async fn held(&self) -> Result<Vec<LockEntry>, StoreError> {
        let q =
            self.sql("SELECT name, fence, revision, record FROM lockscope_locks WHERE owner IS NOT NULL ORDER BY name");
        let rows = sqlx::query(&q).fetch_all(&self.pool).await?;
        rows.iter().map(entry_of).collect()
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

impl LockStore for SqlLocks {
    async fn open_session(&self, session: &SessionRecord, ttl: Duration) -> Result<SessionLease, StoreError> {
        let q = self.sql(
            "INSERT INTO lockscope_sessions (session, record, waiting_for, expires_at) \
             SELECT $1, $2, NULL, $3 WHERE NOT EXISTS (SELECT 1 FROM lockscope_blacklist WHERE session = $1) \
             ON CONFLICT (session) DO UPDATE SET record = excluded.record, expires_at = excluded.expires_at",
        );
        // On the holder's clock, from the record's own heartbeat_at, so that an
        // observer reads the ttl back exactly (expires_at - heartbeat_at).
        let expires = session.heartbeat_at + ttl.as_millis() as i64;
        let r = self
            .exec(
                sqlx::query(&q)
                    .bind(&session.session)
                    .bind(json_of(session))
                    .bind(expires),
            )
            .await?;
        if r.rows_affected() == 0 {
            return Err(StoreError::Blacklisted {
                session: session.session.clone(),
            });
        }
        Ok(SessionLease(ttl.as_millis() as i64))
    }

    async fn session_heartbeat(&self, lease: SessionLease, session: &SessionRecord) -> Result<(), StoreError> {
        let q = self.sql(
            "UPDATE lockscope_sessions SET record = $1, expires_at = $2 WHERE session = $3 \
             AND NOT EXISTS (SELECT 1 FROM lockscope_blacklist WHERE session = $3)",
        );
        let expires = session.heartbeat_at + lease.0;
        let r = self
            .exec(
                sqlx::query(&q)
                    .bind(json_of(session))
                    .bind(expires)
                    .bind(&session.session),
            )
            .await?;
        if r.rows_affected() == 1 {
            Ok(())
        } else if self.blacklisted(&session.session).await? {
            Err(StoreError::Blacklisted {
                session: session.session.clone(),
            })
        } else {
            Err(StoreError::SessionExpired {
                session: session.session.clone(),
            })
        }
    }

    async fn close_session(&self, _lease: SessionLease, session: &str) -> Result<(), StoreError> {
        let q = self.sql("DELETE FROM lockscope_sessions WHERE session = $1");
        self.exec(sqlx::query(&q).bind(session)).await?;
        Ok(())
    }

    async fn try_acquire(&self, name: &str, record: &LockRecord) -> Result<Attempt, StoreError> {
        validate_name(name)?;
        let q = self.sql(
            "INSERT INTO lockscope_locks (name, fence, owner, session, record, revision) \
             SELECT $1, 1, $2, $3, $4, 1 WHERE NOT EXISTS (SELECT 1 FROM lockscope_blacklist WHERE session = $3) \
             ON CONFLICT (name) DO UPDATE SET fence = lockscope_locks.fence + 1, owner = excluded.owner, \
             session = excluded.session, record = excluded.record, revision = lockscope_locks.revision + 1 \
             WHERE lockscope_locks.owner IS NULL \
             RETURNING fence",
        );
        let json = String::from_utf8(record.to_json()).expect("JSON is UTF-8");
        let row = self
            .one(
                sqlx::query(&q)
                    .bind(name)
                    .bind(&record.owner)
                    .bind(&*record.session)
                    .bind(json),
            )
            .await?;
        if let Some(row) = row {
            return Ok(Attempt::Acquired {
                fence: row.try_get::<i64, _>(0)?,
            });
        }
        if self.blacklisted(&record.session).await? {
            return Err(StoreError::Blacklisted {
                session: record.session.to_string(),
            });
        }
        let holder = self.get(name).await?;
        Ok(Attempt::Busy {
            from: WaitFrom(holder.as_ref().map_or(0, |h| h.revision)),
            holder,
        })
    }

    async fn extend(&self, name: &str, fence: i64, record: &LockRecord) -> Result<Extend, StoreError> {
        let q = self.sql(
            "UPDATE lockscope_locks SET record = $1, revision = revision + 1 \
             WHERE name = $2 AND fence = $3 AND owner IS NOT NULL \
             AND NOT EXISTS (SELECT 1 FROM lockscope_blacklist WHERE session = $4)",
        );
        let json = String::from_utf8(record.to_json()).expect("JSON is UTF-8");
        let r = self
            .exec(sqlx::query(&q).bind(json).bind(name).bind(fence).bind(&*record.session))
            .await?;
        Ok(if r.rows_affected() == 1 {
            Extend::Extended
        } else if self.blacklisted(&record.session).await? {
            Extend::Blacklisted
        } else {
            Extend::Lost
        })
    }

    async fn release(&self, name: &str, fence: i64) -> Result<bool, StoreError> {
        validate_name(name)?;
        let q = self.sql(
            "UPDATE lockscope_locks SET owner = NULL, session = NULL, record = NULL, revision = revision + 1 \
             WHERE name = $1 AND fence = $2 AND owner IS NOT NULL",
        );
        Ok(self.exec(sqlx::query(&q).bind(name).bind(fence)).await?.rows_affected() == 1)
    }

    async fn set_waiting(
        &self,
        _lease: SessionLease,
        session: &str,
        name: &str,
        waiting: bool,
    ) -> Result<(), StoreError> {
        let q = self.sql("UPDATE lockscope_sessions SET waiting_for = $1 WHERE session = $2");
        self.exec(sqlx::query(&q).bind(waiting.then(|| name.to_string())).bind(session))
            .await?;
        Ok(())
    }

    async fn wait_released(&self, name: &str, from: WaitFrom, max: Duration) -> Result<(), StoreError> {
        match &self.notified {
            Some(tx) => {
                // Subscribe first, then look: a release between the failed attempt
                // and now is seen by the look, a later one by the notification.
                let mut rx = tx.subscribe();
                if self.get(name).await?.is_none_or(|h| h.revision != from.0) {
                    return Ok(());
                }
                // Re-check at least every 10 s in case a notification was lost.
                let wait = async {
                    loop {
                        match rx.recv().await {
                            Ok(Change::Lock(n)) if n == name => return,
                            // Notifications may have been missed: look again.
                            Ok(Change::Lost) => return,
                            Ok(_) => {}
                            Err(broadcast::error::RecvError::Lagged(_)) => return,
                            Err(broadcast::error::RecvError::Closed) => return,
                        }
                    }
                };
                let _ = tokio::time::timeout(max.min(Duration::from_secs(10)), wait).await;
                Ok(())
            }
            None => {
                // No notifications: jittered backoff, 25–250 ms.
                let pause = Duration::from_millis(25 + fastrand::u64(0..225));
                tokio::time::sleep(pause.min(max)).await;
                Ok(())
            }
        }
    }

    async fn blacklist(&self, entry: &BlacklistRecord) -> Result<(), StoreError> {
        let q = self.sql(
            "INSERT INTO lockscope_blacklist (session, record) VALUES ($1, $2) \
             ON CONFLICT (session) DO UPDATE SET record = excluded.record",
        );
        self.exec(sqlx::query(&q).bind(&entry.session).bind(json_of(entry)))
            .await?;
        Ok(())
    }

    async fn lift_blacklist(&self, session: &str) -> Result<bool, StoreError> {
        let q = self.sql("DELETE FROM lockscope_blacklist WHERE session = $1");
        Ok(self.exec(sqlx::query(&q).bind(session)).await?.rows_affected() > 0)
    }

    async fn get(&self, name: &str) -> Result<Option<LockEntry>, StoreError> {
        let q =
            self.sql("SELECT name, fence, revision, record FROM lockscope_locks WHERE name = $1 AND owner IS NOT NULL");
        self.one(sqlx::query(&q).bind(name))
            .await?
            .as_ref()
            .map(entry_of)
            .transpose()
    }
}
