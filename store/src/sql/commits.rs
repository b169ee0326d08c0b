//! SQLite: tells the observer that another connection has committed, so it
//! reads the change counters at once rather than at its next poll.
//!
//! SQLite cannot notify. `PRAGMA data_version`, read on a connection of its
//! own, changes whenever any other connection (of this process or another)
//! has committed to the file since its last read. It reads no table, only the
//! WAL index in shared memory: about 70 µs of the server's CPU a read, so it
//! is read every `busy` (10 ms) after a commit, the pause doubling while
//! nothing is committed up to `quiet` (80 ms). An idle dashboard then reads it
//! 10 times a second (beside the counters, 5 times a second as before); a
//! loaded one sees each commit within about 10 ms. The
//! counters are still read at least every `poll`: they are what delivers an
//! in-memory database's changes (sqlx opens `sqlite::memory:` as a database
//! of its own per connection, so this one sees none of them).
//!
//! The read that wakes the observer comes before the counters' read it
//! causes, so a commit landing between the two is either in that read or
//! moves `data_version` again: none is missed.

use std::time::Duration;

use sqlx::{Connection, Row};
use tokio::time::Instant;

use super::CONNECT_TIMEOUT;
use crate::StoreError;

pub(crate) struct Commits {
    conn: sqlx::AnyConnection,
    last: i64,
    /// The pause before the next read.
    pause: Duration,
}

impl Commits {
    pub(crate) async fn open(url: &str) -> Result<Commits, StoreError> {
        let opening = || format!("opening {} to watch its commits", crate::spec::redact(url));
        let mut conn = tokio::time::timeout(CONNECT_TIMEOUT, sqlx::AnyConnection::connect(url))
            .await
            .map_err(|_| StoreError::Timeout(CONNECT_TIMEOUT).of(opening()))?
            .map_err(|e| StoreError::from(e).of(opening()))?;
        let last = data_version(&mut conn).await?;
        Ok(Commits {
            conn,
            last,
            pause: Duration::ZERO,
        })
    }

    /// Returns once another connection has committed since the last return,
    /// or when `at_most` has passed. It looks every `busy` after a commit, the
    /// pause doubling while none comes, up to `quiet`.
    pub(crate) async fn next(&mut self, busy: Duration, quiet: Duration, at_most: Duration) -> Result<(), StoreError> {
        let until = Instant::now() + at_most;
        let busy = busy.max(Duration::from_millis(1));
        loop {
            self.pause = self.pause.clamp(busy, quiet.max(busy));
            let left = until.saturating_duration_since(Instant::now());
            if left <= self.pause {
                // The counters are read next anyway.
                tokio::time::sleep(left).await;
                return Ok(());
            }
            tokio::time::sleep(self.pause).await;
            let now = data_version(&mut self.conn).await?;
            if now != self.last {
                self.last = now;
                self.pause = busy;
                return Ok(());
            }
            self.pause = self.pause.saturating_mul(2);
        }
    }
}

async fn data_version(conn: &mut sqlx::AnyConnection) -> Result<i64, StoreError> {
    let row = sqlx::query("PRAGMA data_version").fetch_one(&mut *conn).await?;
    Ok(row.try_get(0)?)
}
