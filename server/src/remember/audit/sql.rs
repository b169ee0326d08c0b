//! The audit log's SQL: where the database is, the tables (created if absent,
//! in both dialects), and rows back to [`AuditEntry`]s.
//!
//! The tables may live beside the lock store's in the same database (`--audit`
//! naming the store's; before the log had a file of its own by default, the
//! embedded SQLite file was shared), so they are named `lockscope_audit` and
//! `lockscope_web_sessions` and are not part of the store's sqlx migrations: a
//! migration here would look to the store like one "from a newer lockscope".
//! Instead every open runs `CREATE … IF NOT EXISTS`; a later change of shape
//! needs its own, idempotent, step here.

use std::borrow::Cow;

use lockscope_model::admin::{Action, AuditEntry, AuditQuery, Outcome, Role, DEFAULT_AUDIT_ROWS, MAX_AUDIT_ROWS};
use lockscope_store::sql::Dialect;
use sqlx::any::AnyRow;
use sqlx::Row;

/// Where the log lives, as sqlx opens it, and as it may be shown.
pub(crate) struct Target {
    pub dialect: Dialect,
    /// What sqlx connects to.
    pub url: String,
    /// `url` without credentials or options, for errors and logs.
    pub shown: String,
    /// SQLite: the database file (its directory is created if missing).
    pub file: Option<std::path::PathBuf>,
}

/// `sqlite:PATH` (also `sqlite://PATH`, options after `?` kept; the file is
/// created if missing) or `postgres://…` / `postgresql://…`.
pub(crate) fn target(url: &str) -> Result<Target, String> {
    let url = url.trim();
    let shown = lockscope_store::spec::redact(url);
    if let Some(rest) = url.strip_prefix("sqlite:") {
        let rest = rest.trim_start_matches("//");
        let (path, opts) = match rest.split_once('?') {
            Some((p, o)) => (p, Some(o)),
            None => (rest, None),
        };
        if path.is_empty() || path.starts_with(":memory:") {
            return Err(format!("{shown}: this needs a database file (sqlite:PATH)"));
        }
        let opts = opts.unwrap_or("mode=rwc");
        return Ok(Target {
            dialect: Dialect::Sqlite,
            url: format!("sqlite://{path}?{opts}"),
            shown: format!("sqlite:{path}"),
            file: Some(path.into()),
        });
    }
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return Ok(Target {
            dialect: Dialect::Postgres,
            url: url.to_string(),
            shown,
            file: None,
        });
    }
    Err(format!("{shown}: expected sqlite:PATH or postgres://…"))
}

impl Target {
    /// SQLite: creates the database file's directory if missing.
    pub fn create_dir(&self) -> Result<(), (String, std::io::Error)> {
        match self.file.as_deref().and_then(std::path::Path::parent) {
            Some(dir) if !dir.as_os_str().is_empty() => {
                std::fs::create_dir_all(dir).map_err(|e| (format!("creating {}", dir.display()), e))
            }
            _ => Ok(()),
        }
    }
}

/// SQLite connections as the lock store opens the same kind of file: WAL so
/// readers do not wait for writers; writers queue on the database lock (sqlx's
/// busy timeout, 5 s).
pub(crate) fn sqlite_wal(opts: sqlx::any::AnyPoolOptions) -> sqlx::any::AnyPoolOptions {
    sqlite_wal_busy(opts, None)
}

/// [`sqlite_wal`] (the lock store's own `prepare_sqlite`), a writer waiting
/// at most `busy` for another's lock (the audit log's
/// [`super::AUDIT_BUSY_TIMEOUT`]: then the entry is queued,
/// [`super::AuditLog::record`]).
pub(crate) fn sqlite_wal_busy(
    opts: sqlx::any::AnyPoolOptions,
    busy: Option<std::time::Duration>,
) -> sqlx::any::AnyPoolOptions {
    opts.after_connect(move |conn, _| Box::pin(lockscope_store::sql::prepare_sqlite(conn, busy)))
}

/// The statement in `dialect`: SQL here is written with `$1`-style parameters,
/// which SQLite spells `?1` (no statement here has a `$` of its own).
pub(crate) fn sql(dialect: Dialect, q: &str) -> Cow<'_, str> {
    match dialect {
        Dialect::Postgres => q.into(),
        Dialect::Sqlite => q.replace('$', "?").into(),
    }
}

/// The tables and indexes, one statement each (sqlx prepares statements, and a
/// prepared statement is one statement).
pub(super) fn schema(dialect: Dialect) -> &'static [&'static str] {
    match dialect {
        // AUTOINCREMENT: ids are never reused, even after rows are removed by hand.
        Dialect::Sqlite => &[
            "CREATE TABLE IF NOT EXISTS lockscope_audit (
                id      INTEGER PRIMARY KEY AUTOINCREMENT,
                at      BIGINT NOT NULL,
                actor   TEXT NOT NULL,
                role    TEXT,
                via     TEXT NOT NULL,
                action  TEXT,
                fleet   TEXT NOT NULL,
                target  TEXT NOT NULL,
                fence   BIGINT,
                reason  TEXT NOT NULL,
                outcome TEXT,
                detail  TEXT NOT NULL
            )",
            "CREATE INDEX IF NOT EXISTS lockscope_audit_at ON lockscope_audit (at)",
            "CREATE TABLE IF NOT EXISTS lockscope_web_sessions (
                secret_sha256 TEXT PRIMARY KEY NOT NULL,
                actor         TEXT NOT NULL,
                csrf          TEXT NOT NULL,
                created_at    BIGINT NOT NULL,
                expires_at    BIGINT NOT NULL
            )",
            "CREATE INDEX IF NOT EXISTS lockscope_web_sessions_expires ON lockscope_web_sessions (expires_at)",
        ],
        // GENERATED ALWAYS: only the database assigns ids.
        Dialect::Postgres => &[
            "CREATE TABLE IF NOT EXISTS lockscope_audit (
                id      BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                at      BIGINT NOT NULL,
                actor   TEXT NOT NULL,
                role    TEXT,
                via     TEXT NOT NULL,
                action  TEXT,
                fleet   TEXT NOT NULL,
                target  TEXT NOT NULL,
                fence   BIGINT,
                reason  TEXT NOT NULL,
                outcome TEXT,
                detail  TEXT NOT NULL
            )",
            "CREATE INDEX IF NOT EXISTS lockscope_audit_at ON lockscope_audit (at)",
            "CREATE TABLE IF NOT EXISTS lockscope_web_sessions (
                secret_sha256 TEXT PRIMARY KEY,
                actor         TEXT NOT NULL,
                csrf          TEXT NOT NULL,
                created_at    BIGINT NOT NULL,
                expires_at    BIGINT NOT NULL
            )",
            "CREATE INDEX IF NOT EXISTS lockscope_web_sessions_expires ON lockscope_web_sessions (expires_at)",
        ],
    }
}

/// PostgreSQL: `CREATE TABLE IF NOT EXISTS` is not safe against itself (two
/// servers starting at once may both try, and one fails on the catalog's unique
/// index), so the schema is created in a transaction holding this advisory lock
/// (so is the history's `CREATE SCHEMA IF NOT EXISTS`, which has the same flaw).
pub(crate) const PG_SCHEMA_LOCK: &str = "SELECT pg_advisory_xact_lock(7163923384650297761)";

/// `$12`: the entry's key ([`super::Recorded`]: random, given when it is first tried), or NULL: an entry written again
/// under the same key (a replayed spool, a write given up on that the
/// database still completed) is not written twice.
pub(super) const INSERT: &str = "INSERT INTO lockscope_audit \
     (at, actor, role, via, action, fleet, target, fence, reason, outcome, detail, entry_key) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) \
     ON CONFLICT (entry_key) DO NOTHING RETURNING id";

/// The column `entry_key` and its unique index, for a table made before it
/// (idempotent; SQLite's `ADD COLUMN` has no `IF NOT EXISTS`: the caller adds
/// it when [`KEY_COLUMN_MISSING`] counts 0).
pub(super) fn key_steps(dialect: Dialect) -> &'static [&'static str] {
    match dialect {
        Dialect::Sqlite => &["CREATE UNIQUE INDEX IF NOT EXISTS lockscope_audit_key ON lockscope_audit (entry_key)"],
        Dialect::Postgres => &[
            "ALTER TABLE lockscope_audit ADD COLUMN IF NOT EXISTS entry_key TEXT",
            "CREATE UNIQUE INDEX IF NOT EXISTS lockscope_audit_key ON lockscope_audit (entry_key)",
        ],
    }
}

/// SQLite: how many columns named `entry_key` the log's table has (0 or 1).
pub(super) const KEY_COLUMN_MISSING: &str =
    "SELECT count(*) FROM pragma_table_info('lockscope_audit') WHERE name = 'entry_key'";

/// SQLite: adds the key column (when [`KEY_COLUMN_MISSING`] says 0).
pub(super) const ADD_KEY_COLUMN: &str = "ALTER TABLE lockscope_audit ADD COLUMN entry_key TEXT";

const COLUMNS: &str = "id, at, actor, role, via, action, fleet, target, fence, reason, outcome, detail";

pub(super) fn select_one() -> String {
    format!("SELECT {COLUMNS} FROM lockscope_audit WHERE id = $1")
}

/// A parameter of a query built at run time.
pub(super) enum Bind {
    Text(String),
    Int(i64),
}

/// The `SELECT` for `q` (filters, newest first, capped) and its parameters in
/// order; `fleets`, when given, limits the fleets (a scoped reader's).
pub(super) fn select(q: &AuditQuery, fleets: Option<&[String]>) -> (String, Vec<Bind>) {
    let mut conds: Vec<String> = Vec::new();
    let mut binds: Vec<Bind> = Vec::new();
    let mut cond = |column_op: &str, b: Bind| {
        binds.push(b);
        conds.push(format!("{column_op} ${}", binds.len()));
    };
    if let Some(f) = &q.fleet {
        cond("fleet =", Bind::Text(f.clone()));
    }
    if let Some(a) = &q.actor {
        cond("actor =", Bind::Text(a.clone()));
    }
    if let Some(a) = q.action {
        cond("action =", Bind::Text(a.as_str().to_string()));
    }
    if let Some(o) = q.outcome {
        cond("outcome =", Bind::Text(o.as_str().to_string()));
    }
    if let Some(from) = q.from {
        cond("at >=", Bind::Int(from));
    }
    if let Some(to) = q.to {
        cond("at <", Bind::Int(to));
    }
    if let Some(fleets) = fleets {
        let first = binds.len() + 1;
        binds.extend(fleets.iter().map(|f| Bind::Text(f.clone())));
        let params: Vec<String> = (first..first + fleets.len()).map(|i| format!("${i}")).collect();
        // No fleets at all selects nothing.
        conds.push(if fleets.is_empty() {
            "1 = 0".into()
        } else {
            format!("fleet IN ({})", params.join(", "))
        });
    }
    let mut sql = format!("SELECT {COLUMNS} FROM lockscope_audit");
    if !conds.is_empty() {
        sql.push_str(" WHERE ");
        sql.push_str(&conds.join(" AND "));
    }
    binds.push(Bind::Int(limit(q).into()));
    sql.push_str(&format!(" ORDER BY id DESC LIMIT ${}", binds.len()));
    (sql, binds)
}

/// `q.limit` (default [`DEFAULT_AUDIT_ROWS`]), at most [`MAX_AUDIT_ROWS`].
pub(super) fn limit(q: &AuditQuery) -> u32 {
    q.limit.unwrap_or(DEFAULT_AUDIT_ROWS).min(MAX_AUDIT_ROWS)
}

/// A row of [`COLUMNS`] as an entry. A role, action or outcome this build does
/// not know (written by a newer lockscope, or by hand) reads as `None`.
pub(super) fn entry_of(row: &AnyRow) -> Result<AuditEntry, sqlx::Error> {
    let text = |i: usize| -> Result<Option<String>, sqlx::Error> { row.try_get(i) };
    Ok(AuditEntry {
        id: row.try_get(0)?,
        at: row.try_get(1)?,
        actor: row.try_get(2)?,
        role: text(3)?.as_deref().and_then(Role::parse),
        via: row.try_get(4)?,
        action: text(5)?.as_deref().and_then(Action::parse),
        fleet: row.try_get(6)?,
        target: row.try_get(7)?,
        fence: row.try_get(8)?,
        reason: row.try_get(9)?,
        outcome: text(10)?.as_deref().and_then(Outcome::parse),
        detail: row.try_get(11)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_recognised_and_shown_without_secrets() {
        let t = target("sqlite:.lockscope/lockscope.db").unwrap();
        assert_eq!(t.url, "sqlite://.lockscope/lockscope.db?mode=rwc");
        assert_eq!(t.file.as_deref(), Some(std::path::Path::new(".lockscope/lockscope.db")));
        let t = target("sqlite:///tmp/a.db?mode=rw").unwrap();
        assert_eq!(t.url, "sqlite:///tmp/a.db?mode=rw");
        let t = target("postgres://u:hunter2@db/x?sslmode=require").unwrap();
        assert_eq!(t.dialect, Dialect::Postgres);
        assert_eq!(t.shown, "postgres://u@db/x");
        for bad in ["mysql://u:hunter2@db/x", "sqlite:", "sqlite::memory:"] {
            let e = target(bad).err().unwrap();
            assert!(!e.contains("hunter2"), "{e}");
        }
    }

    #[test]
    fn queries_number_their_parameters_and_cap_the_limit() {
        let q = AuditQuery {
            fleet: Some("prod".into()),
            outcome: Some(Outcome::Done),
            to: Some(5),
            ..AuditQuery::default()
        };
        let (s, binds) = select(&q, None);
        assert!(
            s.ends_with("WHERE fleet = $1 AND outcome = $2 AND at < $3 ORDER BY id DESC LIMIT $4"),
            "{s}"
        );
        assert_eq!(binds.len(), 4);
        assert!(matches!(binds[3], Bind::Int(1000)));
        assert_eq!(
            limit(&AuditQuery {
                limit: Some(u32::MAX),
                ..AuditQuery::default()
            }),
            MAX_AUDIT_ROWS
        );
        assert!(sql(Dialect::Sqlite, &s).ends_with("LIMIT ?4"));
    }
}
