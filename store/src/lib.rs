//! The lockscope lock protocol over lock stores (`docs/protocol.md`).
//!
//! Two roles, each behind its own API:
//! - the **client library** services link to ([`client::Session`] over a
//!   [`protocol::LockStore`] such as [`etcd::EtcdLocks`]);
//! - the **dashboard's side**, one [`fleet::FleetStore`] per fleet: an
//!   [`Observer`] (a snapshot, then a stream of [`ObserverEvent`]s, reconnecting
//!   by itself), the guarded admin actions, and the election of the one replica
//!   that auto-releases expired locks ([`fleet::FleetStore::campaign`]).
//!
//! Layout:
//! - [`protocol`]: the per-store operations of the lock protocol ([`protocol::LockStore`]).
//! - [`client`]: the client library on top of any [`protocol::LockStore`]: sessions,
//!   `lock` with a deadline, batch try-lock, heartbeats, guards.
//! - [`etcd`]: the etcd v3 adapter (observer + [`protocol::LockStore`]).
//! - [`etcd_mutex`]: etcd's native mutexes and elections (`etcdctl lock`),
//!   observed and guarded-released as a fleet of foreign locks.
//! - [`redis_set`]: Redis `SET key token NX PX ms` locks (redis-py's `Lock`,
//!   redsync), observed and guarded-released as a fleet of foreign locks.
//! - [`zookeeper`]: ZooKeeper lock recipes (kazoo's `Lock`, Curator's
//!   `InterProcessMutex`, the documented recipe), observed and guarded-released.
//! - [`pg_advisory`]: PostgreSQL advisory locks (`pg_locks`), polled, the
//!   holder's backend terminated by a guarded release.
//! - [`sql`]: SQLite and PostgreSQL (observer + [`protocol::LockStore`]), and the
//!   read-only ShedLock observer.
//! - [`scylla`]: ScyllaDB / Cassandra LWT tables, the published schema and
//!   lockscope's superset (observer + [`protocol::LockStore`]), over one narrow
//!   CQL executor with an in-memory implementation for tests.
//! - [`spec`]: a store as configured (`etcd:…`, `sqlite:…`, `postgres://…`,
//!   `shedlock+…`), parsed once, and what it opens: the per-fleet handle
//!   ([`fleet::FleetStore`]) and a lock store for the client library
//!   ([`spec::AnyLocks`]).
//! - [`backoff`]: capped, jittered reconnect delays.
//! - [`liveness`]: the bounded probe every observer runs beside its session, so
//!   a store that went away silently reads unreachable within 3 s.
//! - [`summary`]: a failure said in one line for people (what was tried, what
//!   went wrong at the root), with the whole chain as the detail.
//! - `testing` (feature `test-util`): a real etcd on a free port, and a TCP proxy
//!   that can cut connections, for integration tests.

pub mod backoff;
pub mod client;
pub mod etcd;
pub mod etcd_mutex;
pub mod fleet;
mod link;
pub mod liveness;
pub mod pg_advisory;
pub mod protocol;
pub mod redis_set;
pub mod redlock;
pub mod scylla;
pub mod spec;
pub mod sql;
pub mod summary;
#[cfg(feature = "test-util")]
pub mod testing;
pub mod zookeeper;

use futures::future::BoxFuture;
use lockscope_model::{FleetEvent, Snapshot, StoreStatus};
use tokio::sync::mpsc;

/// The underlying error a [`StoreError`] keeps as its source.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What went wrong talking to a store. Every adapter maps its client's errors
/// here, keeping the client's error as the source; [`StoreError::Config`] is a
/// mistake in what we were told to connect to, never a transport failure.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{0}")]
    Config(String),
    #[error("store unreachable: {what}")]
    Unreachable {
        what: String,
        #[source]
        source: Option<BoxError>,
    },
    #[error("store request timed out after {0:?}")]
    Timeout(std::time::Duration),
    /// The store is reachable but did not take the write: another connection
    /// held its write lock past the busy timeout (SQLite's `SQLITE_BUSY`).
    /// Nothing was written.
    #[error("store busy: {what}")]
    Busy {
        what: String,
        #[source]
        source: Option<BoxError>,
    },
    #[error("store error: {what}")]
    Backend {
        what: String,
        #[source]
        source: Option<BoxError>,
    },
    #[error("{store} is read-only: lockscope only observes it")]
    ReadOnly { store: String },
    /// The store's layout has no such thing to act on (Redis has no sessions
    /// to blacklist): nothing was done, and the text says why.
    #[error("{0}")]
    Unsupported(&'static str),
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

impl StoreError {
    /// A failure of the store or its client, with the client's error as source.
    pub fn backend(what: impl Into<String>, source: impl Into<BoxError>) -> StoreError {
        StoreError::Backend {
            what: what.into(),
            source: Some(source.into()),
        }
    }

    /// A failure described by lockscope alone.
    pub fn backend_msg(what: impl Into<String>) -> StoreError {
        StoreError::Backend {
            what: what.into(),
            source: None,
        }
    }

    pub fn unreachable(what: impl Into<String>, source: impl Into<BoxError>) -> StoreError {
        StoreError::Unreachable {
            what: what.into(),
            source: Some(source.into()),
        }
    }

    pub fn unreachable_msg(what: impl Into<String>) -> StoreError {
        StoreError::Unreachable {
            what: what.into(),
            source: None,
        }
    }

    /// The same failure, said of `what` (a store failure keeps its source; other
    /// errors are returned as they are).
    pub fn of(self, what: impl Into<String>) -> StoreError {
        match self {
            StoreError::Backend { source, .. } => StoreError::Backend {
                what: what.into(),
                source,
            },
            StoreError::Unreachable { source, .. } => StoreError::Unreachable {
                what: what.into(),
                source,
            },
            StoreError::Busy { source, .. } => StoreError::Busy {
                what: what.into(),
                source,
            },
            other => other,
        }
    }

    /// The error and its sources, one line, for logs (the page shows
    /// [`StoreError::summary`]).
    pub fn describe(&self) -> String {
        summary::texts(&summary::chain(self)).join(": ")
    }
}

impl From<etcd_client::Error> for StoreError {
    fn from(e: etcd_client::Error) -> Self {
        let unreachable = match &e {
            etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => true,
            // tonic reports a refused or dropped connection as this status.
            etcd_client::Error::GRpcStatus(s) => s.code() == tonic::Code::Unavailable,
            _ => false,
        };
        if unreachable {
            StoreError::unreachable("etcd", e)
        } else {
            StoreError::backend("etcd", e)
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
    /// A polled or rescanned fleet read its store in full (after each poll
    /// or reconciling rescan): the overview says when, and past 3× the
    /// interval that the table is not live.
    Looked(lockscope_model::polled::Polled),
    /// For the history only, never the live table: what the store changed while
    /// no dashboard watched, sent before the first snapshot by an observer told
    /// where the history stopped ([`Observer::resume_history`]). `base` is the
    /// store at that revision, `events` every change after it up to the first
    /// snapshot's revision, in store order.
    Missed {
        base: Snapshot,
        events: Vec<FleetEvent>,
    },
}

/// The observer role: watches one fleet (locks, waiters, sessions, blacklist)
/// and reports it to the hub.
///
/// The contract every store's observer keeps (the contract suite's observer
/// cases check it, `testing::contract::observer_*`):
/// - **Reset**: the first batch after (re)connecting without history is a single
///   [`FleetEvent::Reset`] carrying the whole truth at one instant: every lock
///   (a value that is not a record this build reads arrives as malformed, never
///   dropped), every waiter, every live session (`None` for a store that keeps
///   no sessions, such as ShedLock) and the blacklist. The hub's reducer turns
///   it into the difference from what it showed, so an observer may send a
///   reset whenever it cannot tell what changed (after a compaction, a row
///   deleted by hand, missed notifications, a periodic reconcile).
/// - **Events** follow in store order, each lock change carrying a `revision`
///   that only grows for that lock, so a replayed or reordered event for one
///   lock changes nothing. What `revision` is: etcd, the key's `mod_revision`
///   (one counter for the whole store); SQL, the lock row's own counter, bumped
///   by every write to the row; ShedLock, a counter this observer keeps. A
///   reset's revision is etcd's read revision, SQLite's change counter, or a
///   count of full reads (PostgreSQL, ShedLock): it only orders resets.
/// - **Sessions**: a session appears when registered, is re-sent on every
///   heartbeat (stamped with this server's receive time, for the skew
///   estimate), and is reported gone when the store says so (etcd: its lease
///   ended) or, where the store cannot (SQL), when this observer has seen no
///   heartbeat for the session's own ttl on its monotonic clock. Clocks of two
///   hosts are never compared.
/// - **Status**: `Connecting`, then `Live` once the snapshot is sent and changes
///   are followed, `Unreachable` (with the error and the next retry) on any
///   failure; what was shown stays shown, marked as the last known truth.
pub trait Observer: Send + 'static {
    /// Runs until `events` is closed, reconnecting on its own; it never returns an
    /// error because every failure becomes a [`StoreStatus::Unreachable`] report.
    fn run(self: Box<Self>, events: mpsc::Sender<ObserverEvent>) -> BoxFuture<'static, ()>;

    /// The history recorded this store up to `revision`: before its first
    /// snapshot, send what changed since as [`ObserverEvent::Missed`], where
    /// the store still has it. Whether this store can (etcd: one revision for
    /// the whole store, and a watch can start in the past until compaction;
    /// the others cannot, and the history records a gap instead).
    fn resume_history(&mut self, revision: i64) -> bool {
        let _ = revision;
        false
    }
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

/// A foreign lock's bytes as shown: lossy UTF-8 cut to at most `max` bytes
/// on a character boundary (`None`: empty). One place for the families'
/// display bounds (an etcd election's proposal, a ZooKeeper node's data).
pub(crate) fn shown_text(data: &[u8], max: usize) -> Option<String> {
    if data.is_empty() {
        return None;
    }
    let mut text = String::from_utf8_lossy(data).into_owned();
    if text.len() > max {
        let mut cut = max;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
    }
    Some(text)
}

/// This host's wall clock in unix ms.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
