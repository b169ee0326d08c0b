//! The lock protocol's operations on SQL ([`LockStore`] for [`SqlLocks`]): each
//! one statement that compares what it must (free / our fence / not
//! blacklisted), as `docs/protocol.md` ("SQL") lists them.

use std::time::Duration;

use lockscope_model::record::{BlacklistRecord, SessionRecord, Stored};
use lockscope_model::{LockEntry, LockRecord};
use sqlx::Row;
use tokio::sync::broadcast;

use super::{entry_of, json_of, Change, SqlLocks};
use crate::fleet::Removed;
use crate::protocol::{Attempt, Blacklisting, Extend, LockStore, SessionLease, WaitFrom};
use crate::{validate_name, StoreError};

/// Release: frees lock `$1` only if fence `$2` holds it. The unlocker's fenced
/// release adds a condition on its leadership (`unlocker`).
pub(super) const RELEASE: &str = "UPDATE lockscope_locks \
     SET owner = NULL, session = NULL, record = NULL, revision = revision + 1 \
     WHERE name = $1 AND fence = $2 AND owner IS NOT NULL";

/// What a release statement (the [`RELEASE`] above, or the unlocker's) is
/// followed by to say which row version it freed: the revision the observer
/// reports in its `FleetEvent::Remove` of that release.
pub(super) const RETURNING_REVISION: &str = " RETURNING revision";

impl SqlLocks {
    /// The protocol's release, saying what it removed: the freed row's new
    /// revision (`None`: nothing freed).
    pub async fn release_removing(&self, name: &str, fence: i64) -> Result<Option<Removed>, StoreError> {
        validate_name(name)?;
        let q = self.sql_owned(format!("{RELEASE}{RETURNING_REVISION}"));
        let row = self.one(sqlx::query(&q).bind(name).bind(fence)).await?;
        removed(row)
    }

    /// Every lock row's fencing counter, held or free (a row outlives its
    /// releases and its counter grows by one per acquisition): how many
    /// acquisitions each name has had.
    pub async fn fences(&self) -> Result<Vec<(String, i64)>, StoreError> {
        let q = self.sql("SELECT name, fence FROM lockscope_locks");
        let rows = sqlx::query(&q).fetch_all(&self.pool).await?;
        rows.iter().map(|r| Ok((r.try_get(0)?, r.try_get(1)?))).collect()
    }
}

/// The release a `… RETURNING revision` statement made, from its row.
pub(super) fn removed(row: Option<sqlx::any::AnyRow>) -> Result<Option<Removed>, StoreError> {
    Ok(match row {
        Some(r) => Some(Removed {
            revision: Some(r.try_get(0)?),
        }),
        None => None,
    })
}

/// Open a session (`$1` id, `$2` record, `$3` expires_at): no row → blacklisted.
pub(super) const OPEN_SESSION: &str = "INSERT INTO lockscope_sessions (session, record, waiting_for, expires_at) \
     SELECT $1, $2, NULL, $3 WHERE NOT EXISTS (SELECT 1 FROM lockscope_blacklist WHERE session = $1) \
     ON CONFLICT (session) DO UPDATE SET record = excluded.record, expires_at = excluded.expires_at";

/// Session heartbeat (`$1` record, `$2` expires_at, `$3` id): no row → blacklisted
/// or gone (register again).
pub(super) const SESSION_HEARTBEAT: &str = "UPDATE lockscope_sessions SET record = $1, expires_at = $2 \
     WHERE session = $3 AND NOT EXISTS (SELECT 1 FROM lockscope_blacklist WHERE session = $3)";

/// Start (`$1` the name) or stop (`$1` NULL) waiting, for session `$2`.
pub(super) const SET_WAITING: &str = "UPDATE lockscope_sessions SET waiting_for = $1 WHERE session = $2";

/// Close a session.
pub(super) const CLOSE_SESSION: &str = "DELETE FROM lockscope_sessions WHERE session = $1";

/// Acquire: a returned row means acquired, with its fencing token.
pub(super) const ACQUIRE: &str = "INSERT INTO lockscope_locks (name, fence, owner, session, record, revision) \
     SELECT $1, 1, $2, $3, $4, 1 WHERE NOT EXISTS (SELECT 1 FROM lockscope_blacklist WHERE session = $3) \
     ON CONFLICT (name) DO UPDATE SET fence = lockscope_locks.fence + 1, owner = excluded.owner, \
     session = excluded.session, record = excluded.record, revision = lockscope_locks.revision + 1 \
     WHERE lockscope_locks.owner IS NULL \
     RETURNING fence";

/// Extend: 0 rows → blacklisted (if its row exists) or lost.
pub(super) const EXTEND: &str = "UPDATE lockscope_locks SET record = $1, revision = revision + 1 \
     WHERE name = $2 AND fence = $3 AND owner IS NOT NULL \
     AND NOT EXISTS (SELECT 1 FROM lockscope_blacklist WHERE session = $4)";

/// Is session `$1` blacklisted?
pub(super) const IS_BLACKLISTED: &str = "SELECT 1 FROM lockscope_blacklist WHERE session = $1";

/// Every statement of the protocol's writes, as `docs/protocol.md` ("SQL") quotes them.
#[cfg(test)]
const ALL: &[&str] = &[
    OPEN_SESSION,
    SESSION_HEARTBEAT,
    SET_WAITING,
    CLOSE_SESSION,
    ACQUIRE,
    EXTEND,
    RELEASE,
    IS_BLACKLISTED,
];

impl LockStore for SqlLocks {
    async fn open_session(&self, session: &SessionRecord, ttl: Duration) -> Result<SessionLease, StoreError> {
        let q = self.sql(OPEN_SESSION);
        // On the holder's clock, from the record's own heartbeat_at, so that an
        // observer reads the ttl back exactly (expires_at - heartbeat_at).
        let expires = session.heartbeat_at + ttl.as_millis() as i64;
        let r = self
            .exec(
                sqlx::query(&q)
                    .bind(&session.session)
                    .bind(json_of(session))
                    .bind(expires),
            )
            .await?;
        if r.rows_affected() == 0 {
            return Err(StoreError::Blacklisted {
                session: session.session.clone(),
            });
        }
        Ok(SessionLease(ttl.as_millis() as i64))
    }

    async fn session_heartbeat(&self, lease: SessionLease, session: &SessionRecord) -> Result<(), StoreError> {
        let q = self.sql(SESSION_HEARTBEAT);
        let expires = session.heartbeat_at + lease.0;
        let r = self
            .exec(
                sqlx::query(&q)
                    .bind(json_of(session))
                    .bind(expires)
                    .bind(&session.session),
            )
            .await?;
        if r.rows_affected() == 1 {
            Ok(())
        } else if self.blacklisted(&session.session).await? {
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
        let q = self.sql(CLOSE_SESSION);
        self.exec(sqlx::query(&q).bind(session)).await?;
        Ok(())
    }

    async fn try_acquire(&self, name: &str, record: &LockRecord) -> Result<Attempt, StoreError> {
        validate_name(name)?;
        let q = self.sql(ACQUIRE);
        let json = String::from_utf8(record.to_json()).expect("JSON is UTF-8");
        let row = self
            .one(
                sqlx::query(&q)
                    .bind(name)
                    .bind(&record.owner)
                    .bind(&*record.session)
                    .bind(json),
            )
            .await?;
        if let Some(row) = row {
            return Ok(Attempt::Acquired {
                fence: row.try_get::<i64, _>(0)?,
            });
        }
        if self.blacklisted(&record.session).await? {
            return Err(StoreError::Blacklisted {
                session: record.session.to_string(),
            });
        }
        let holder = self.get(name).await?;
        Ok(Attempt::Busy {
            from: WaitFrom(holder.as_ref().map_or(0, |h| h.revision)),
            holder,
        })
    }

    async fn extend(&self, name: &str, fence: i64, record: &LockRecord) -> Result<Extend, StoreError> {
        let q = self.sql(EXTEND);
        let json = String::from_utf8(record.to_json()).expect("JSON is UTF-8");
        let r = self
            .exec(sqlx::query(&q).bind(json).bind(name).bind(fence).bind(&*record.session))
            .await?;
        Ok(if r.rows_affected() == 1 {
            Extend::Extended
        } else if self.blacklisted(&record.session).await? {
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
        _lease: SessionLease,
        session: &str,
        name: &str,
        waiting: bool,
    ) -> Result<(), StoreError> {
        let q = self.sql(SET_WAITING);
        self.exec(sqlx::query(&q).bind(waiting.then(|| name.to_string())).bind(session))
            .await?;
        Ok(())
    }

    async fn wait_released(&self, name: &str, from: WaitFrom, max: Duration) -> Result<(), StoreError> {
        match &self.notified {
            Some(tx) => {
                // Subscribe first, then look: a release between the failed attempt
                // and now is seen by the look, a later one by the notification.
                let mut rx = tx.subscribe();
                if self.get(name).await?.is_none_or(|h| h.revision != from.0) {
                    return Ok(());
                }
                // Re-check at least every 10 s in case a notification was lost.
                let wait = async {
                    loop {
                        match rx.recv().await {
                            Ok(Change::Lock(n)) if n == name => return,
                            // Notifications may have been missed: look again.
                            Ok(Change::Lost) => return,
                            Ok(_) => {}
                            Err(broadcast::error::RecvError::Lagged(_)) => return,
                            Err(broadcast::error::RecvError::Closed) => return,
                        }
                    }
                };
                let _ = tokio::time::timeout(max.min(Duration::from_secs(10)), wait).await;
                Ok(())
            }
            None => {
                // No notifications: jittered backoff, 25–250 ms.
                let pause = Duration::from_millis(25 + fastrand::u64(0..225));
                tokio::time::sleep(pause.min(max)).await;
                Ok(())
            }
        }
    }

    async fn blacklist(&self, entry: &BlacklistRecord) -> Result<Blacklisting, StoreError> {
        // Created only if absent: an entry already there is kept as it is.
        let q = self.sql(
            "INSERT INTO lockscope_blacklist (session, record) VALUES ($1, $2) \
             ON CONFLICT (session) DO NOTHING",
        );
        let r = self
            .exec(sqlx::query(&q).bind(&entry.session).bind(json_of(entry)))
            .await?;
        if r.rows_affected() == 1 {
            return Ok(Blacklisting::Written);
        }
        let q = self.sql("SELECT record FROM lockscope_blacklist WHERE session = $1");
        let row = self.one(sqlx::query(&q).bind(&entry.session)).await?;
        let record = row.map(|r| r.try_get::<String, _>(0)).transpose()?;
        Ok(Blacklisting::Exists(record.map(|r| Stored::parse(r.as_bytes()))))
    }

    async fn session_registered(&self, session: &str) -> Result<bool, StoreError> {
        let q = self.sql("SELECT 1 FROM lockscope_sessions WHERE session = $1");
        Ok(self.one(sqlx::query(&q).bind(session)).await?.is_some())
    }

    async fn lift_blacklist(&self, session: &str) -> Result<bool, StoreError> {
        let q = self.sql("DELETE FROM lockscope_blacklist WHERE session = $1");
        Ok(self.exec(sqlx::query(&q).bind(session)).await?.rows_affected() > 0)
    }

    async fn get(&self, name: &str) -> Result<Option<LockEntry>, StoreError> {
        let q =
            self.sql("SELECT name, fence, revision, record FROM lockscope_locks WHERE name = $1 AND owner IS NOT NULL");
        self.one(sqlx::query(&q).bind(name))
            .await?
            .as_ref()
            .map(entry_of)
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    /// docs/protocol.md ("SQL") quotes every statement of the protocol's writes,
    /// sessions included: none is sent undocumented.
    #[test]
    fn the_protocol_document_quotes_every_statement() {
        let flat = |t: &str| t.split_whitespace().collect::<Vec<_>>().join(" ");
        let doc = flat(include_str!("../../../docs/protocol.md"));
        for stmt in super::ALL {
            let text = flat(stmt);
            assert!(doc.contains(&text), "docs/protocol.md does not quote: {text}");
        }
    }
}
