//! Carrying an existing install's audit log over to the log's own file.
//!
//! Before the audit log had a file of its own by default, the embedded
//! default kept it in the lock store's SQLite file (`.lockscope/lockscope.db`),
//! where another process holding that file could block an entry. On the first
//! start with the new default, the entries found there are copied into the new
//! log with their ids (so every id an answer or a report quoted still names
//! the same entry, and new ids follow them), along with the sign-in sessions
//! that have not expired, in one transaction; the import is recorded in
//! `lockscope_audit_imports` so that it happens once. The old rows stay where
//! they were, untouched (the log is append-only: lockscope deletes none).

use std::path::Path;

use sqlx::{Connection, Row};

use super::{AuditError, AuditLog};
use lockscope_store::sql::Dialect;

/// The audit log's file when none is configured: beside the embedded store's
/// file `embedded_db`, as the history's `lockscope-history.db` is.
pub fn default_file(embedded_db: &Path) -> std::path::PathBuf {
    embedded_db.with_file_name("lockscope-audit.db")
}

impl AuditLog {
    /// The server's audit log: `url` (`--audit`, `audit =`) if given, else
    /// [`default_file`], into which the entries an earlier version kept in
    /// `embedded_db` are carried over once ([`Self::import_from`]). A
    /// PostgreSQL log queues what it cannot take beside `embedded_db`
    /// (`lockscope-audit.spool`); an SQLite log beside its own file.
    pub async fn open_configured(url: Option<String>, embedded_db: &Path) -> Result<AuditLog, AuditError> {
        let Some(url) = url else {
            let log = AuditLog::open(&format!("sqlite:{}", default_file(embedded_db).display())).await?;
            log.import_from(embedded_db).await?;
            return Ok(log);
        };
        let log = AuditLog::open(&url).await?;
        if log.inner.spool.get().is_none() {
            log.set_spool(&embedded_db.with_file_name("lockscope-audit.spool"))?;
        }
        Ok(log)
    }

    /// Copies the audit entries (and live sign-in sessions) of the SQLite file
    /// `old` into this log, once (see the module docs): the number copied, 0
    /// when `old` has no log, this log already imported it, or this is not an
    /// SQLite log. A log that already has entries of its own takes none (their
    /// ids would collide): that is logged, and recorded as done.
    pub async fn import_from(&self, old: &Path) -> Result<u64, AuditError> {
        if self.inner.dialect != Dialect::Sqlite || !old.exists() {
            return Ok(0);
        }
        let what = "importing the entries of the lock store's file";
        let e = |source: sqlx::Error| self.error(what, source);
        let source = std::fs::canonicalize(old).unwrap_or_else(|_| old.to_path_buf());
        let source = source.display().to_string();
        // A connection of its own (never returned to the pool: it attaches a
        // second database), closed when dropped.
        let mut conn = self.inner.pool.acquire().await.map_err(e)?.detach();
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS lockscope_audit_imports (
                source TEXT PRIMARY KEY NOT NULL,
                entries BIGINT NOT NULL,
                at BIGINT NOT NULL
            )",
        )
        .execute(&mut conn)
        .await
        .map_err(e)?;
        let done = sqlx::query("SELECT 1 FROM lockscope_audit_imports WHERE source = ?1")
            .bind(&source)
            .fetch_optional(&mut conn)
            .await
            .map_err(e)?;
        if done.is_some() {
            return Ok(0);
        }
        sqlx::query("ATTACH DATABASE ?1 AS old")
            .bind(old.display().to_string())
            .execute(&mut conn)
            .await
            .map_err(e)?;
        let has = |table: &'static str| {
            sqlx::query("SELECT count(*) FROM old.sqlite_master WHERE type = 'table' AND name = ?1").bind(table)
        };
        let has_log: i64 = has("lockscope_audit").fetch_one(&mut conn).await.map_err(e)?.get(0);
        let has_sessions: i64 = has("lockscope_web_sessions")
            .fetch_one(&mut conn)
            .await
            .map_err(e)?
            .get(0);
        let own: i64 = sqlx::query("SELECT count(*) FROM main.lockscope_audit")
            .fetch_one(&mut conn)
            .await
            .map_err(e)?
            .get(0);
        let mut tx = conn.begin().await.map_err(e)?;
        let mut copied = 0;
        if has_log > 0 && own > 0 {
            tracing::warn!(from = %source, "the audit log has entries of its own: the lock store file's entries stay where they are");
        } else if has_log > 0 {
            copied = sqlx::query(
                "INSERT INTO main.lockscope_audit \
                 (id, at, actor, role, via, action, fleet, target, fence, reason, outcome, detail) \
                 SELECT id, at, actor, role, via, action, fleet, target, fence, reason, outcome, detail \
                 FROM old.lockscope_audit ORDER BY id",
            )
            .execute(&mut *tx)
            .await
            .map_err(e)?
            .rows_affected();
        }
        if has_sessions > 0 {
            sqlx::query(
                "INSERT OR IGNORE INTO main.lockscope_web_sessions \
                 SELECT secret_sha256, actor, csrf, created_at, expires_at FROM old.lockscope_web_sessions \
                 WHERE expires_at > ?1",
            )
            .bind(lockscope_store::now_ms())
            .execute(&mut *tx)
            .await
            .map_err(e)?;
        }
        sqlx::query("INSERT INTO lockscope_audit_imports (source, entries, at) VALUES (?1, ?2, ?3)")
            .bind(&source)
            .bind(copied as i64)
            .bind(lockscope_store::now_ms())
            .execute(&mut *tx)
            .await
            .map_err(e)?;
        tx.commit().await.map_err(e)?;
        let _ = sqlx::query("DETACH DATABASE old").execute(&mut conn).await;
        let _ = conn.close().await;
        if copied > 0 {
            tracing::info!(from = %source, entries = copied, "audit entries carried over to the audit log's own file");
        }
        Ok(copied)
    }
}
