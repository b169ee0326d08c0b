//! The SQL observers' liveness probe ([`crate::liveness`]).
//!
//! - PostgreSQL: `SELECT 1` on a connection of the probe's own. Not through the
//!   pool: a pool whose server went away retries the connection until its own
//!   timeout and then says only that it timed out, where the probe's broken
//!   connection says at once what happened ("connection closed by the store").
//!   A server at its `max_connections` refuses the probe's connection with
//!   "too many clients" (SQLSTATE 53300): it answered, so it is there, busy
//!   but healthy (its other connections, the observer's among them, work). The
//!   probe then tries to connect again at each probe, taking that answer as
//!   alive, until it gets a connection of its own.
//! - SQLite: the file at the configured path is still the one the observer
//!   opened. A deleted or replaced file is otherwise never noticed: the open
//!   connections keep reading the old one, while every client opening the path
//!   gets another database (or none). Reads of the file itself fail on their
//!   own, in the observer's poll. An in-memory database has no file and cannot
//!   go away.

use std::path::PathBuf;

use futures::future::BoxFuture;
use sqlx::Connection;

use super::{Dialect, CONNECT_TIMEOUT};
use crate::liveness::Probe;
use crate::StoreError;

pub(crate) enum SqlProbe {
    Postgres(sqlx::AnyConnection),
    /// A PostgreSQL server at its `max_connections` when the probe connected:
    /// each probe connects again ([`connect_or_full`]).
    PostgresFull {
        url: String,
    },
    /// The database file and its identity (device, inode) when it was opened.
    SqliteFile {
        path: PathBuf,
        id: (u64, u64),
    },
    /// An in-memory SQLite database.
    Nothing,
}

impl SqlProbe {
    /// The probe for the store at `url`, which the observer has just opened.
    pub(crate) async fn open(url: &str, dialect: Dialect) -> Result<SqlProbe, StoreError> {
        match dialect {
            Dialect::Postgres => Ok(match connect_or_full(url).await? {
                Some(conn) => SqlProbe::Postgres(conn),
                None => SqlProbe::PostgresFull { url: url.to_string() },
            }),
            Dialect::Sqlite => {
                use std::str::FromStr;
                let opts = sqlx::sqlite::SqliteConnectOptions::from_str(url)?;
                let path = opts.get_filename().to_path_buf();
                // Just opened: no file there means an in-memory database.
                Ok(match identity(&path).await {
                    Ok(id) => SqlProbe::SqliteFile { path, id },
                    Err(_) => SqlProbe::Nothing,
                })
            }
        }
    }
}

/// A connection to the PostgreSQL server at `url`, or `None` if the server
/// answered that it has no connection slot left ("too many clients", SQLSTATE
/// 53300): an answer all the same.
async fn connect_or_full(url: &str) -> Result<Option<sqlx::AnyConnection>, StoreError> {
    match tokio::time::timeout(CONNECT_TIMEOUT, sqlx::AnyConnection::connect(url)).await {
        Err(_) => Err(StoreError::Timeout(CONNECT_TIMEOUT)),
        Ok(Ok(conn)) => Ok(Some(conn)),
        Ok(Err(sqlx::Error::Database(db))) if db.code().as_deref() == Some("53300") => Ok(None),
        Ok(Err(e)) => Err(e.into()),
    }
}

/// The file's (device, inode).
async fn identity(path: &std::path::Path) -> std::io::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let meta = tokio::fs::metadata(path).await?;
    Ok((meta.dev(), meta.ino()))
}

impl Probe for SqlProbe {
    fn probe(&mut self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            match self {
                SqlProbe::Postgres(conn) => {
                    sqlx::query("SELECT 1").execute(&mut *conn).await?;
                }
                SqlProbe::PostgresFull { url } => {
                    if let Some(conn) = connect_or_full(url).await? {
                        *self = SqlProbe::Postgres(conn);
                    }
                }
                SqlProbe::SqliteFile { path, id } => match identity(path).await {
                    Ok(now) if now == *id => {}
                    Ok(_) => {
                        return Err(StoreError::unreachable_msg(
                            "the file was replaced since it was opened; reopening it",
                        ))
                    }
                    Err(e) => return Err(StoreError::unreachable("the database file is gone", e)),
                },
                SqlProbe::Nothing => {}
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_sqlite_file_deleted_or_replaced_fails_the_probe_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("locks.db");
        std::fs::write(&file, b"").unwrap();
        let url = format!("sqlite://{}", file.display());
        let mut probe = SqlProbe::open(&url, Dialect::Sqlite).await.unwrap();
        probe.probe().await.unwrap();
        let line = |e: StoreError| e.summary(&crate::summary::address_of_url(&url)).line;

        // Replaced: another file renamed over it.
        let other = dir.path().join("other.db");
        std::fs::write(&other, b"").unwrap();
        std::fs::rename(&other, &file).unwrap();
        let replaced = probe.probe().await.unwrap_err();
        assert_eq!(
            line(replaced),
            format!(
                "{}: the file was replaced since it was opened; reopening it",
                file.display()
            )
        );

        // Deleted.
        let mut probe = SqlProbe::open(&url, Dialect::Sqlite).await.unwrap();
        std::fs::remove_file(&file).unwrap();
        let gone = probe.probe().await.unwrap_err();
        assert_eq!(
            line(gone),
            format!("cannot open {}: no such file or directory", file.display())
        );

        // In memory: nothing to go away.
        let mut memory = SqlProbe::open("sqlite::memory:", Dialect::Sqlite).await.unwrap();
        assert!(matches!(memory, SqlProbe::Nothing));
        memory.probe().await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_postgres_at_max_connections_is_alive_and_a_killed_one_is_not() {
        // docs/operations.md: "A server at its `max_connections` refuses the
        // probe's own connection with "too many clients"; it answered, so the
        // probe counts it alive".
        let pg = crate::testing::PgServer::start_with(crate::testing::PgOptions {
            max_connections: 5,
            ..Default::default()
        })
        .await;
        let url = pg.url();
        sqlx::any::install_default_drivers();
        // Every slot taken (the test's user is a superuser: the reserved ones too).
        let mut held = Vec::new();
        loop {
            match sqlx::AnyConnection::connect(&url).await {
                Ok(c) => held.push(c),
                Err(sqlx::Error::Database(db)) if db.code().as_deref() == Some("53300") => break,
                Err(e) => panic!("{e}"),
            }
        }
        assert!(!held.is_empty() && held.len() <= 5, "{} held", held.len());
        let mut probe = SqlProbe::open(&url, Dialect::Postgres)
            .await
            .expect("a server at max_connections is there");
        assert!(matches!(probe, SqlProbe::PostgresFull { .. }));
        probe.probe().await.expect("still full, still there");
        // A slot free again: the probe takes a connection of its own.
        held.pop().unwrap().close().await.unwrap();
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        while matches!(probe, SqlProbe::PostgresFull { .. }) {
            assert!(tokio::time::Instant::now() < deadline, "never a connection of its own");
            probe.probe().await.unwrap();
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        probe.probe().await.unwrap();
        // Full again, then killed: a server that does not answer is not alive.
        let mut full = SqlProbe::PostgresFull { url: url.clone() };
        drop(held);
        pg.stop_immediate().await;
        full.probe().await.expect_err("a killed server is gone");
        probe.probe().await.expect_err("a killed server is gone");
    }
}
