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

use std::collections::{BTreeMap, HashMap};

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

    /// How far `events` take each of their fleets, in fleet order.
    pub(super) fn reach(events: &[HistoryEvent]) -> BTreeMap<String, Cursor> {
        let mut far: BTreeMap<String, Cursor> = BTreeMap::new();
        for e in events {
            let c = far.entry(e.fleet.clone()).or_insert(Cursor {
                revision: None,
                at: e.at,
            });
            c.revision = c.revision.max(e.revision);
            c.at = c.at.max(e.at);
        }
        far
    }

    /// Moves the cursors `far` forward, inside `tx` (the transaction writing
    /// their events), after the events and in fleet order: replicas sharing a
    /// PostgreSQL history take these hot rows' locks in one order and hold
    /// them only until the commit, so two batches never deadlock on them.
    pub(super) async fn advance_cursors(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        far: BTreeMap<String, Cursor>,
    ) -> Result<(), HistoryError> {
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

/// Acquisitions made while no dashboard watched, told by a store whose lock
/// names keep a fencing counter across releases (SQL): the counters now
/// against the highest fence the history recorded for each name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Unseen {
    /// Acquisitions of names the history knew that it did not see.
    pub acquisitions: u64,
    /// Names the history knew whose counter moved.
    pub names: u64,
    /// The names with most of them, most first (at most [`UNSEEN_NAMED`]).
    pub top: Vec<(String, u64)>,
    /// Names with a row the history never recorded: when they were acquired
    /// (before the history began, or unseen) it cannot tell.
    pub unknown_names: u64,
}

/// Names an [`Unseen`] lists.
const UNSEEN_NAMED: usize = 5;

impl Unseen {
    /// In words, for the gap's detail.
    pub fn text(&self) -> String {
        let mut out = match self.acquisitions {
            0 => "no lock the history knew was acquired in between (the store's fencing counters did not move)"
                .to_string(),
            n => format!(
                "{n} acquisition{} the history did not see (the store's fencing counters moved: {}{})",
                if n == 1 { " was made that" } else { "s were made that" },
                self.top
                    .iter()
                    .map(|(name, n)| format!("{name} +{n}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                if (self.top.len() as u64) < self.names {
                    ", …"
                } else {
                    ""
                },
            ),
        };
        if self.unknown_names > 0 {
            out.push_str(&format!(
                "; {} lock name{} the history never recorded {} a row, acquired at a time it cannot tell",
                self.unknown_names,
                if self.unknown_names == 1 { "" } else { "s" },
                if self.unknown_names == 1 { "has" } else { "have" },
            ));
        }
        out
    }
}

impl History {
    /// What `fences` (every lock name's fencing counter in the store now)
    /// says was acquired in `fleet` since the history last recorded it: read
    /// before anything new is recorded.
    pub async fn unseen(&self, fleet: &str, fences: &[(String, i64)]) -> Result<Unseen, HistoryError> {
        let what = "reading the fences the history recorded";
        let q = self.sql("SELECT lock, MAX(fence) AS fence FROM history_events WHERE fleet = $1 AND kind = 'acquired' AND lock IS NOT NULL GROUP BY lock");
        let rows = sqlx::query(&q)
            .bind(fleet)
            .fetch_all(&self.inner.pool)
            .await
            .map_err(|e| self.error(what, e))?;
        let mut known = HashMap::with_capacity(rows.len());
        for r in &rows {
            let lock: String = r.try_get("lock").map_err(|e| self.error(what, e))?;
            let fence: Option<i64> = r.try_get("fence").map_err(|e| self.error(what, e))?;
            known.insert(lock, fence.unwrap_or(0));
        }
        let mut unseen = Unseen::default();
        let mut moved = Vec::new();
        for (name, fence) in fences {
            match known.get(name) {
                Some(seen) if fence > seen => moved.push((name.clone(), (fence - seen) as u64)),
                Some(_) => {}
                None => unseen.unknown_names += 1,
            }
        }
        unseen.acquisitions = moved.iter().map(|(_, n)| n).sum();
        unseen.names = moved.len() as u64;
        moved.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        moved.truncate(UNSEEN_NAMED);
        unseen.top = moved;
        Ok(unseen)
    }
}
