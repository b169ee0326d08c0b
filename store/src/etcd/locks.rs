//! The writing side on etcd, as far as the dashboard's tests and demos need it:
//! acquire a lock with its metadata in one transaction, release it by fence.

use etcd_client::{Client, Compare, CompareOp, Txn, TxnOp, TxnOpResponse};
use lockscope_model::{LockEntry, LockRecord};

use super::{timed, EtcdConfig};
use crate::{validate_name, StoreError};

/// Writes lock records (see `docs/protocol.md`, "acquire" and "release").
#[derive(Clone)]
pub struct EtcdLocks {
    client: Client,
    cfg: EtcdConfig,
}

/// The outcome of one acquisition attempt.
#[derive(Debug)]
pub enum Acquire {
    /// The lock is ours; `fence` is the key's `create_revision`.
    Acquired { fence: i64 },
    /// Someone holds it; this is what the store showed in the same transaction.
    Busy { holder: LockEntry },
}

impl EtcdLocks {
    pub async fn connect(cfg: EtcdConfig) -> Result<EtcdLocks, StoreError> {
        let client = cfg.connect().await?;
        Ok(EtcdLocks { client, cfg })
    }

    /// Creates `<prefix>locks/<name>` holding `record` if and only if the key is
    /// absent: the record and the lock are one write.
    pub async fn acquire(&self, name: &str, record: &LockRecord) -> Result<Acquire, StoreError> {
        validate_name(name)?;
        let key = self.cfg.lock_key(name);
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.clone(), record.to_json(), None)])
            .or_else([TxnOp::get(key, None)]);
        let resp = timed(self.cfg.request_timeout, self.client.clone().txn(txn)).await?;
        if resp.succeeded() {
            let fence = resp
                .header()
                .map(|h| h.revision())
                .ok_or_else(|| StoreError::Backend("txn response without header".into()))?;
            return Ok(Acquire::Acquired { fence });
        }
        for op in resp.op_responses() {
            if let TxnOpResponse::Get(get) = op {
                if let Some(kv) = get.kvs().first() {
                    let holder =
                        LockEntry::from_stored(name.to_string(), kv.create_revision(), kv.mod_revision(), kv.value());
                    return Ok(Acquire::Busy { holder });
                }
            }
        }
        // Held at compare time, gone at read time is impossible inside one txn.
        Err(StoreError::Backend(format!("lock {name:?} neither acquired nor held")))
    }

    /// Deletes the lock only if it is still the acquisition `fence` names. Returns
    /// whether it deleted; `false` means the lock was already gone or re-acquired.
    pub async fn release(&self, name: &str, fence: i64) -> Result<bool, StoreError> {
        validate_name(name)?;
        let key = self.cfg.lock_key(name);
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, fence)])
            .and_then([TxnOp::delete(key, None)]);
        let resp = timed(self.cfg.request_timeout, self.client.clone().txn(txn)).await?;
        Ok(resp.succeeded())
    }

    /// Writes raw bytes at `<prefix>locks/<name>`, bypassing the protocol: for tests
    /// and demos of how malformed records are shown.
    pub async fn put_raw(&self, name: &str, value: &[u8]) -> Result<i64, StoreError> {
        let key = self.cfg.lock_key(name);
        let resp = timed(
            self.cfg.request_timeout,
            self.client.clone().put(key, value.to_vec(), None),
        )
        .await?;
        Ok(resp.header().map(|h| h.revision()).unwrap_or_default())
    }

    /// Compacts the store's history up to `revision` (tests of resync).
    pub async fn compact(&self, revision: i64) -> Result<(), StoreError> {
        let opts = etcd_client::CompactionOptions::new().with_physical();
        timed(
            self.cfg.request_timeout,
            self.client.clone().compact(revision, Some(opts)),
        )
        .await?;
        Ok(())
    }
}
