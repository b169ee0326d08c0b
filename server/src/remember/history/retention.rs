//! The history's retention: how long and how much is kept ([`Retention`]),
//! and removing the rest ([`History::retain`]) without losing the ability to
//! rebuild the table at any kept instant.

use std::time::Duration;

use lockscope_model::time::Millis;
use sqlx::Row;

use super::{History, HistoryError};

/// How long and how much history is kept.
#[derive(Clone, Debug)]
pub struct Retention {
    pub max_age: Duration,
    /// Events kept at most (all fleets together); the oldest go first.
    pub max_events: u64,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            max_age: Duration::from_secs(30 * 24 * 3600),
            max_events: 20_000_000,
        }
    }
}

impl History {
    /// Applies `retention` at `now`: for each fleet, a checkpoint at the cut (so
    /// the table at any kept instant can still be rebuilt), then the events and
    /// checkpoints before it go. Returns the events removed.
    pub async fn retain(&self, retention: &Retention, now: Millis) -> Result<u64, HistoryError> {
        let mut cut = now - retention.max_age.as_millis() as i64;
        let q = self.sql("SELECT COUNT(*) AS n FROM history_events");
        let n: i64 = sqlx::query(&q)
            .fetch_one(&self.inner.pool)
            .await
            .and_then(|r| r.try_get("n"))
            .map_err(|e| self.error("counting events", e))?;
        let over = n - retention.max_events as i64;
        if over > 0 {
            let q = self.sql("SELECT at FROM history_events ORDER BY at, seq LIMIT 1 OFFSET $1");
            if let Some(row) = sqlx::query(&q)
                .bind(over)
                .fetch_optional(&self.inner.pool)
                .await
                .map_err(|e| self.error("finding the size cut", e))?
            {
                let at: i64 = row.try_get("at").map_err(|e| self.error("finding the size cut", e))?;
                cut = cut.max(at);
            }
        }
        let q = self.sql("SELECT DISTINCT fleet FROM history_events WHERE at < $1");
        let fleets: Vec<String> = sqlx::query(&q)
            .bind(cut)
            .fetch_all(&self.inner.pool)
            .await
            .map_err(|e| self.error("finding fleets", e))?
            .iter()
            .filter_map(|r| r.try_get("fleet").ok())
            .collect();
        let mut removed = 0;
        for fleet in fleets {
            // Never below a floor already set (the size cut may lie behind it).
            let cut = cut.max(self.floor(&fleet).await?.map_or(i64::MIN, |f| f + 1));
            // The table at the cut first; then nothing before it can be rebuilt.
            self.checkpoint(&fleet, cut - 1).await?;
            let q = self.sql(
                "INSERT INTO history_floor (fleet, at) VALUES ($1, $2) ON CONFLICT (fleet) DO UPDATE SET at = excluded.at",
            );
            sqlx::query(&q)
                .bind(&fleet)
                .bind(cut - 1)
                .execute(&self.inner.pool)
                .await
                .map_err(|e| self.error("moving the retention floor", e))?;
            let q = self.sql("DELETE FROM history_events WHERE fleet = $1 AND at < $2");
            removed += sqlx::query(&q)
                .bind(&fleet)
                .bind(cut)
                .execute(&self.inner.pool)
                .await
                .map_err(|e| self.error("removing old events", e))?
                .rows_affected();
            // The checkpoints before it, then their parts and those of
            // checkpoints that failed half-written.
            for table in ["history_checkpoints", "history_checkpoint_parts"] {
                let text = format!("DELETE FROM {table} WHERE fleet = $1 AND at < $2");
                let q = self.sql(&text);
                sqlx::query(&q)
                    .bind(&fleet)
                    .bind(cut - 1)
                    .execute(&self.inner.pool)
                    .await
                    .map_err(|e| self.error("removing old checkpoints", e))?;
            }
        }
        Ok(removed)
    }
}

/// How often the retention runs.
const RETENTION_EVERY: Duration = Duration::from_secs(600);

/// Applies the retention a minute after start, then every [`RETENTION_EVERY`].
pub(super) async fn keep(history: History, retention: Retention) {
    let first = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut tick = tokio::time::interval_at(first, RETENTION_EVERY);
    loop {
        tick.tick().await;
        match history.retain(&retention, lockscope_store::now_ms()).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(removed = n, "history: retention applied"),
            Err(e) => tracing::warn!(error = %e, "history: retention failed"),
        }
    }
}
