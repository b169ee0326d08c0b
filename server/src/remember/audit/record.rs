//! The one door through which an admin action's or an auto-release's entry
//! reaches the audit log (issue 24, defect 4: an attempt is never lost from
//! the log, an action never happens unaudited).
//!
//! Before acting, the actor asks [`AuditLog::ready`] for a [`Permit`]: a place
//! reserved in the spool, so that the entry can be kept whatever the database
//! does; without one (the spool is full, or this process has none) nothing is
//! done. After acting, [`AuditLog::record`] spends the permit: the entry goes
//! to the database if it takes it within 1 s ([`AUDIT_BUSY_TIMEOUT`], an
//! SQLite file's busy timeout) or at all within [`AUDIT_WRITE_TIMEOUT`]
//! (whichever the database: a PostgreSQL that stopped answering), else to the
//! spool.
//! Queued entries are written by [`flush_spool`], in order.

use std::sync::Weak;

use lockscope_model::admin::AuditEntry;
use lockscope_store::sql::Dialect;

#[cfg(doc)]
use super::AUDIT_BUSY_TIMEOUT;
use super::{spool, AuditError, AuditLog, Inner, Recorded, SPOOL_FLUSH_EVERY};

/// The longest an entry's write may take, whatever the database, before the
/// entry is queued: SQLite's busy timeout ([`AUDIT_BUSY_TIMEOUT`], 1 s) and a
/// margin for its own answer.
pub const AUDIT_WRITE_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(1_500);

/// The longest a flush of queued entries waits for the database before it
/// gives up and tries again later (its transaction is dropped, its connection
/// closed).
pub const SPOOL_FLUSH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// A place reserved in the spool for one entry ([`AuditLog::ready`]): the
/// entry of the action it allows can be kept. Spent by [`AuditLog::record`];
/// dropped unspent, the place is given back.
pub struct Permit {
    log: AuditLog,
    spent: bool,
}

impl std::fmt::Debug for Permit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Permit").field("log", &self.log).finish()
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if !self.spent {
            if let Some(s) = self.log.inner.spool.get() {
                s.unreserve();
            }
        }
    }
}

impl AuditLog {
    /// A place for the entry of an action about to be taken, or why there is
    /// none: the spool is full (counting places other actions hold), or this
    /// process has no spool (another process owns it; or the log was opened
    /// only to read). An action without a permit is refused before it acts:
    /// it must never happen unaudited (docs/operations.md).
    pub fn ready(&self) -> Result<Permit, String> {
        let Some(s) = self.inner.spool.get() else {
            let why = self
                .inner
                .no_spool
                .get()
                .map_or("it was opened only to read", String::as_str);
            return Err(format!(
                "the audit log of this process cannot queue entries ({why}): nothing done"
            ));
        };
        if !s.reserve() {
            return Err(format!(
                "the audit log cannot take entries now and {} wait in its spool {} (the most it keeps): nothing done",
                s.pending(),
                s.path().display()
            ));
        }
        Ok(Permit {
            log: self.clone(),
            spent: false,
        })
    }

    /// Records `entry` in the log, or, when the database does not take it
    /// within [`AUDIT_WRITE_TIMEOUT`], in the place `permit` holds in the spool
    /// (see [`Recorded`]). While entries are queued, new ones queue behind
    /// them, so that ids follow the order of the attempts.
    pub async fn record(&self, entry: &AuditEntry, mut permit: Permit) -> Result<Recorded, AuditError> {
        debug_assert!(
            std::sync::Arc::ptr_eq(&self.inner, &permit.log.inner),
            "a permit of this log"
        );
        let spool = permit.log.inner.spool.get().expect("a permit has a spool");
        // One key for every try of this entry: a write given up on that the
        // database completes anyway, and the spool's copy, are one entry.
        let key = crate::client::random_hex(16);
        // Queued entries are tried every SPOOL_FLUSH_EVERY, not here: an
        // answer never waits for a database that is known to be blocked.
        let why = if spool.pending() == 0 {
            // Bounded for every database: PostgreSQL has no busy timeout, and
            // one that stopped answering would hold the answer (and the
            // unlocker) until TCP gives up, minutes later, with nothing queued.
            // Past SQLite's busy timeout, so that SQLite's own answer comes
            // first and no statement is left running when the entry queues.
            match self.append_within(entry, Some(&key)).await {
                Ok(e) => return Ok(Recorded::Written(e)),
                // The database refuses this entry itself: queued, it would
                // block every entry behind it for ever.
                Err(e) if refuses_content(self.inner.dialect, &e) => return Err(e),
                Err(e) => error_chain(&e),
            }
        } else {
            format!("{} earlier entries wait for the audit log", spool.pending())
        };
        let line = spool::Spooled {
            key: Some(key),
            entry: entry.clone(),
        };
        match spool.push(&line).await {
            Ok(()) => {
                permit.spent = true;
                tracing::warn!(why = %why, ?entry, "the audit log did not take an entry: queued");
                Ok(Recorded::Queued {
                    entry: entry.clone(),
                    why,
                })
            }
            Err(source) => Err(AuditError::Unqueued { why, source }),
        }
    }

    /// [`AuditLog::append`], given up after [`AUDIT_WRITE_TIMEOUT`]
    /// ([`AuditError::TimedOut`]; the entry may still be written).
    pub async fn append_within(&self, entry: &AuditEntry, key: Option<&str>) -> Result<AuditEntry, AuditError> {
        tokio::time::timeout(AUDIT_WRITE_TIMEOUT, self.append_keyed(entry, key))
            .await
            .unwrap_or_else(|_| Err(self.timed_out("appending an entry", AUDIT_WRITE_TIMEOUT)))
    }

    fn timed_out(&self, what: &'static str, after: std::time::Duration) -> AuditError {
        AuditError::TimedOut {
            db: self.inner.shown.clone(),
            what,
            after,
        }
    }

    /// Writes the queued entries if the database takes them: `true` when
    /// none wait any more.
    pub async fn flush(&self) -> bool {
        let Some(spool) = self.inner.spool.get() else {
            return true;
        };
        match spool.flush(|entries| self.append_all(entries)).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(entries = n, "queued audit entries written"),
            Err(e) => tracing::debug!(error = %e, "queued audit entries still wait"),
        }
        spool.pending() == 0
    }

    /// Appends `entries` in order, all or none, within [`SPOOL_FLUSH_TIMEOUT`];
    /// one whose key the log has already is skipped.
    async fn append_all(&self, entries: Vec<spool::Spooled>) -> Result<(), AuditError> {
        let what = "appending queued entries";
        let mut conn = self.inner.pool.acquire().await.map_err(|e| self.error(what, e))?;
        let written = tokio::time::timeout(SPOOL_FLUSH_TIMEOUT, async {
            let mut tx = sqlx::Connection::begin(&mut *conn)
                .await
                .map_err(|e| self.error(what, e))?;
            let q = self.sql(super::sql::INSERT);
            for line in &entries {
                super::bind_entry(sqlx::query(&q), &line.entry)
                    .bind(line.key.as_deref())
                    .fetch_all(&mut *tx)
                    .await
                    .map_err(|e| self.error(what, e))?;
            }
            tx.commit().await.map_err(|e| self.error(what, e))
        })
        .await
        .unwrap_or_else(|_| Err(self.timed_out(what, SPOOL_FLUSH_TIMEOUT)));
        if written.is_err() {
            // Not used again, as the history's writer does (History::write):
            // after a failed commit SQLite may have rolled the transaction
            // back itself (SQLITE_FULL), and sqlx, not knowing, would answer
            // the next flush's begin and commit with a savepoint inside a
            // transaction that never commits; the spool would then drop
            // entries no other connection ever sees.
            conn.close_on_drop();
        }
        written
    }
}

/// Whether `e` is the database refusing the entry's content (PostgreSQL's data
/// exceptions and integrity violations, SQLite's too big, constraint, type
/// mismatch and range errors), which trying again cannot mend; anything else
/// (busy, unreachable, a full disk, a missing table or grant) can end.
fn refuses_content(dialect: Dialect, e: &AuditError) -> bool {
    let AuditError::Database { source, .. } = e else {
        return false;
    };
    let Some(db) = source.as_database_error() else {
        return false;
    };
    let code = db.code().unwrap_or_default();
    match dialect {
        Dialect::Sqlite => matches!(
            lockscope_store::sql::sqlite_primary_code(source),
            Some(18 | 19 | 20 | 25)
        ),
        // SQLSTATE classes.
        Dialect::Postgres => code.starts_with("22") || code.starts_with("23"),
    }
}

/// An error and its sources, one line.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        s.push_str(": ");
        s.push_str(&cause.to_string());
        source = cause.source();
    }
    s
}

/// Writes queued entries as soon as the database takes them, until the log
/// is dropped.
pub(super) async fn flush_spool(log: Weak<Inner>) {
    let mut every = tokio::time::interval(SPOOL_FLUSH_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let Some(inner) = log.upgrade() else { return };
        if inner.spool.get().is_some_and(|s| s.pending() > 0) {
            AuditLog { inner }.flush().await;
        }
    }
}
