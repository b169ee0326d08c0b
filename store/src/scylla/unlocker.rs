//! The unlocker election on ScyllaDB (`docs/protocol.md`, "Unlocker election").
//!
//! One row, `lockscope_unlocker (id = 1, candidate, term)`, written with a TTL
//! of the leadership's lease, so that it expires on the **cluster's** clock
//! (replicas' clocks are never compared). Terms come from the fencing counter
//! `lockscope_fences` keeps under a name no lock can have, so they grow across
//! elections although the row itself expires.
//!
//! - campaign: when the row is absent, claim the next term, then
//!   `INSERT … IF NOT EXISTS USING TTL`; otherwise a jittered pause and again;
//! - keep-alive: `UPDATE … USING TTL … IF term = ours` (an expired row has no
//!   term: a lost leadership cannot come back);
//! - fenced release: the lock's `DELETE … IF fence = ? AND revision = ?`,
//!   after checking that our term is current. The two are separate
//!   partitions, so not one transaction as on etcd and SQL: a leader deposed
//!   between the check and the delete can still delete — only the exact,
//!   expired version it saw, which the new leader would release too;
//! - resign: `DELETE … IF term = ours`.

use std::time::Duration;

use futures::future::BoxFuture;

use super::cql::{col, Stmt, Value};
use super::ScyllaLocks;
use crate::fleet::{not_released, Fenced, Leadership, Release, Removed, UnlockerInfo};
use crate::protocol::LockStore;
use crate::{validate_name, StoreError};

/// The fencing counter of the unlocker's terms: a control character, so no
/// lock can have this name (`validate_name`).
const TERMS: &str = "\u{1}unlocker-terms";

impl ScyllaLocks {
    /// Campaigns for the unlocker role; see [`crate::fleet::FleetStore::campaign`].
    pub async fn campaign(&self, candidate: &str, ttl: Duration) -> Result<ScyllaLeadership, StoreError> {
        self.superset("the unlocker election")?;
        let ttl_s = Self::session_lease_ttl(ttl.as_millis() as i64);
        let pause = (ttl / 10).clamp(Duration::from_millis(100), Duration::from_secs(1));
        loop {
            if self.unlocker().await?.is_none() {
                let term = self.claim_fence(TERMS).await?;
                let claim = vec![Value::text(candidate), Value::BigInt(term), Value::Int(ttl_s)];
                if self.lwt(Stmt::UnlockerClaim, claim).await? {
                    return Ok(ScyllaLeadership {
                        store: self.clone(),
                        candidate: candidate.to_string(),
                        term,
                        ttl_s,
                    });
                }
            }
            tokio::time::sleep(pause / 2 + (pause / 2).mul_f64(fastrand::f64())).await;
        }
    }

    /// Who holds the unlocker role now; see [`crate::fleet::FleetStore::unlocker`].
    pub async fn unlocker(&self) -> Result<Option<UnlockerInfo>, StoreError> {
        if self.schema == super::cql::Schema::Published {
            return Ok(None);
        }
        let rows = self.run(Stmt::UnlockerGet, Vec::new()).await?;
        Ok(rows.first().and_then(|r| {
            Some(UnlockerInfo {
                candidate: col(r, "candidate").as_text().unwrap_or_default().to_string(),
                term: col(r, "term").as_i64()?,
            })
        }))
    }
}

/// The unlocker role on ScyllaDB: the row at `term`, unexpired on the cluster's clock.
pub struct ScyllaLeadership {
    store: ScyllaLocks,
    candidate: String,
    term: i64,
    ttl_s: i32,
}

impl ScyllaLeadership {
    async fn current(&self) -> Result<bool, StoreError> {
        Ok(self.store.unlocker().await?.is_some_and(|u| u.term == self.term))
    }
}

impl Leadership for ScyllaLeadership {
    fn term(&self) -> i64 {
        self.term
    }

    fn candidate(&self) -> &str {
        &self.candidate
    }

    fn keep_alive(&self) -> BoxFuture<'_, Result<bool, StoreError>> {
        Box::pin(async move {
            let renew = vec![
                Value::Int(self.ttl_s),
                Value::text(&self.candidate),
                Value::BigInt(self.term),
                Value::BigInt(self.term),
            ];
            self.store.lwt(Stmt::UnlockerRenew, renew).await
        })
    }

    fn release<'a>(&'a self, name: &'a str, fence: i64, revision: i64) -> BoxFuture<'a, Result<Fenced, StoreError>> {
        Box::pin(async move {
            validate_name(name)?;
            if !self.current().await? {
                return Ok(Fenced::Deposed);
            }
            let exact = vec![Value::text(name), Value::BigInt(fence), Value::BigInt(revision)];
            if self.store.lwt(Stmt::ReleaseExact, exact).await? {
                // A lightweight transaction returns no revision.
                return Ok(Fenced::Done(Release::Released(Removed { revision: None })));
            }
            if !self.current().await? {
                return Ok(Fenced::Deposed);
            }
            Ok(not_released(self.store.get(name).await?))
        })
    }

    fn resign(self: Box<Self>) -> BoxFuture<'static, Result<(), StoreError>> {
        Box::pin(async move {
            self.store
                .lwt(Stmt::UnlockerResign, vec![Value::BigInt(self.term)])
                .await?;
            Ok(())
        })
    }
}
