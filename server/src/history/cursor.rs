//! How far each fleet's history goes: the highest store revision and the
//! latest time among the events recorded for it, moved forward in the
//! transaction that writes them (so it never runs ahead of them).
//!
//! On etcd the revision is one counter for the whole store: after a restart
//! the observer replays every change after it that etcd still remembers (see
//! `EtcdObserver::resume_history`), and where etcd has compacted past it the
//! first snapshot is recorded with a gap (`writer::resync`). Other stores'
//! revisions are per lock, so only the time is used there: the start of the
//! gap a restart leaves.

use std::collections::HashMap;

use lockscope_model::history::HistoryEvent;
use lockscope_model::time::Millis;
use sqlx::Row;

use super::{sql, History, HistoryError};

/// How far a fleet's history goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cursor {
    /// The highest store revision among its events (`None`: none had one).
    pub revision: Option<i64>,
    /// The latest event's time (this server's clock, unix ms).
    pub at: Millis,
}

impl History {
    /// How far `fleet`'s history goes (`None`: nothing recorded yet).
    pub async fn cursor(&self, fleet: &str) -> Result<Option<Cursor>, HistoryError> {
        let what = "reading how far the history goes";
        let q = self.sql("SELECT revision, at FROM history_cursor WHERE fleet = $1");
        let row = sqlx::query(&q)
            .bind(fleet)
            .fetch_optional(&self.inner.pool)
            .await
            .map_err(|e| self.error(what, e))?;
        row.map(|r| {
            Ok(Cursor {
                revision: r.try_get("revision")?,
                at: r.try_get("at")?,
            })
        })
        .transpose()
        .map_err(|e| self.error(what, e))
    }

    /// Moves the cursors of the fleets in `events` forward, inside `tx` (the
    /// transaction writing them).
    pub(super) async fn advance_cursors(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        events: &[HistoryEvent],
    ) -> Result<(), HistoryError> {
        let mut far: HashMap<&str, Cursor> = HashMap::new();
        for e in events {
            let c = far.entry(e.fleet.as_str()).or_insert(Cursor {
                revision: None,
                at: e.at,
            });
            c.revision = c.revision.max(e.revision);
            c.at = c.at.max(e.at);
        }
        let q = self.sql(sql::ADVANCE_CURSOR);
        for (fleet, c) in far {
            sqlx::query(&q)
                .bind(fleet)
                .bind(c.revision)
                .bind(c.at)
                .execute(&mut **tx)
                .await
                .map_err(|e| self.error("writing how far the history goes", e))?;
        }
        Ok(())
    }
}
