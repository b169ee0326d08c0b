//! What the lock history counts for the contention charts ([`Seen`]): per
//! bucket, the acquisitions and waits started; the hold times of the
//! acquisitions that ended in the window; the locks and services waited for
//! most. The database counts (GROUP BY), so a window of millions of events
//! comes back as a few rows.

use lockscope_model::charts::{Contended, Frame, Seen, HOLD_BUCKETS_MS, TOP_CONTENDED};
use lockscope_model::history::Kind;
use sqlx::any::{Any, AnyArguments};
use sqlx::query::Query;
use sqlx::Row;

use super::{History, HistoryError};

/// `'a', 'b'` for a SQL `IN` list (kinds are fixed identifiers, never input).
fn kinds(kinds: impl Iterator<Item = Kind>) -> String {
    kinds
        .map(|k| format!("'{}'", k.as_str()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `CASE WHEN held <= 100 THEN 0 … ELSE n END`: the hold bucket, as
/// [`lockscope_model::charts::hold_bucket`] places it.
fn hold_bucket_case() -> String {
    let mut case = String::from("CASE");
    for (i, bound) in HOLD_BUCKETS_MS.iter().enumerate() {
        case.push_str(&format!(" WHEN held <= {bound} THEN {i}"));
    }
    case.push_str(&format!(" ELSE {} END", HOLD_BUCKETS_MS.len()));
    case
}

/// `q` with the fleet and the window's bounds bound as `$1`, `$2`, `$3`.
fn in_window<'q>(q: &'q str, fleet: &'q str, frame: &Frame) -> Query<'q, Any, AnyArguments<'q>> {
    sqlx::query(q).bind(fleet).bind(frame.from).bind(frame.to)
}

impl History {
    /// What the history counted in `fleet` over `frame` (both ends included,
    /// as a history query's `from` and `to`).
    pub async fn seen(&self, fleet: &str, frame: &Frame) -> Result<Seen, HistoryError> {
        let what = "counting events for the charts";
        let err = |e| self.error(what, e);
        let pool = &self.inner.pool;
        let mut seen = Seen {
            acquisitions: vec![0; frame.buckets],
            waits: vec![0; frame.buckets],
            holds: vec![0; HOLD_BUCKETS_MS.len() + 1],
            ..Seen::default()
        };

        let per_bucket = self.sql(
            "SELECT (at - $2) / $4 AS bucket, kind, COUNT(*) AS n FROM history_events \
             WHERE fleet = $1 AND at >= $2 AND at <= $3 AND kind IN ('acquired', 'wait_started') \
             GROUP BY bucket, kind",
        );
        let rows = in_window(&per_bucket, fleet, frame)
            .bind(frame.bucket_ms)
            .fetch_all(pool)
            .await
            .map_err(err)?;
        for row in rows {
            let bucket: i64 = row.try_get("bucket").map_err(err)?;
            let kind: String = row.try_get("kind").map_err(err)?;
            let n: i64 = row.try_get("n").map_err(err)?;
            let i = (bucket.max(0) as usize).min(frame.buckets - 1);
            let counts = if kind == Kind::Acquired.as_str() {
                &mut seen.acquisitions
            } else {
                &mut seen.waits
            };
            counts[i] += n as u64;
        }

        // An end's acquisition is found by (lock, fence) (index
        // `history_events_hold`); both times are the dashboard's clock.
        let holds = self
            .sql(&format!(
                "SELECT {case} AS bucket, COUNT(*) AS n FROM ( \
               SELECT e.at - a.at AS held FROM history_events e \
               JOIN history_events a ON a.fleet = e.fleet AND a.lock = e.lock AND a.fence = e.fence \
                 AND a.kind = 'acquired' \
               WHERE e.fleet = $1 AND e.at >= $2 AND e.at <= $3 AND e.kind IN ({ends}) \
             ) holds GROUP BY bucket",
                case = hold_bucket_case(),
                ends = kinds(Kind::ALL.into_iter().filter(|k| k.ends_hold())),
            ))
            .into_owned();
        let rows = in_window(&holds, fleet, frame).fetch_all(pool).await.map_err(err)?;
        for row in rows {
            let bucket: i64 = row.try_get("bucket").map_err(err)?;
            let n: i64 = row.try_get("n").map_err(err)?;
            seen.holds[bucket as usize] += n as u64;
        }

        for (column, top) in [("lock", &mut seen.top_locks), ("service", &mut seen.top_services)] {
            let q = self
                .sql(&format!(
                    "SELECT {column} AS name, COUNT(*) AS n FROM history_events \
                 WHERE fleet = $1 AND at >= $2 AND at <= $3 AND kind = 'wait_started' AND {column} IS NOT NULL \
                 GROUP BY {column} ORDER BY n DESC, {column} LIMIT {TOP_CONTENDED}"
                ))
                .into_owned();
            let rows = in_window(&q, fleet, frame).fetch_all(pool).await.map_err(err)?;
            for row in rows {
                top.push(Contended {
                    name: row.try_get("name").map_err(err)?,
                    waits: row.try_get::<i64, _>("n").map_err(err)? as u64,
                });
            }
        }
        Ok(seen)
    }
}

#[cfg(test)]
mod tests;
