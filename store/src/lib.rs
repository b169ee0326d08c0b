//! The lockscope lock protocol over lock stores (`docs/protocol.md`).
//!
//! Two roles, each behind its own API:
//! - the **client library** services link to ([`client::Session`] over a
//!   [`protocol::LockStore`] such as [`etcd::EtcdLocks`]);
//! - the **observer side** the dashboard runs ([`Observer`]): a snapshot, then a
//!   stream of [`ObserverEvent`]s, reconnecting by itself.
//!
//! Layout:
//! - [`protocol`]: the per-store operations of the lock protocol ([`protocol::LockStore`]).
//! - [`client`]: the client library on top of any [`protocol::LockStore`]: sessions,
//!   `lock` with a deadline, batch try-lock, heartbeats, guards.
//! - [`etcd`]: the etcd v3 adapter (observer + [`protocol::LockStore`]).
//! - [`sql`]: SQLite and PostgreSQL ([`protocol::LockStore`]; observer to come).
//! - [`backoff`]: capped, jittered reconnect delays.
//! - `testing` (feature `test-util`): a real etcd on a free port, and a TCP proxy
//!   that can cut connections, for integration tests.

pub mod backoff;
pub mod client;
pub mod etcd;
mod link;
pub mod protocol;
pub mod sql;
#[cfg(feature = "test-util")]
pub mod testing;

use futures::future::BoxFuture;
use lockscope_model::{FleetEvent, StoreStatus};
use tokio::sync::mpsc;

/// What went wrong talking to a store. Every adapter maps its client's errors here.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("store unreachable: {0}")]
    Unreachable(String),
    #[error("store request timed out after {0:?}")]
    Timeout(std::time::Duration),
    #[error("store error: {0}")]
    Backend(String),
    #[error("invalid lock name {name:?}: {reason}")]
    InvalidName { name: String, reason: &'static str },
    #[error("session {session} is blacklisted")]
    Blacklisted { session: String },
    #[error("session {session} expired in the store (no heartbeat within its ttl)")]
    SessionExpired { session: String },
    #[error("lock {name} was lost: it is no longer this acquisition")]
    Lost { name: String },
    #[error("lock {name} not acquired within the {deadline:?} deadline")]
    Deadline {
        name: String,
        deadline: std::time::Duration,
    },
}

impl From<etcd_client::Error> for StoreError {
    fn from(e: etcd_client::Error) -> Self {
        match e {
            etcd_client::Error::TransportError(t) => StoreError::Unreachable(t.to_string()),
            etcd_client::Error::IoError(io) => StoreError::Unreachable(io.to_string()),
            // tonic reports a refused or dropped connection as this status.
            etcd_client::Error::GRpcStatus(s) if s.code() == tonic::Code::Unavailable => {
                StoreError::Unreachable(s.message().to_string())
            }
            other => StoreError::Backend(other.to_string()),
        }
    }
}

/// What an observer reports to the hub.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ObserverEvent {
    /// Table changes, in store order. The first batch after (re)connecting without
    /// history is a single [`FleetEvent::Reset`].
    Events(Vec<FleetEvent>),
    Status(StoreStatus),
}

/// The observer role: watches one fleet's locks and reports them.
pub trait Observer: Send + 'static {
    /// Runs until `events` is closed, reconnecting on its own; it never returns an
    /// error because every failure becomes a [`StoreStatus::Unreachable`] report.
    fn run(self: Box<Self>, events: mpsc::Sender<ObserverEvent>) -> BoxFuture<'static, ()>;
}

/// Lock names: 1 to 512 bytes of UTF-8 without control characters.
pub fn validate_name(name: &str) -> Result<(), StoreError> {
    let reason = if name.is_empty() {
        "empty"
    } else if name.len() > 512 {
        "longer than 512 bytes"
    } else if name.chars().any(char::is_control) {
        "contains a control character"
    } else {
        return Ok(());
    };
    Err(StoreError::InvalidName {
        name: name.to_string(),
        reason,
    })
}

/// This host's wall clock in unix ms.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
