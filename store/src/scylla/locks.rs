//! The lock protocol's operations on ScyllaDB ([`LockStore`] for
//! [`ScyllaLocks`]), as `docs/protocol.md` ("ScyllaDB and Cassandra") lists them: every
//! write a lightweight transaction that compares what it must.
//!
//! What one partition's LWT cannot check (the blacklist lives in other
//! partitions), is checked by a read before and after: a session blacklisted
//! between the two can take or extend a lock once more, after which its
//! heartbeat (an LWT on its own row, which carries the blacklist mark) is
//! refused and its client stops.

use std::time::Duration;

use lockscope_model::record::{BlacklistRecord, SessionRecord};
use lockscope_model::{LockEntry, LockRecord};

use super::cql::{col, Schema, Stmt, Value};
use super::{entry_of, ScyllaLocks, REVISION_STRIDE};
use crate::protocol::{Attempt, Blacklisting, Extend, LockStore, SessionLease, WaitFrom};
use crate::{validate_name, StoreError};

/// A blocked acquirer's pause between two looks (no notifications on this
/// store): uniformly jittered in this range, so about 3.6 looks per second.
pub const WAIT_MIN: Duration = Duration::from_millis(50);
pub const WAIT_MAX: Duration = Duration::from_millis(500);

impl ScyllaLocks {
    /// Reads the lock at SERIAL (it sees every committed LWT).
    async fn read(&self, name: &str) -> Result<Option<LockEntry>, StoreError> {
        let stmt = match self.schema {
            Schema::Superset => Stmt::LockGet,
            Schema::Published => Stmt::LockGetPublished,
        };
        let rows = self.run(stmt, vec![Value::text(name)]).await?;
        Ok(rows.first().and_then(entry_of))
    }

    /// Sends an LWT on lock `name`'s row; when its outcome is unknown (a
    /// timeout: it may have been applied), reads the row back at SERIAL and
    /// takes `ours` of it as the answer, so that a lock taken is never left
    /// held without its taker knowing. The read's own failure returns the
    /// LWT's error (the lock then runs out, and the unlocker releases it).
    async fn lwt_or_read_back(
        &self,
        name: &str,
        ours: impl Fn(&LockEntry) -> bool,
        stmt: Stmt,
        values: Vec<Value>,
    ) -> Result<bool, StoreError> {
        match self.lwt(stmt, values).await {
            Ok(applied) => Ok(applied),
            Err(e) => match self.read(name).await {
                Ok(row) => Ok(row.as_ref().is_some_and(ours)),
                Err(_) => Err(e),
            },
        }
    }

    /// A guarded release of a row a published client wrote, which has no fencing token:
    /// the acquisition is named by its holder and row time (what
    /// [`super::foreign_entry`] shows as its fence).
    async fn release_published(&self, name: &str, written_at: i64) -> Result<bool, StoreError> {
        let Some(now) = self.read(name).await? else {
            return Ok(false);
        };
        let session = match &now.body {
            lockscope_model::LockBody::Foreign {
                session: Some(session), ..
            } if now.fence == written_at => session.clone(),
            _ => return Ok(false),
        };
        self.lwt(
            Stmt::ReleasePublished,
            vec![Value::text(name), Value::Text(session), Value::Timestamp(written_at)],
        )
        .await
    }
}

impl LockStore for ScyllaLocks {
    async fn open_session(&self, session: &SessionRecord, ttl: Duration) -> Result<SessionLease, StoreError> {
        self.superset("a session")?;
        let blacklisted = || StoreError::Blacklisted {
            session: session.session.clone(),
        };
        if self.blacklisted(&session.session).await? {
            return Err(blacklisted());
        }
        let ttl_ms = (ttl.as_millis() as i64).max(1);
        let (at, record) = Self::session_values(session);
        let opened = self
            .lwt(
                Stmt::SessionOpen,
                vec![
                    Value::text(&session.session),
                    at,
                    record,
                    Value::BigInt(ttl_ms),
                    Value::Int(Self::session_lease_ttl(ttl_ms)),
                ],
            )
            .await?;
        if !opened {
            return Err(StoreError::backend_msg(format!(
                "session id {} is already registered",
                session.session
            )));
        }
        // Blacklisted between the look and the insert: its row missed the mark.
        if self.blacklisted(&session.session).await? {
            let _ = self.close_session(SessionLease(ttl_ms), &session.session).await;
            return Err(blacklisted());
        }
        Ok(SessionLease(ttl_ms))
    }

    async fn session_heartbeat(&self, lease: SessionLease, session: &SessionRecord) -> Result<(), StoreError> {
        let (at, record) = Self::session_values(session);
        let id = Value::text(&session.session);
        let beat = self
            .lwt(
                Stmt::SessionBeat,
                vec![
                    Value::Int(Self::session_lease_ttl(lease.0)),
                    at,
                    record,
                    Value::BigInt(lease.0),
                    // Rewritten with the others, so that it keeps their TTL.
                    session.waiting_for.clone().map_or(Value::Null, Value::Text),
                    id.clone(),
                    Value::BigInt(lease.0),
                ],
            )
            .await?;
        if beat {
            return Ok(());
        }
        let rows = self.run(Stmt::SessionGet, vec![id]).await?;
        let marked = rows.first().is_some_and(|r| col(r, "blacklisted") != &Value::Null);
        if marked || self.blacklisted(&session.session).await? {
            Err(StoreError::Blacklisted {
                session: session.session.clone(),
            })
        } else {
            Err(StoreError::SessionExpired {
                session: session.session.clone(),
            })
        }
    }

    async fn close_session(&self, _lease: SessionLease, session: &str) -> Result<(), StoreError> {
        self.lwt(Stmt::SessionClose, vec![Value::text(session)]).await?;
        Ok(())
    }

    async fn try_acquire(&self, name: &str, record: &LockRecord) -> Result<Attempt, StoreError> {
        validate_name(name)?;
        self.superset("taking a lock")?;
        let blacklisted = || StoreError::Blacklisted {
            session: record.session.to_string(),
        };
        if self.blacklisted(&record.session).await? {
            return Err(blacklisted());
        }
        let busy = |holder: Option<LockEntry>| Attempt::Busy {
            from: WaitFrom(holder.as_ref().map_or(0, |h| h.revision)),
            holder,
        };
        // A held lock costs one read, not a fencing token.
        if let Some(holder) = self.read(name).await? {
            return Ok(busy(Some(holder)));
        }
        let fence = self.claim_fence(name).await?;
        let json = String::from_utf8(record.to_json()).expect("JSON is UTF-8");
        let inserted = self
            .lwt_or_read_back(
                name,
                |row| row.record().is_some_and(|r| r.owner == record.owner),
                Stmt::Acquire,
                vec![
                    Value::text(name),
                    Value::text(&*record.session),
                    Value::Timestamp(record.acquired_at),
                    Value::BigInt(fence),
                    Value::BigInt(fence * REVISION_STRIDE),
                    Value::Text(json),
                ],
            )
            .await?;
        if !inserted {
            return Ok(busy(self.read(name).await?));
        }
        // Another acquirer may have claimed a later token before ours was in
        // the row, and held the lock with it already: holding with ours would
        // make the tokens go backwards. The row is ours now (no one else can
        // insert), so take a token later than every claim so far and move the
        // row onto it, until no claim overtook it. Nobody has been told the
        // old token, so nothing was fenced with it.
        let mut fence = fence;
        while self.fence_now(name).await? != Some(fence) {
            let later = self.claim_fence(name).await?;
            let moved = self
                .lwt_or_read_back(
                    name,
                    |row| row.fence == later,
                    Stmt::Refence,
                    vec![
                        Value::BigInt(later),
                        Value::BigInt(later * REVISION_STRIDE),
                        Value::text(name),
                        Value::BigInt(fence),
                    ],
                )
                .await?;
            if !moved {
                // Force-released meanwhile.
                return Ok(busy(self.read(name).await?));
            }
            fence = later;
        }
        if self.blacklisted(&record.session).await? {
            self.release(name, fence).await?;
            return Err(blacklisted());
        }
        Ok(Attempt::Acquired { fence })
    }

    async fn extend(&self, name: &str, fence: i64, record: &LockRecord) -> Result<Extend, StoreError> {
        let json = String::from_utf8(record.to_json()).expect("JSON is UTF-8");
        loop {
            if self.blacklisted(&record.session).await? {
                return Ok(Extend::Blacklisted);
            }
            let Some(now) = self.read(name).await?.filter(|e| e.fence == fence) else {
                return Ok(Extend::Lost);
            };
            if now.revision + 1 >= (fence + 1) * REVISION_STRIDE {
                return Err(StoreError::backend_msg(format!(
                    "lock {name} was extended 2^24 times in one acquisition: release it and take it again"
                )));
            }
            let extended = self
                .lwt(
                    Stmt::Extend,
                    vec![
                        Value::text(&json),
                        Value::BigInt(now.revision + 1),
                        Value::text(name),
                        Value::BigInt(fence),
                        Value::BigInt(now.revision),
                    ],
                )
                .await?;
            if extended {
                return Ok(Extend::Extended);
            }
            // The row moved between the read and the write: read it again.
        }
    }

    async fn release(&self, name: &str, fence: i64) -> Result<bool, StoreError> {
        validate_name(name)?;
        if self.schema == Schema::Superset
            && self
                .lwt(Stmt::Release, vec![Value::text(name), Value::BigInt(fence)])
                .await?
        {
            return Ok(true);
        }
        // A row a published client wrote (on either schema) has no fence: its
        // acquisition is named by holder and time.
        self.release_published(name, fence).await
    }

    async fn set_waiting(
        &self,
        lease: SessionLease,
        session: &str,
        name: &str,
        waiting: bool,
    ) -> Result<(), StoreError> {
        // Refused only when the row is gone (expired): the heartbeat reports that.
        self.lwt(
            Stmt::SessionWaiting,
            vec![
                Value::Int(Self::session_lease_ttl(lease.0)),
                if waiting { Value::text(name) } else { Value::Null },
                Value::text(session),
                Value::BigInt(lease.0),
            ],
        )
        .await?;
        Ok(())
    }

    async fn wait_released(&self, _name: &str, _from: WaitFrom, max: Duration) -> Result<(), StoreError> {
        // No notifications: a jittered pause, then the caller looks again.
        let span = (WAIT_MAX - WAIT_MIN).as_millis() as u64;
        let pause = WAIT_MIN + Duration::from_millis(fastrand::u64(0..=span));
        tokio::time::sleep(pause.min(max)).await;
        Ok(())
    }

    async fn blacklist(&self, entry: &BlacklistRecord) -> Result<Blacklisting, StoreError> {
        self.put_blacklist(entry).await
    }

    async fn session_registered(&self, session: &str) -> Result<bool, StoreError> {
        self.registered(session).await
    }

    async fn lift_blacklist(&self, session: &str) -> Result<bool, StoreError> {
        self.superset("a blacklist")?;
        let lifted = self.lwt(Stmt::BlacklistDelete, vec![Value::text(session)]).await?;
        self.lwt(Stmt::SessionMark, vec![Value::Null, Value::text(session)])
            .await?;
        Ok(lifted)
    }

    async fn get(&self, name: &str) -> Result<Option<LockEntry>, StoreError> {
        self.read(name).await
    }
}
