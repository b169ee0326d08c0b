//! The audit log of admin actions, and the browser's sign-in sessions, in SQL
//! (SQLite, the embedded default, or PostgreSQL), beside the lock store's tables.
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
//! Layout: here, [`AuditLog`] and its errors; `sql` (URLs, tables, rows);
//! `export` (CSV, NDJSON).

mod export;
mod sql;

pub use export::{to_csv, to_ndjson, FIELDS};

use std::sync::Arc;
use std::time::Duration;

use lockscope_model::admin::{AuditEntry, AuditQuery};
use lockscope_model::time::Millis;
use lockscope_store::sql::Dialect;
use sha2::{Digest, Sha256};
use sqlx::any::AnyPoolOptions;
use sqlx::{AnyPool, Row};

use sql::{sql, Bind};

/// What went wrong with the audit log or the sign-in sessions. Database errors
/// keep sqlx's error as the source; no message shows the database password.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// Not a database the log can open.
    #[error("audit log: {0}")]
    Config(String),
    /// The file system or the operating system refused.
    #[error("audit log: {what}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// No connection to the database.
    #[error("audit log in {db}: database unreachable while {what}")]
    Unreachable {
        db: String,
        what: &'static str,
        #[source]
        source: sqlx::Error,
    },
    /// The database refused or failed a statement.
    #[error("audit log in {db}: {what} failed")]
    Database {
        db: String,
        what: &'static str,
        #[source]
        source: sqlx::Error,
    },
}

/// A new sign-in session, to hand to the browser.
#[derive(Clone, PartialEq, Eq)]
pub struct NewSession {
    /// The secret (64 hex digits) that goes in the cookie; only its hash is stored.
    pub cookie: String,
    /// The CSRF token (64 hex digits) the session's forms send back.
    pub csrf: String,
    /// When the session ends (unix ms).
    pub expires_at: Millis,
}

/// A live sign-in session, found by its cookie.
#[derive(Clone, PartialEq, Eq)]
pub struct WebSession {
    pub actor: String,
    pub csrf: String,
    pub expires_at: Millis,
}

// Secrets stay out of logs.
impl std::fmt::Debug for NewSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewSession")
            .field("cookie", &"…")
            .field("csrf", &"…")
            .field("expires_at", &self.expires_at)
            .finish()
    }
}

impl std::fmt::Debug for WebSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebSession")
            .field("actor", &self.actor)
            .field("csrf", &"…")
            .field("expires_at", &self.expires_at)
            .finish()
    }
}

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
}

impl std::fmt::Debug for AuditLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditLog").field("db", &self.inner.shown).finish()
    }
}

impl AuditLog {
    /// Opens the log in `sqlite:PATH` (the file, and its directory, are created
    /// if missing) or `postgres://…`, creating its tables if absent.
    pub async fn open(url: &str) -> Result<AuditLog, AuditError> {
        let target = sql::target(url).map_err(AuditError::Config)?;
        if let Some(dir) = target.file.as_deref().and_then(std::path::Path::parent) {
            if !dir.as_os_str().is_empty() {
                std::fs::create_dir_all(dir).map_err(|source| AuditError::Io {
                    what: format!("creating {}", dir.display()),
                    source,
                })?;
            }
        }
        sqlx::any::install_default_drivers();
        let opts = AnyPoolOptions::new()
            .max_connections(4)
            .acquire_timeout(Duration::from_secs(3));
        // As the lock store opens the same file: WAL so readers do not wait for
        // writers; writers queue on the database lock (sqlx's busy timeout, 5 s).
        let opts = match target.dialect {
            Dialect::Sqlite => opts.after_connect(|conn, _| {
                Box::pin(async move {
                    sqlx::query("PRAGMA journal_mode = WAL").execute(&mut *conn).await?;
                    sqlx::query("PRAGMA synchronous = NORMAL").execute(&mut *conn).await?;
                    Ok(())
                })
            }),
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
            }),
        };
        log.create_tables().await?;
        Ok(log)
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
        let q = self.sql(sql::INSERT);
        let row = sqlx::query(&q)
            .bind(entry.at)
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

    /// Signs `actor` in for `ttl` from `now_ms`: a new random cookie secret and
    /// CSRF token (32 bytes each from the operating system, hex). Removes the
    /// sessions that have expired by `now_ms` first.
    pub async fn create_session(&self, actor: &str, ttl: Duration, now_ms: Millis) -> Result<NewSession, AuditError> {
        let cookie = random_hex()?;
        let csrf = random_hex()?;
        let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
        let expires_at = now_ms.saturating_add(ttl_ms);
        let q = self.sql("DELETE FROM lockscope_web_sessions WHERE expires_at <= $1");
        sqlx::query(&q)
            .bind(now_ms)
            .execute(&self.inner.pool)
            .await
            .map_err(|e| self.error("removing expired sessions", e))?;
        let q = self.sql(
            "INSERT INTO lockscope_web_sessions (secret_sha256, actor, csrf, created_at, expires_at) \
             VALUES ($1, $2, $3, $4, $5)",
        );
        sqlx::query(&q)
            .bind(digest(&cookie))
            .bind(actor)
            .bind(csrf.as_str())
            .bind(now_ms)
            .bind(expires_at)
            .execute(&self.inner.pool)
            .await
            .map_err(|e| self.error("creating a session", e))?;
        Ok(NewSession {
            cookie,
            csrf,
            expires_at,
        })
    }

    /// The session whose cookie secret is `cookie`, unless it has expired by
    /// `now_ms` (or never existed, or was deleted).
    pub async fn session(&self, cookie: &str, now_ms: Millis) -> Result<Option<WebSession>, AuditError> {
        let what = "reading a session";
        // The lookup is by the secret's hash: its timing tells nothing about the secret.
        let q = self.sql(
            "SELECT actor, csrf, expires_at FROM lockscope_web_sessions \
             WHERE secret_sha256 = $1 AND expires_at > $2",
        );
        let row = sqlx::query(&q)
            .bind(digest(cookie))
            .bind(now_ms)
            .fetch_optional(&self.inner.pool)
            .await
            .map_err(|e| self.error(what, e))?;
        let Some(row) = row else { return Ok(None) };
        let session = (|| {
            Ok::<_, sqlx::Error>(WebSession {
                actor: row.try_get(0)?,
                csrf: row.try_get(1)?,
                expires_at: row.try_get(2)?,
            })
        })();
        session.map(Some).map_err(|e| self.error(what, e))
    }

    /// Ends the session whose cookie secret is `cookie` (signing out); whether
    /// there was one.
    pub async fn delete_session(&self, cookie: &str) -> Result<bool, AuditError> {
        let q = self.sql("DELETE FROM lockscope_web_sessions WHERE secret_sha256 = $1");
        let done = sqlx::query(&q)
            .bind(digest(cookie))
            .execute(&self.inner.pool)
            .await
            .map_err(|e| self.error("deleting a session", e))?;
        Ok(done.rows_affected() > 0)
    }
}

/// `source`, from `what` on database `db` (shown without credentials).
fn db_error(db: &str, what: &'static str, source: sqlx::Error) -> AuditError {
    let db = db.to_string();
    match source {
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed => {
            AuditError::Unreachable { db, what, source }
        }
        source => AuditError::Database { db, what, source },
    }
}

/// 32 random bytes from the operating system, as 64 hex digits.
fn random_hex() -> Result<String, AuditError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| AuditError::Io {
        what: "reading the operating system's random number generator".into(),
        source: match e.raw_os_error() {
            Some(code) => std::io::Error::from_raw_os_error(code),
            None => std::io::Error::other(e.to_string()),
        },
    })?;
    Ok(hex::encode(bytes))
}

/// What the database keeps of a cookie secret: its SHA-256, hex.
fn digest(cookie: &str) -> String {
    hex::encode(Sha256::digest(cookie.as_bytes()))
}

#[cfg(test)]
mod tests {
    use lockscope_model::admin::{Action, Outcome, Role};
    use lockscope_store::testing::PgServer;

    use super::*;

    fn entry(at: Millis, actor: &str, action: Action, fleet: &str, outcome: Outcome) -> AuditEntry {
        AuditEntry {
            id: 0,
            at,
            actor: actor.into(),
            role: Some(Role::Operator),
            via: "api".into(),
            action: Some(action),
            fleet: fleet.into(),
            target: format!("{fleet}/lock-{at}"),
            fence: Some(at / 10),
            reason: format!("reason {at}"),
            outcome: Some(outcome),
            detail: String::new(),
        }
    }

    /// A log in a fresh SQLite file, in a directory that does not exist yet.
    async fn sqlite() -> (tempfile::TempDir, String, AuditLog) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".lockscope").join("lockscope.db");
        let url = format!("sqlite:{}", path.display());
        let log = AuditLog::open(&url).await.unwrap();
        (dir, url, log)
    }

    fn ids(entries: &[AuditEntry]) -> Vec<i64> {
        entries.iter().map(|e| e.id).collect()
    }

    async fn count(log: &AuditLog, table: &str) -> i64 {
        let q = format!("SELECT COUNT(*) FROM {table}");
        sqlx::query(&q)
            .fetch_one(&log.inner.pool)
            .await
            .unwrap()
            .try_get(0)
            .unwrap()
    }

    /// Appends, gets back every field, filters, orders and limits.
    async fn append_query_get(log: &AuditLog) {
        let mut first = entry(1000, "alice", Action::Release, "prod", Outcome::Done);
        first.id = 999; // ignored
        first.via = "browser".into();
        first.reason = "stuck since 02:10, \"worker\" gone; ünïcödé, 'quotes', $1 ?1".into();
        first.detail = "released fence 100".into();
        let unauthenticated = AuditEntry {
            id: 0,
            at: 4000,
            actor: "(unauthenticated)".into(),
            role: None,
            via: "api".into(),
            action: None,
            fleet: "prod".into(),
            target: String::new(),
            fence: None,
            reason: String::new(),
            outcome: None,
            detail: "no credentials".into(),
        };
        let wanted = [
            first,
            entry(2000, "bob", Action::Blacklist, "prod", Outcome::Refused),
            entry(3000, "alice", Action::Unblacklist, "dev", Outcome::Changed),
            entry(3000, "Alice", Action::Release, "dev", Outcome::Done),
            unauthenticated,
            entry(5000, "carol", Action::Release, "prod", Outcome::Done),
        ];
        let mut stored = Vec::new();
        for w in &wanted {
            let s = log.append(w).await.unwrap();
            assert_eq!(AuditEntry { id: s.id, ..w.clone() }, s);
            assert!(stored.last().is_none_or(|p: &AuditEntry| p.id < s.id), "ids increase");
            stored.push(s);
        }
        for s in &stored {
            assert_eq!(
                log.get(s.id).await.unwrap().as_ref(),
                Some(s),
                "every field round-trips"
            );
        }
        assert_eq!(log.get(stored[5].id + 1).await.unwrap(), None);

        let [e1, e2, e3, e4, e5, e6] = [0, 1, 2, 3, 4, 5].map(|i| stored[i].id);
        let q = |f: fn(&mut AuditQuery)| {
            let mut q = AuditQuery::default();
            f(&mut q);
            q
        };
        let cases: Vec<(AuditQuery, Vec<i64>)> = vec![
            (AuditQuery::default(), vec![e6, e5, e4, e3, e2, e1]),
            (q(|q| q.fleet = Some("prod".into())), vec![e6, e5, e2, e1]),
            (q(|q| q.fleet = Some("staging".into())), vec![]),
            (q(|q| q.actor = Some("alice".into())), vec![e3, e1]),
            (q(|q| q.actor = Some("ali".into())), vec![]),
            (q(|q| q.action = Some(Action::Release)), vec![e6, e4, e1]),
            (q(|q| q.action = Some(Action::Unblacklist)), vec![e3]),
            (q(|q| q.outcome = Some(Outcome::Done)), vec![e6, e4, e1]),
            (q(|q| q.outcome = Some(Outcome::Refused)), vec![e2]),
            (q(|q| q.from = Some(3000)), vec![e6, e5, e4, e3]),
            (q(|q| q.to = Some(3000)), vec![e2, e1]),
            (
                q(|q| {
                    q.from = Some(2000);
                    q.to = Some(4000)
                }),
                vec![e4, e3, e2],
            ),
            (
                q(|q| {
                    q.fleet = Some("prod".into());
                    q.action = Some(Action::Release);
                    q.outcome = Some(Outcome::Done)
                }),
                vec![e6, e1],
            ),
            (q(|q| q.limit = Some(2)), vec![e6, e5]),
            (
                q(|q| {
                    q.actor = Some("alice".into());
                    q.limit = Some(1)
                }),
                vec![e3],
            ),
            (q(|q| q.limit = Some(0)), vec![]),
            (q(|q| q.limit = Some(u32::MAX)), vec![e6, e5, e4, e3, e2, e1]),
        ];
        for (query, want) in cases {
            let got = log.query(&query).await.unwrap();
            assert_eq!(ids(&got), want, "{query:?}");
            for g in &got {
                assert_eq!(Some(g), stored.iter().find(|s| s.id == g.id));
            }
        }

        // Written by a newer lockscope (or by hand): unknown words read as None.
        let raw = log.sql(
            "INSERT INTO lockscope_audit (at, actor, role, via, action, fleet, target, fence, reason, outcome, detail) \
             VALUES (9000, 'future', 'root', 'cli', 'evict', 'prod', 'x', NULL, '', 'maybe', '')",
        );
        sqlx::query(&raw).execute(&log.inner.pool).await.unwrap();
        let newest = log.query(&AuditQuery::default()).await.unwrap().remove(0);
        assert!(newest.id > e6);
        assert_eq!((newest.role, newest.action, newest.outcome), (None, None, None));
        assert_eq!(newest.via, "cli");
        assert_eq!(log.get(newest.id).await.unwrap(), Some(newest));
        let released = log.query(&q(|q| q.action = Some(Action::Release))).await.unwrap();
        assert_eq!(ids(&released), vec![e6, e4, e1]);
    }

    /// Creates, finds, expires, deletes; stores the hash, not the secret.
    async fn sessions(log: &AuditLog) {
        let now = 1_000_000;
        let a = log.create_session("alice", Duration::from_secs(60), now).await.unwrap();
        let b = log.create_session("bob", Duration::from_secs(600), now).await.unwrap();
        for secret in [&a.cookie, &a.csrf, &b.cookie, &b.csrf] {
            assert_eq!(secret.len(), 64);
            assert!(secret.bytes().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        }
        assert!(a.cookie != a.csrf && a.cookie != b.cookie && a.csrf != b.csrf);
        assert_eq!(a.expires_at, now + 60_000);
        assert!(!format!("{a:?}").contains(&a.cookie) && !format!("{a:?}").contains(&a.csrf));

        let found = log.session(&a.cookie, now + 1).await.unwrap();
        assert_eq!(
            found,
            Some(WebSession {
                actor: "alice".into(),
                csrf: a.csrf.clone(),
                expires_at: a.expires_at,
            })
        );
        assert_eq!(log.session(&b.cookie, now).await.unwrap().unwrap().actor, "bob");
        for wrong in [a.csrf.as_str(), "", &a.cookie.to_uppercase(), &a.cookie[1..]] {
            assert_eq!(log.session(wrong, now).await.unwrap(), None, "{wrong:?}");
        }
        // Live until (not at) its expiry.
        assert!(log.session(&a.cookie, a.expires_at - 1).await.unwrap().is_some());
        assert_eq!(log.session(&a.cookie, a.expires_at).await.unwrap(), None);

        // The table holds the secret's SHA-256, never the secret itself.
        let rows = sqlx::query(
            "SELECT secret_sha256, actor, csrf, created_at, expires_at FROM lockscope_web_sessions ORDER BY actor",
        )
        .fetch_all(&log.inner.pool)
        .await
        .unwrap();
        assert_eq!(rows.len(), 2);
        let hash: String = rows[0].try_get(0).unwrap();
        assert_eq!(hash, hex::encode(Sha256::digest(a.cookie.as_bytes())));
        assert_ne!(hash, a.cookie);
        for r in &rows {
            for i in 0..3 {
                let v: String = r.try_get(i).unwrap();
                assert!(v != a.cookie && v != b.cookie);
            }
            assert_eq!(r.try_get::<i64, _>(3).unwrap(), now);
        }

        // Creating a session removes the expired ones (a's).
        let c = log
            .create_session("carol", Duration::from_secs(60), a.expires_at)
            .await
            .unwrap();
        assert_eq!(count(log, "lockscope_web_sessions").await, 2);
        assert!(log.session(&c.cookie, a.expires_at).await.unwrap().is_some());

        // Signing out.
        assert!(log.delete_session(&b.cookie).await.unwrap());
        assert_eq!(log.session(&b.cookie, now).await.unwrap(), None);
        assert!(!log.delete_session(&b.cookie).await.unwrap());
        assert!(log.session(&c.cookie, a.expires_at).await.unwrap().is_some());
        assert_eq!(count(log, "lockscope_web_sessions").await, 1);
    }

    #[tokio::test]
    async fn sqlite_appends_queries_and_gets() {
        let (_dir, _, log) = sqlite().await;
        append_query_get(&log).await;
    }

    #[tokio::test]
    async fn sqlite_sessions() {
        let (_dir, _, log) = sqlite().await;
        sessions(&log).await;
    }

    #[tokio::test]
    async fn sqlite_file_is_shared_with_the_lock_store_and_reopened() {
        let (dir, url, log) = sqlite().await;
        let e = log
            .append(&entry(1, "alice", Action::Release, "prod", Outcome::Done))
            .await
            .unwrap();
        let store_url = format!(
            "sqlite://{}?mode=rwc",
            dir.path().join(".lockscope").join("lockscope.db").display()
        );
        // The store's migrations accept a file with the audit tables in it, and
        // the audit log opens a file with the store's tables in it.
        let store = lockscope_store::sql::SqlLocks::connect(&store_url).await.unwrap();
        assert!(store.held().await.unwrap().is_empty());
        let again = AuditLog::open(&url).await.unwrap();
        assert_eq!(again.get(e.id).await.unwrap(), Some(e.clone()));
        let mode: String = sqlx::query("PRAGMA journal_mode")
            .fetch_one(&again.inner.pool)
            .await
            .unwrap()
            .try_get(0)
            .unwrap();
        assert_eq!(mode, "wal");
        let next = again
            .append(&entry(2, "bob", Action::Blacklist, "prod", Outcome::Done))
            .await
            .unwrap();
        assert!(next.id > e.id);
        assert_eq!(count(&log, "lockscope_audit").await, 2);
    }

    #[tokio::test]
    async fn postgres_appends_queries_gets_and_keeps_sessions() {
        let pg = PgServer::start().await;
        // Two servers starting at once both create the tables without failing.
        let url = pg.url();
        let (a, b) = tokio::join!(AuditLog::open(&url), AuditLog::open(&url));
        let (log, other) = (a.unwrap(), b.unwrap());
        append_query_get(&log).await;
        sessions(&log).await;
        let reopened = AuditLog::open(&url).await.unwrap();
        assert_eq!(
            ids(&reopened.query(&AuditQuery::default()).await.unwrap()),
            ids(&other.query(&AuditQuery::default()).await.unwrap())
        );
        assert_eq!(count(&reopened, "lockscope_audit").await, 7);
    }

    #[tokio::test]
    async fn errors_never_show_the_password() {
        let e = AuditLog::open("postgres://lockscope:hunter2@127.0.0.1:1/audit?password=hunter2")
            .await
            .unwrap_err();
        let shown = e.to_string();
        assert!(shown.contains("postgres://lockscope@127.0.0.1:1/audit"), "{shown}");
        assert!(matches!(e, AuditError::Unreachable { .. }), "{e:?}");
        let mut source = std::error::Error::source(&e);
        assert!(source.is_some(), "keeps sqlx's error");
        let mut chain = shown;
        while let Some(s) = source {
            chain.push_str(&s.to_string());
            source = s.source();
        }
        assert!(!chain.contains("hunter2"), "{chain}");
        for bad in ["mysql://u:hunter2@db/x", "sqlite:"] {
            let e = AuditLog::open(bad).await.unwrap_err();
            assert!(matches!(e, AuditError::Config(_)), "{e:?}");
            assert!(!e.to_string().contains("hunter2"), "{e}");
        }
    }
}
