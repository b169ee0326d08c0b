//! What can go wrong with the audit log ([`AuditError`]), and sqlx's errors
//! sorted into it.

use std::time::Duration;

use super::spool;

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
    /// The database did not answer within `after`.
    #[error("audit log in {db}: no answer within {after:?} while {what}")]
    TimedOut {
        db: String,
        what: &'static str,
        after: Duration,
    },
    /// The database did not take an entry (`why`), and neither did the spool.
    #[error("{why}; and the entry could not be queued")]
    Unqueued {
        why: String,
        #[source]
        source: spool::SpoolError,
    },
}

/// `source`, from `what` on database `db` (shown without credentials).
pub(super) fn db_error(db: &str, what: &'static str, source: sqlx::Error) -> AuditError {
    let db = db.to_string();
    match source {
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed => {
            AuditError::Unreachable { db, what, source }
        }
        source => AuditError::Database { db, what, source },
    }
}
