//! One lock as a store shows it ([`LockEntry`]): its name, fencing token,
//! revision, and what its value holds ([`LockBody`]): a lockscope record, a
//! value that is not one, or a foreign schema's row.

use serde::{Deserialize, Serialize};

use crate::record::{LockRecord, Stored};
use crate::time::Millis;

/// One key under `<prefix>locks/`, as the store last showed it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LockEntry {
    /// The lock's name (the key without `<prefix>locks/`).
    pub name: String,
    /// Fencing token: grows with every acquisition of this lock (etcd: `create_revision`).
    pub fence: i64,
    /// Store revision of the value shown (etcd: `mod_revision`; SQL: the row's
    /// own counter). Events compare on it to drop stale ones; a guarded release
    /// compares on `fence`.
    pub revision: i64,
    pub body: LockBody,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum LockBody {
    Held(LockRecord),
    /// The key exists but its value is not a record this build understands. Shown
    /// as such (the lock is still held as far as the store is concerned).
    Malformed {
        /// The stored bytes, cut to [`MALFORMED_KEEP_BYTES`].
        raw: Vec<u8>,
        error: String,
    },
    /// Held, written by a client of a schema that keeps less than a lockscope record
    /// (ScyllaDB's published `tokens` table): only the holder's session and the row's
    /// write time are known; every other field is unknown, never invented.
    Foreign {
        /// The holder's session id (`None`: the row names none).
        session: Option<String>,
        /// When the row was written, on the writer's clock (unix ms; `None`: unknown).
        written_at: Option<Millis>,
        /// The holder's lease, where the layout keeps its lock on one (etcd's
        /// native mutex and election); `None` elsewhere, or not read yet.
        // Boxed, as `key` is: most locks have neither, and the hub keeps a
        // million `LockBody`s (server/tests/memory.rs bounds bytes per lock).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lease: Option<Box<LeaseInfo>>,
        /// The holder's value where the layout gives it a meaning: an etcd
        /// election's proposal (`None`: empty, or no such value).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        proposal: Option<String>,
        /// The holder's token and the key's TTL, where the lock is one key
        /// holding a token (Redis `SET key token NX PX ms`); `None` elsewhere.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key: Option<Box<TokenKey>>,
        /// What one family knows beyond the fields above (ZooKeeper's znodes,
        /// PostgreSQL's backends, Redlock's masters…); `None` elsewhere. A
        /// new family adds a variant to [`FamilyDetail`], never a field here.
        // In the OpenAPI document an object keyed by family (its variants are
        // each family's own, and change with it).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
        detail: Option<Box<FamilyDetail>>,
    },
}

/// A foreign family's own knowledge of one lock: one variant per family that
/// has more to say than [`LockBody::Foreign`]'s common fields. Readers use
/// `if let`/`matches!` on the variant they render, so a new variant never
/// breaks another family's code.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FamilyDetail {
    /// A ZooKeeper lock recipe's znodes (kazoo, Curator, the documented recipe).
    Zookeeper(super::zookeeper::ZkLock),
    /// A PostgreSQL advisory lock's key, level, backends and waits-for cycle.
    PgAdvisory(super::pg_advisory::PgAdvisoryLock),
    /// A Redisson `RLock` / fair lock hash (`redis://` fleets).
    Redisson(super::redis::RedissonLock),
    /// A Redlock key over several masters (`redlock+redis://` fleets).
    Redlock(super::redis::RedlockState),
    /// An etcd native mutex's waiters in create-revision order (`etcd-mutex:` fleets).
    EtcdMutex(super::etcd_mutex::EtcdMutexLock),
}

/// A lock that is one key holding its holder's token (Redis `SET NX PX`): the
/// token, and the key's TTL left when read. Such a layout keeps no waiters.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TokenKey {
    /// The key's value: the token its holder wrote (lossy UTF-8).
    pub token: String,
    /// The key's TTL left at `read_at`, in ms (`None`: the key has no expiry).
    pub ttl_ms: Option<i64>,
    /// When that was read, on this server's clock (unix ms).
    pub read_at: Millis,
}

/// What etcd's `LeaseTimeToLive` said of a foreign lock holder's lease.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LeaseInfo {
    /// The lease id in hex, as etcd's tools print it (also the holder's session).
    pub id: String,
    /// The TTL it was granted, in seconds.
    pub granted_s: i64,
    /// Its TTL left at `read_at`, in seconds (`-1`: it had expired).
    pub ttl_s: i64,
    /// When that was read, on this server's clock (unix ms).
    pub read_at: Millis,
    /// Keys on the lease (the first [`LEASE_KEYS_KEPT`], lossy UTF-8): a
    /// revoke deletes them all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<String>,
    /// How many keys are on the lease (`keys` may hold fewer).
    #[serde(default)]
    pub keys_total: u64,
}

/// The most keys of a lease kept in [`LeaseInfo::keys`].
pub const LEASE_KEYS_KEPT: usize = 100;

impl LockEntry {
    /// Builds an entry from a stored value; a value that does not parse becomes
    /// [`LockBody::Malformed`] carrying its bytes.
    pub fn from_stored(name: String, fence: i64, revision: i64, raw: &[u8]) -> LockEntry {
        let body = match Stored::<LockRecord>::parse(raw) {
            Stored::Record(rec) => LockBody::Held(rec),
            Stored::Malformed { raw, error } => LockBody::Malformed { raw, error },
        };
        LockEntry {
            name,
            fence,
            revision,
            body,
        }
    }

    /// A lock of a foreign schema that keeps only its holder's session and the row's time.
    pub fn foreign(
        name: String,
        fence: i64,
        revision: i64,
        session: Option<String>,
        written_at: Option<i64>,
    ) -> LockEntry {
        LockEntry {
            name,
            fence,
            revision,
            body: LockBody::Foreign {
                session,
                written_at,
                lease: None,
                proposal: None,
                key: None,
                detail: None,
            },
        }
    }

    /// The full lockscope record (`None`: malformed, or a foreign schema's lock).
    pub fn record(&self) -> Option<&LockRecord> {
        match &self.body {
            LockBody::Held(r) => Some(r),
            LockBody::Malformed { .. } | LockBody::Foreign { .. } => None,
        }
    }

    /// The session holding the lock, when known: the record's, or the one a
    /// foreign schema's row names (`None` for a malformed value).
    pub fn holder_session(&self) -> Option<&str> {
        match &self.body {
            LockBody::Held(r) => Some(&r.session),
            LockBody::Foreign { session, .. } => session.as_deref(),
            LockBody::Malformed { .. } => None,
        }
    }
}
