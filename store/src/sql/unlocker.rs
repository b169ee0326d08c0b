//! The unlocker election on SQL (`docs/protocol.md`, "Unlocker election").
//!
//! One row, `lockscope_unlocker (id = 1, candidate, term, expires_at)` (schema
//! version 5). `expires_at` is on the **database's** clock ([`Dialect::now_ms`],
//! written `DB_NOW_MS` in the statements), so that replicas' clocks are never
//! compared: the leadership is current while `expires_at >= DB_NOW_MS`.
//!
//! - campaign: one upsert takes the row when it is absent or expired, bumping
//!   `term`; otherwise a jittered pause and again (SQL cannot notify an expiry);
//! - keep-alive: moves `expires_at` on, only if the term is ours and unexpired
//!   (an expired leadership cannot come back: its term is over);
//! - fenced release: the protocol's release statement plus an `EXISTS` on our
//!   term being current, one statement;
//! - resign: expires the row now (it is never deleted, so terms keep growing).
//!
//! [`Dialect::now_ms`]: super::Dialect::now_ms

use std::time::Duration;

use futures::future::BoxFuture;
use sqlx::Row;

use super::locks::{removed, RELEASE, RETURNING_REVISION};
use super::SqlLocks;
use crate::fleet::{not_released, Fenced, Leadership, Release, UnlockerInfo};
use crate::protocol::LockStore;
use crate::{validate_name, StoreError};

impl SqlLocks {
    /// Campaigns for the unlocker role; see [`crate::fleet::FleetStore::campaign`].
    /// Retries every `ttl / 10` (100 ms … 1 s, jittered) while another replica
    /// holds the role.
    pub async fn campaign(&self, candidate: &str, ttl: Duration) -> Result<SqlLeadership, StoreError> {
        let ttl_ms = (ttl.as_millis() as i64).max(1);
        let pause = (ttl / 10).clamp(Duration::from_millis(100), Duration::from_secs(1));
        loop {
            let q = self.sql_at_db_now(
                "INSERT INTO lockscope_unlocker (id, candidate, term, expires_at) VALUES (1, $1, 1, DB_NOW_MS + $2) \
                 ON CONFLICT (id) DO UPDATE SET candidate = excluded.candidate, term = lockscope_unlocker.term + 1, \
                 expires_at = excluded.expires_at \
                 WHERE lockscope_unlocker.expires_at < DB_NOW_MS \
                 RETURNING term",
            );
            if let Some(row) = self.one(sqlx::query(&q).bind(candidate).bind(ttl_ms)).await? {
                return Ok(SqlLeadership {
                    store: self.clone(),
                    candidate: candidate.to_string(),
                    term: row.try_get(0)?,
                    ttl_ms,
                });
            }
            tokio::time::sleep(pause / 2 + (pause / 2).mul_f64(fastrand::f64())).await;
        }
    }

    /// Who holds the unlocker role now; see [`crate::fleet::FleetStore::unlocker`].
    pub async fn unlocker(&self) -> Result<Option<UnlockerInfo>, StoreError> {
        let q = self
            .sql_at_db_now("SELECT candidate, term FROM lockscope_unlocker WHERE id = 1 AND expires_at >= DB_NOW_MS");
        let Some(row) = self.one(sqlx::query(&q)).await? else {
            return Ok(None);
        };
        Ok(Some(UnlockerInfo {
            candidate: row.try_get::<Option<String>, _>(0)?.unwrap_or_default(),
            term: row.try_get(1)?,
        }))
    }
}

/// The unlocker role on SQL: the row at `term`, unexpired on the database's clock.
pub struct SqlLeadership {
    store: SqlLocks,
    candidate: String,
    term: i64,
    ttl_ms: i64,
}

impl SqlLeadership {
    /// Whether this leadership is still current.
    async fn current(&self) -> Result<bool, StoreError> {
        let q = self
            .store
            .sql_at_db_now("SELECT 1 FROM lockscope_unlocker WHERE id = 1 AND term = $1 AND expires_at >= DB_NOW_MS");
        Ok(self.store.one(sqlx::query(&q).bind(self.term)).await?.is_some())
    }
}

impl Leadership for SqlLeadership {
    fn term(&self) -> i64 {
        self.term
    }

    fn candidate(&self) -> &str {
        &self.candidate
    }

    fn keep_alive(&self) -> BoxFuture<'_, Result<bool, StoreError>> {
        Box::pin(async move {
            let q = self.store.sql_at_db_now(
                "UPDATE lockscope_unlocker SET expires_at = DB_NOW_MS + $1 \
                 WHERE id = 1 AND term = $2 AND expires_at >= DB_NOW_MS",
            );
            let r = self
                .store
                .exec(sqlx::query(&q).bind(self.ttl_ms).bind(self.term))
                .await?;
            Ok(r.rows_affected() == 1)
        })
    }

    fn release<'a>(&'a self, name: &'a str, fence: i64, revision: i64) -> BoxFuture<'a, Result<Fenced, StoreError>> {
        Box::pin(async move {
            validate_name(name)?;
            // `revision = $4`: not extended since it was seen (an extension bumps
            // the row's revision), which PostgreSQL re-checks on the row even
            // when the statement waited behind that extension's row lock.
            let q = self.store.sql_at_db_now(&format!(
                "{RELEASE} AND revision = $4 AND EXISTS (SELECT 1 FROM lockscope_unlocker \
                 WHERE id = 1 AND term = $3 AND expires_at >= DB_NOW_MS){RETURNING_REVISION}"
            ));
            let row = self
                .store
                .one(sqlx::query(&q).bind(name).bind(fence).bind(self.term).bind(revision))
                .await?;
            if let Some(r) = removed(row)? {
                return Ok(Fenced::Done(Release::Released(r)));
            }
            // Nothing released: find out why. A leadership current now was current
            // then (an expired term never comes back); one lost since is reported
            // deposed, which is what the caller must act on anyway.
            if !self.current().await? {
                return Ok(Fenced::Deposed);
            }
            Ok(not_released(self.store.get(name).await?))
        })
    }

    fn resign(self: Box<Self>) -> BoxFuture<'static, Result<(), StoreError>> {
        Box::pin(async move {
            let q = self
                .store
                .sql("UPDATE lockscope_unlocker SET candidate = NULL, expires_at = 0 WHERE id = 1 AND term = $1");
            self.store.exec(sqlx::query(&q).bind(self.term)).await?;
            Ok(())
        })
    }
}
