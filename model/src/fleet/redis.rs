//! What the Redis lock families know of one lock beyond a token and a TTL
//! ([`super::FamilyDetail::Redisson`], [`super::FamilyDetail::Redlock`]).

use serde::{Deserialize, Serialize};

use crate::time::Millis;

/// A Redisson `RLock` or fair lock: a hash `{ "<client uuid>:<thread id>": count }`.
/// The client uuid is the holder's session; `TokenKey::token` is the field.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedissonLock {
    /// The holder's thread id (the field after the client uuid).
    pub thread: String,
    /// The reentrancy count (`HINCRBY`): how many times that thread holds it.
    pub count: i64,
    /// The fair lock's queue (`redisson_lock_queue:{NAME}`), in order, each with
    /// its deadline from `redisson_lock_timeout:{NAME}`. Empty: nobody queued (a
    /// plain `RLock`'s contenders wait on its channel and are listed nowhere).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub queue: Vec<RedissonWaiter>,
    /// The queue holds more than this many waiters and only the first this
    /// many were read and are shown (`None`: the whole queue).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_truncated_at: Option<u32>,
}

/// One thread queued for a Redisson fair lock.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedissonWaiter {
    /// `<client uuid>:<thread id>`, as Redisson queues it.
    pub id: String,
    /// Its score in `redisson_lock_timeout:{NAME}`: when it is dropped from the
    /// queue unless it asks again (unix ms, the client's clock; `None`: no score).
    pub deadline: Option<Millis>,
}

/// A Redlock lock: the same key on N independent masters.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedlockState {
    /// How many masters must hold one token for the lock to be held (N/2+1).
    pub quorum: u32,
    /// How many masters hold the token shown (`TokenKey::token`).
    pub agree: u32,
    /// Why the lock is split (no token on a quorum of masters); `None`: held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split: Option<String>,
    /// Each master, in the spec's order.
    pub masters: Vec<RedlockMaster>,
}

/// What one Redlock master holds under the lock's key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedlockMaster {
    /// `HOST:PORT`.
    pub address: String,
    /// Whether it answered the last read (`false`: down; `token` unknown).
    pub reachable: bool,
    /// The token its key holds (lossy UTF-8; `None`: no such key there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// Its key's TTL left when read, in ms (`None`: no key, or no expiry).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<i64>,
}

impl RedlockState {
    /// "2 of 3": masters holding the token shown, of all.
    pub fn agreement(&self) -> String {
        format!("{} of {}", self.agree, self.masters.len())
    }
}
