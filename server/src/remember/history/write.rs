//! The writer's connection: how a batch is written (one transaction of
//! multi-row INSERTs, with the fleets' cursors), SQLite's settings for it (a
//! page cache of its own and temporary files in memory, issue 26) and when
//! that cache is given back after a catch-up ([`CacheRelease`]).

use std::sync::atomic::Ordering;
use std::time::Duration;

use lockscope_model::history::HistoryEvent;
use lockscope_store::sql::Dialect;
use sqlx::any::AnyPoolOptions;

use super::{sql, History, HistoryError, MAX_WRITE};

/// SQLite's page cache on the writer's connection (SQLite's default: 2 MiB).
/// Each event goes into the `id` index at a random place (ids are hashes): a
/// first snapshot of a million locks makes that index ~40 MB, and with 2 MiB
/// of cache nearly every row read its page back from the file (issue 26:
/// `perf` showed the writer's thread mostly in the kernel's `pread`). The
/// readers keep SQLite's default.
pub const WRITER_CACHE_BYTES: i64 = 32 << 20;

/// How long after its last batch of [`MAX_WRITE`] events or more (a first
/// snapshot's backlog, a replay) the writer gives its SQLite page cache back
/// ([`WRITER_CACHE_BYTES`]; [`History::release_cache`]): the cache speeds
/// up a catch-up, and at rest it would be that much RSS for nothing.
const RELEASE_CACHE_AFTER: Duration = Duration::from_secs(1);

/// When the writer gives its page cache back: [`RELEASE_CACHE_AFTER`] after
/// the last large batch, at the next batch or when nothing comes.
#[derive(Debug, Default)]
pub(super) struct CacheRelease {
    pub(super) due: Option<tokio::time::Instant>,
}

impl CacheRelease {
    /// A batch of `n` events was written at `now`: whether to release the
    /// cache now.
    pub(super) fn wrote(&mut self, n: usize, now: tokio::time::Instant) -> bool {
        if n >= MAX_WRITE {
            self.due = Some(now + RELEASE_CACHE_AFTER);
            return false;
        }
        self.due.take_if(|due| *due <= now).is_some()
    }
}

impl History {
    /// Fault tests: caps a SQLite history's file at `pages` pages (SQLite's
    /// `max_page_count` on the writer's connection, never below the file's
    /// size now), as a full disk would; `None` lifts the cap. PostgreSQL: no effect.
    pub fn cap_pages(&self, pages: Option<u32>) {
        // SQLite's largest page count, its default.
        let pages = pages.unwrap_or(4_294_967_294).max(1);
        self.inner.cap.store(pages, Ordering::Relaxed);
    }

    /// Appends `events` (one transaction, with their fleets' [`super::Cursor`]s;
    /// events already there are skipped).
    pub async fn write(&self, events: Vec<HistoryEvent>) -> Result<u64, HistoryError> {
        self.write_all(&events).await
    }

    /// [`History::write`], the events copied to be bound an INSERT's rows
    /// ([`sql::INSERT_ROWS`]) at a time: the writer keeps its batch for a
    /// retry without a copy of all of it (5,000 events, ~1 KB each).
    pub(super) async fn write_all(&self, events: &[HistoryEvent]) -> Result<u64, HistoryError> {
        let what = "writing events";
        let mut conn = self.inner.write.acquire().await.map_err(|e| self.error(what, e))?;
        let cap = self.inner.cap.load(Ordering::Relaxed);
        if cap > 0 && self.inner.dialect == Dialect::Sqlite {
            sqlx::query(&format!("PRAGMA max_page_count = {cap}"))
                .execute(&mut *conn)
                .await
                .map_err(|e| self.error(what, e))?;
        }
        let written = async {
            let mut tx = sqlx::Connection::begin(&mut *conn)
                .await
                .map_err(|e| self.error(what, e))?;
            let far = History::reach(events);
            let mut added = 0;
            for chunk in events.chunks(sql::INSERT_ROWS) {
                let text = sql::insert(self.inner.dialect, chunk.len());
                let binds = chunk.iter().cloned().flat_map(sql::values).collect();
                added += sql::bind(sqlx::query(&text), binds)
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| self.error(what, e))?
                    .rows_affected();
            }
            self.advance_cursors(&mut tx, far).await?;
            tx.commit().await.map_err(|e| self.error(what, e))?;
            Ok(added)
        }
        .await;
        if written.is_err() {
            // Not used again: after a failed statement or commit SQLite may
            // have rolled the whole transaction back itself (SQLITE_FULL
            // does), and sqlx, not knowing, then answers the next batch's
            // begin and commit with a savepoint and its release inside a
            // transaction that never commits: batches "written" that no
            // other connection sees, until a restart drops them all.
            conn.close_on_drop();
        }
        written
    }

    /// Gives back the writer's SQLite page cache ([`WRITER_CACHE_BYTES`]):
    /// after a catch-up, so that it costs no RSS at rest. The connection is
    /// closed (the next batch opens another): `PRAGMA shrink_memory` freed
    /// the pages to malloc, which kept most of them (100,000 locks, debug:
    /// at rest 156 MiB, closed 146 MiB, 130 MiB without the cache).
    pub(super) async fn release_cache(&self) {
        if self.inner.dialect != Dialect::Sqlite {
            return;
        }
        if let Ok(mut conn) = self.inner.write.acquire().await {
            conn.close_on_drop();
        }
    }
}

/// The writer's pool, of one connection: SQLite's with a page cache of
/// [`WRITER_CACHE_BYTES`] and its temporary files in memory. Each multi-row
/// INSERT keeps a statement journal (so that it alone can be rolled back),
/// which SQLite writes to a temporary file in the system's temporary
/// directory by default, whatever disk the history is on: in memory, a
/// statement's few pages cost no system calls (issue 26: that file's writes
/// were a tenth of the server's CPU while a first snapshot was written).
pub(super) fn options(dialect: Dialect) -> AnyPoolOptions {
    let opts = super::pool_options(dialect, 1);
    match dialect {
        Dialect::Sqlite => opts.after_connect(|conn, _| {
            Box::pin(async move {
                lockscope_store::sql::prepare_sqlite(conn, None).await?;
                sqlx::query("PRAGMA temp_store = MEMORY").execute(&mut *conn).await?;
                let kib = WRITER_CACHE_BYTES >> 10;
                sqlx::query(&format!("PRAGMA cache_size = -{kib}"))
                    .execute(&mut *conn)
                    .await?;
                Ok(())
            })
        }),
        Dialect::Postgres => opts,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn giving_the_cache_back_closes_the_writers_connection() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite:{}", dir.path().join("history.db").display());
        let h = History::open(&url, None).await.unwrap();
        let mut conn = h.inner.write.acquire().await.unwrap();
        // A setting of this connection's own: gone once it is closed.
        sqlx::query("PRAGMA cache_size = -1234")
            .execute(&mut *conn)
            .await
            .unwrap();
        drop(conn);
        h.release_cache().await;
        let mut conn = h.inner.write.acquire().await.unwrap();
        let row = sqlx::query("PRAGMA cache_size").fetch_one(&mut *conn).await.unwrap();
        assert_eq!(
            sqlx::Row::try_get::<i64, _>(&row, 0).unwrap(),
            -(WRITER_CACHE_BYTES >> 10),
            "a new connection (`PRAGMA shrink_memory` freed the pages to malloc, which kept them)"
        );
        drop(conn);
        assert_eq!(h.write(vec![]).await.unwrap(), 0, "and the writer writes on it");
    }

    #[test]
    fn the_page_cache_is_given_back_a_second_after_the_last_large_batch() {
        // docs/operations.md: "given back a second after its last batch of
        // 5,000 events or more"
        assert_eq!((RELEASE_CACHE_AFTER, MAX_WRITE), (Duration::from_secs(1), 5_000));
        let t = tokio::time::Instant::now();
        let mut r = CacheRelease::default();
        assert!(!r.wrote(10, t), "small batches alone never filled it");
        assert!(!r.wrote(MAX_WRITE, t), "a catch-up: kept");
        assert!(
            !r.wrote(10, t + Duration::from_millis(500)),
            "within a second of it: kept"
        );
        assert!(
            !r.wrote(MAX_WRITE, t + Duration::from_millis(900)),
            "the catch-up goes on"
        );
        assert!(
            !r.wrote(10, t + Duration::from_millis(1_800)),
            "less than a second after the last"
        );
        assert_eq!(
            r.due,
            Some(t + Duration::from_millis(1_900)),
            "or when nothing comes by then"
        );
        assert!(r.wrote(10, t + Duration::from_millis(1_900)), "given back");
        assert!(!r.wrote(10, t + Duration::from_secs(5)), "once");
    }
}
