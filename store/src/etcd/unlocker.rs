//! The unlocker election on etcd (`docs/protocol.md`, "Unlocker election").
//!
//! The role is the key `<prefix>unlocker`, created only if absent
//! (`create_revision == 0`) on the elected replica's lease; its value is an
//! [`UnlockerRecord`]. The term is the key's `create_revision`: etcd's revision
//! counter is global, so every election's term is larger than every earlier one.
//! The key exists exactly as long as the leadership: etcd deletes it when the
//! lease runs out (or is revoked on resignation), and only then can another
//! candidate create it. So a fenced release compares the key's
//! `create_revision` with the term and the lock's with the fence, in the same
//! transaction: a leader that lost its lease (paused past its ttl, say)
//! releases nothing, whatever its clock believes.
//!
//! Campaigning watches the key from the failed attempt's revision for its
//! deletion (no polling), re-checking every 10 s in case a watch is lost.

use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp};
use futures::future::BoxFuture;
use lockscope_model::record::RECORD_VERSION;
use lockscope_model::LockEntry;
use serde::{Deserialize, Serialize};

use super::locks::{absent, held_by, json_of, read, removed};
use super::{timed, EtcdConfig, EtcdLocks};
use crate::fleet::{not_released, Fenced, Leadership, Release, UnlockerInfo};
use crate::{now_ms, validate_name, StoreError};

/// The value of `<prefix>unlocker`.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct UnlockerRecord {
    v: u32,
    /// The elected replica's name.
    candidate: String,
    /// When it was elected, unix ms on its own clock (shown, never compared).
    elected_at: i64,
}

/// How long a campaign waits on one watch before it looks again.
const RECHECK: Duration = Duration::from_secs(10);

impl EtcdLocks {
    /// Campaigns for the unlocker role; see [`crate::fleet::FleetStore::campaign`].
    /// The lease's ttl is `ttl` rounded up to whole seconds (etcd may raise it to
    /// its minimum, about 2 s).
    pub async fn campaign(&self, candidate: &str, ttl: Duration) -> Result<EtcdLeadership, StoreError> {
        let key = self.cfg.unlocker_key();
        let ttl_s = ttl.as_secs_f64().ceil().max(1.0) as i64;
        loop {
            // A lease per attempt: a lease granted long before the key can be
            // created would have to be kept alive while waiting.
            let lease = timed(self.cfg.request_timeout, self.client.clone().lease_grant(ttl_s, None))
                .await?
                .id();
            let record = UnlockerRecord {
                v: RECORD_VERSION,
                candidate: candidate.to_string(),
                elected_at: now_ms(),
            };
            let txn = Txn::new().when([absent(&key)]).and_then([TxnOp::put(
                key.clone(),
                json_of(&record),
                Some(PutOptions::new().with_lease(lease)),
            )]);
            let resp = match self.txn(txn).await {
                Ok(resp) => resp,
                Err(e) => {
                    // Revoked, so that a put that did happen ends with it.
                    revoke(&self.client, &self.cfg, lease).await.ok();
                    return Err(e.of("etcd: campaigning for the unlocker role"));
                }
            };
            let revision = resp.header().map(|h| h.revision()).unwrap_or_default();
            if resp.succeeded() {
                // The txn's revision is the new key's create_revision: the term.
                return Ok(EtcdLeadership {
                    client: self.client.clone(),
                    cfg: self.cfg.clone(),
                    key,
                    lease,
                    term: revision,
                    candidate: candidate.to_string(),
                });
            }
            revoke(&self.client, &self.cfg, lease).await.ok();
            self.wait_deleted(&key, revision, RECHECK).await?;
        }
    }

    /// Who holds the unlocker role now; see [`crate::fleet::FleetStore::unlocker`].
    pub async fn unlocker(&self) -> Result<Option<UnlockerInfo>, StoreError> {
        let key = self.cfg.unlocker_key();
        let resp = timed(
            self.cfg.request_timeout,
            self.client.clone().get(key, None::<GetOptions>),
        )
        .await?;
        Ok(resp.kvs().first().map(|kv| UnlockerInfo {
            candidate: candidate_of(kv.value()),
            term: kv.create_revision(),
        }))
    }
}

/// The candidate a leader key names; a value that is not an [`UnlockerRecord`]
/// (written by hand, or by another implementation) is shown as it is.
fn candidate_of(value: &[u8]) -> String {
    match serde_json::from_slice::<UnlockerRecord>(value) {
        Ok(r) => r.candidate,
        Err(_) => String::from_utf8_lossy(value).into_owned(),
    }
}

/// Revokes `lease`; a lease etcd no longer knows (it ran out) is gone already.
async fn revoke(client: &Client, cfg: &EtcdConfig, lease: i64) -> Result<(), StoreError> {
    let mut client = client.clone();
    match tokio::time::timeout(cfg.request_timeout, client.lease_revoke(lease)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(etcd_client::Error::GRpcStatus(s))) if s.code() == tonic::Code::NotFound => Ok(()),
        Ok(Err(e)) => Err(StoreError::from(e)),
        Err(_) => Err(StoreError::Timeout(cfg.request_timeout)),
    }
}

/// The unlocker role on etcd: the leader key at `create_revision == term`, on `lease`.
pub struct EtcdLeadership {
    client: Client,
    cfg: EtcdConfig,
    key: String,
    lease: i64,
    term: i64,
    candidate: String,
}

impl EtcdLeadership {
    /// The compare that holds while this leadership is current.
    fn current(&self) -> Compare {
        Compare::create_revision(self.key.as_str(), CompareOp::Equal, self.term)
    }
}

impl Leadership for EtcdLeadership {
    fn term(&self) -> i64 {
        self.term
    }

    fn candidate(&self) -> &str {
        &self.candidate
    }

    fn keep_alive(&self) -> BoxFuture<'_, Result<bool, StoreError>> {
        Box::pin(async move {
            // etcd-client sends the first keep-alive when it opens the stream and
            // reads its answer: a lease etcd no longer knows (TTL 0) is an error
            // there, told apart from other failures by the key below.
            let mut client = self.client.clone();
            let renewed = tokio::time::timeout(self.cfg.request_timeout, client.lease_keep_alive(self.lease)).await;
            let refused = match renewed {
                Ok(Ok(_)) => None,
                Ok(Err(e @ etcd_client::Error::LeaseKeepAliveError(_))) => Some(StoreError::from(e)),
                Ok(Err(e)) => return Err(StoreError::from(e)),
                Err(_) => return Err(StoreError::Timeout(self.cfg.request_timeout)),
            };
            // The key lives exactly as long as the leadership: etcd deletes it
            // with an expired lease, in the same step (and a person might by hand).
            let resp = timed(
                self.cfg.request_timeout,
                self.client.clone().get(self.key.as_str(), None::<GetOptions>),
            )
            .await?;
            let current = resp.kvs().first().is_some_and(|kv| kv.create_revision() == self.term);
            if !current {
                revoke(&self.client, &self.cfg, self.lease).await.ok();
                return Ok(false);
            }
            match refused {
                // Still ours: the keep-alive failed for another reason.
                Some(e) => Err(e),
                None => Ok(true),
            }
        })
    }

    fn release<'a>(&'a self, name: &'a str, fence: i64, revision: i64) -> BoxFuture<'a, Result<Fenced, StoreError>> {
        Box::pin(async move {
            validate_name(name)?;
            let lock = self.cfg.lock_key(name);
            let seen = Compare::mod_revision(lock.as_str(), CompareOp::Equal, revision);
            let txn = Txn::new()
                .when([self.current(), held_by(&lock, fence), seen])
                .and_then([TxnOp::delete(lock.clone(), None)])
                .or_else([TxnOp::get(self.key.as_str(), None), TxnOp::get(lock, None)]);
            let resp = timed(self.cfg.request_timeout, self.client.clone().txn(txn)).await?;
            if let Some(r) = removed(&resp) {
                return Ok(Fenced::Done(Release::Released(r)));
            }
            // What failed, as read in the same transaction.
            let leader = read(&resp, 0);
            if leader.first().is_none_or(|kv| kv.create_revision() != self.term) {
                return Ok(Fenced::Deposed);
            }
            let now = read(&resp, 1).first().map(|kv| {
                LockEntry::from_stored(name.to_string(), kv.create_revision(), kv.mod_revision(), kv.value())
            });
            Ok(not_released(now))
        })
    }

    fn resign(self: Box<Self>) -> BoxFuture<'static, Result<(), StoreError>> {
        // Revoking the lease deletes the key: the next candidate is elected at once.
        Box::pin(async move { revoke(&self.client, &self.cfg, self.lease).await })
    }
}

#[cfg(test)]
mod tests {
    use super::candidate_of;

    /// docs/protocol.md, Unlocker record: "`v`, `candidate` and `elected_at` are
    /// required; a value missing one, or not JSON, is shown as its bytes".
    #[test]
    fn an_unlocker_record_needs_all_three_fields_else_its_bytes_are_shown() {
        assert_eq!(
            candidate_of(br#"{"v":1,"candidate":"replica-a","elected_at":5}"#),
            "replica-a"
        );
        let partial = r#"{"v":1,"candidate":"replica-a"}"#;
        assert_eq!(candidate_of(partial.as_bytes()), partial);
        assert_eq!(candidate_of(b"replica-b"), "replica-b");
    }
}
