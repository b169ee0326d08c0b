//! The lock protocol's writes on etcd ([`LockStore`] for etcd). Each operation is
//! one transaction, exactly as `docs/protocol.md` lists it.

use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, EventType, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse, TxnResponse,
};
use lockscope_model::record::{BlacklistRecord, SessionRecord, Stored, WaiterRecord, RECORD_VERSION};
use lockscope_model::{LockEntry, LockRecord};

use super::{timed, EtcdConfig};
use crate::fleet::Removed;
use crate::protocol::{Attempt, Blacklisting, Extend, LockStore, SessionLease, WaitFrom};
use crate::{now_ms, validate_name, StoreError};

/// The etcd lock store: what services link to (through [`crate::client`]) and
/// what tests and the demo fleet write with.
#[derive(Clone)]
pub struct EtcdLocks {
    pub(super) client: Client,
    pub(super) cfg: EtcdConfig,
}

pub(super) fn absent(key: &str) -> Compare {
    Compare::create_revision(key, CompareOp::Equal, 0)
}

pub(super) fn held_by(key: &str, fence: i64) -> Compare {
    Compare::create_revision(key, CompareOp::Equal, fence)
}

pub(super) fn json_of<T: serde::Serialize>(v: &T) -> Vec<u8> {
    serde_json::to_vec(v).expect("records serialise")
}

/// The key-values the `n`-th operation of a failed txn read.
pub(super) fn read(resp: &TxnResponse, n: usize) -> Vec<etcd_client::KeyValue> {
    match resp.op_responses().into_iter().nth(n) {
        Some(TxnOpResponse::Get(g)) => g.kvs().to_vec(),
        _ => Vec::new(),
    }
}

/// What a guarded delete's txn removed: nothing when it failed; else the
/// delete at the txn's revision (its header's), the mod revision of the delete
/// event every watcher sees.
pub(super) fn removed(resp: &TxnResponse) -> Option<Removed> {
    resp.succeeded().then(|| Removed {
        revision: resp.header().map(|h| h.revision()),
    })
}

impl EtcdLocks {
    pub async fn connect(cfg: EtcdConfig) -> Result<EtcdLocks, StoreError> {
        let client = cfg.connect().await?;
        Ok(EtcdLocks { client, cfg })
    }

    pub(super) async fn txn(&self, txn: Txn) -> Result<TxnResponse, StoreError> {
        timed(self.cfg.request_timeout, self.client.clone().txn(txn)).await
    }

    /// The protocol's release, saying what it removed: the transaction's
    /// revision is the delete event's mod revision (`None`: nothing deleted).
    pub async fn release_removing(&self, name: &str, fence: i64) -> Result<Option<Removed>, StoreError> {
        validate_name(name)?;
        let key = self.cfg.lock_key(name);
        let txn = Txn::new()
            .when([held_by(&key, fence)])
            .and_then([TxnOp::delete(key, None)]);
        Ok(removed(&self.txn(txn).await?))
    }

    /// Returns once `key` may have been deleted after `revision` (a delete seen,
    /// the key gone or made again since, the watch compacted or canceled), or
    /// after `max`: callers look again.
    ///
    /// Watch first, then look (as the SQL store's notifications do): a watch from
    /// the current revision joins etcd's *synced* watcher group, which sends the
    /// delete as it is committed. A watch from `revision + 1` — older than the
    /// current revision as soon as anything was written since (this waiter's own
    /// waiter key, a heartbeat) — lands in the *unsynced* group, which etcd
    /// catches up only every 100 ms: a hand-off then took up to 100 ms more. The
    /// look closes the gap: a delete between `revision` and the watch's start
    /// shows as the key gone, or made again (a create revision past `revision`).
    pub(super) async fn wait_deleted(&self, key: &str, revision: i64, max: Duration) -> Result<(), StoreError> {
        let mut stream = timed(self.cfg.request_timeout, self.client.clone().watch(key, None)).await?;
        // The look must come after etcd has made the watch: its first answer.
        match timed(self.cfg.request_timeout, stream.message()).await? {
            Some(resp) if resp.created() && !resp.canceled() => {}
            _ => return Ok(()),
        }
        let now = timed(
            self.cfg.request_timeout,
            self.client.clone().get(key, None::<GetOptions>),
        )
        .await?;
        if now.kvs().first().is_none_or(|kv| kv.create_revision() > revision) {
            return Ok(());
        }
        let wait = async {
            loop {
                let Some(resp) = stream.message().await? else {
                    return Ok(());
                };
                // Compacted or canceled: just try again.
                if resp.canceled() || resp.compact_revision() > 0 {
                    return Ok(());
                }
                if resp.events().iter().any(|e| e.event_type() == EventType::Delete) {
                    return Ok(());
                }
            }
        };
        match tokio::time::timeout(max, wait).await {
            Ok(r) => r.map_err(|e: etcd_client::Error| StoreError::from(e)),
            Err(_) => Ok(()),
        }
    }

    fn entry(&self, name: &str, kv: &etcd_client::KeyValue) -> LockEntry {
        LockEntry::from_stored(name.to_string(), kv.create_revision(), kv.mod_revision(), kv.value())
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

impl LockStore for EtcdLocks {
    async fn open_session(&self, session: &SessionRecord, ttl: Duration) -> Result<SessionLease, StoreError> {
        let ttl = ttl.as_secs().max(2) as i64;
        let lease = timed(self.cfg.request_timeout, self.client.clone().lease_grant(ttl, None))
            .await?
            .id();
        let txn = Txn::new()
            .when([absent(&self.cfg.blacklist_key(&session.session))])
            .and_then([TxnOp::put(
                self.cfg.session_key(&session.session),
                json_of(session),
                Some(PutOptions::new().with_lease(lease)),
            )]);
        if self.txn(txn).await?.succeeded() {
            Ok(SessionLease(lease))
        } else {
            let _ = timed(self.cfg.request_timeout, self.client.clone().lease_revoke(lease)).await;
            Err(StoreError::Blacklisted {
                session: session.session.clone(),
            })
        }
    }

    async fn session_heartbeat(&self, lease: SessionLease, session: &SessionRecord) -> Result<(), StoreError> {
        // etcd-client opens the keep-alive stream with one keep-alive and reads its
        // answer: a TTL ≤ 0 (the lease expired or was revoked) is its error
        // "lease not found", which means register again, not a store error. (It
        // was taken for one, and an expired session never registered again.)
        let mut client = self.client.clone();
        match tokio::time::timeout(self.cfg.request_timeout, client.lease_keep_alive(lease.0)).await {
            Ok(Ok(_)) => {}
            Ok(Err(etcd_client::Error::LeaseKeepAliveError(m))) if m == "lease not found" => {
                return Err(StoreError::SessionExpired {
                    session: session.session.clone(),
                })
            }
            Ok(Err(e)) => return Err(e.into()),
            Err(_) => return Err(StoreError::Timeout(self.cfg.request_timeout)),
        }
        let txn = Txn::new()
            .when([absent(&self.cfg.blacklist_key(&session.session))])
            .and_then([TxnOp::put(
                self.cfg.session_key(&session.session),
                json_of(session),
                Some(PutOptions::new().with_lease(lease.0)),
            )]);
        if self.txn(txn).await?.succeeded() {
            Ok(())
        } else {
            Err(StoreError::Blacklisted {
                session: session.session.clone(),
            })
        }
    }

    async fn close_session(&self, lease: SessionLease, _session: &str) -> Result<(), StoreError> {
        // Revoking the lease deletes the session record and its waiter keys.
        timed(self.cfg.request_timeout, self.client.clone().lease_revoke(lease.0)).await?;
        Ok(())
    }

    async fn try_acquire(&self, name: &str, record: &LockRecord) -> Result<Attempt, StoreError> {
        validate_name(name)?;
        let key = self.cfg.lock_key(name);
        let black = self.cfg.blacklist_key(&record.session);
        let txn = Txn::new()
            .when([absent(&key), absent(&black)])
            .and_then([TxnOp::put(key.clone(), record.to_json(), None)])
            .or_else([TxnOp::get(key, None), TxnOp::get(black, None)]);
        let resp = self.txn(txn).await?;
        let revision = resp.header().map(|h| h.revision()).unwrap_or_default();
        if resp.succeeded() {
            // The txn's revision is the new key's create_revision.
            return Ok(Attempt::Acquired { fence: revision });
        }
        if !read(&resp, 1).is_empty() {
            return Err(StoreError::Blacklisted {
                session: record.session.to_string(),
            });
        }
        let holder = read(&resp, 0).first().map(|kv| self.entry(name, kv));
        Ok(Attempt::Busy {
            holder,
            from: WaitFrom(revision),
        })
    }

    async fn extend(&self, name: &str, fence: i64, record: &LockRecord) -> Result<Extend, StoreError> {
        let key = self.cfg.lock_key(name);
        let black = self.cfg.blacklist_key(&record.session);
        let txn = Txn::new()
            .when([held_by(&key, fence), absent(&black)])
            .and_then([TxnOp::put(key, record.to_json(), None)])
            .or_else([TxnOp::get(black, None)]);
        let resp = self.txn(txn).await?;
        Ok(if resp.succeeded() {
            Extend::Extended
        } else if !read(&resp, 0).is_empty() {
            Extend::Blacklisted
        } else {
            Extend::Lost
        })
    }

    async fn release(&self, name: &str, fence: i64) -> Result<bool, StoreError> {
        Ok(self.release_removing(name, fence).await?.is_some())
    }

    async fn set_waiting(
        &self,
        lease: SessionLease,
        session: &str,
        name: &str,
        waiting: bool,
    ) -> Result<(), StoreError> {
        let key = self.cfg.waiter_key(name, session);
        let mut client = self.client.clone();
        if waiting {
            let value = json_of(&WaiterRecord {
                v: RECORD_VERSION,
                session: session.to_string(),
                since: now_ms(),
            });
            let opts = PutOptions::new().with_lease(lease.0);
            timed(self.cfg.request_timeout, client.put(key, value, Some(opts))).await?;
        } else {
            timed(self.cfg.request_timeout, client.delete(key, None)).await?;
        }
        Ok(())
    }

    async fn wait_released(&self, name: &str, from: WaitFrom, max: Duration) -> Result<(), StoreError> {
        self.wait_deleted(&self.cfg.lock_key(name), from.0, max).await
    }

    async fn blacklist(&self, entry: &BlacklistRecord) -> Result<Blacklisting, StoreError> {
        // Created only if absent; otherwise the same transaction reads the entry there.
        let key = self.cfg.blacklist_key(&entry.session);
        let txn = Txn::new()
            .when([absent(&key)])
            .and_then([TxnOp::put(key.clone(), json_of(entry), None)])
            .or_else([TxnOp::get(key, None)]);
        let resp = self.txn(txn).await?;
        if resp.succeeded() {
            return Ok(Blacklisting::Written);
        }
        Ok(Blacklisting::Exists(
            read(&resp, 0).first().map(|kv| Stored::parse(kv.value())),
        ))
    }

    async fn session_registered(&self, session: &str) -> Result<bool, StoreError> {
        let key = self.cfg.session_key(session);
        let opts = GetOptions::new().with_count_only();
        let resp = timed(self.cfg.request_timeout, self.client.clone().get(key, Some(opts))).await?;
        Ok(resp.count() > 0)
    }

    async fn lift_blacklist(&self, session: &str) -> Result<bool, StoreError> {
        let key = self.cfg.blacklist_key(session);
        let resp = timed(self.cfg.request_timeout, self.client.clone().delete(key, None)).await?;
        Ok(resp.deleted() > 0)
    }

    async fn get(&self, name: &str) -> Result<Option<LockEntry>, StoreError> {
        let key = self.cfg.lock_key(name);
        let resp = timed(
            self.cfg.request_timeout,
            self.client.clone().get(key, None::<GetOptions>),
        )
        .await?;
        Ok(resp.kvs().first().map(|kv| self.entry(name, kv)))
    }
}
