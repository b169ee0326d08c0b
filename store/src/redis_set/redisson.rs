//! Redisson's lock layouts, as its Lua scripts write them (Redisson 3.x,
//! `RedissonLock.tryLockInnerAsync` / `unlockInnerAsync`,
//! `RedissonFairLock.tryLockInnerAsync` / `forceUnlockAsync`):
//! - `RLock`: a hash at the lock's name holding one field
//!   `<client uuid>:<thread id>` → reentrancy count (`HINCRBY`), `PEXPIRE`d
//!   to the lease and renewed by the client's watchdog;
//! - the fair lock adds `redisson_lock_queue:{NAME}` (a list of waiting
//!   `<uuid>:<thread>`, in order) and `redisson_lock_timeout:{NAME}` (a zset:
//!   each waiter's deadline, unix ms);
//! - an unlock publishes `0` on `redisson_lock__channel:{NAME}` (the fair
//!   lock: on `redisson_lock__channel:{NAME}:<first waiter>`) so waiters wake.
//!
//! Only a hash whose every field reads `<something>:<digits>` with a positive
//! count is taken for a lock: other hashes (a read-write lock's `mode`, any
//! application hash) are not this layout and are not shown.

use lockscope_model::fleet::redis::{RedissonLock, RedissonWaiter};
use lockscope_model::fleet::{FamilyDetail, TokenKey};
use lockscope_model::{LockBody, LockEntry};

use super::fence_of;
use crate::now_ms;

/// Redisson's `prefixName(prefix, name)`: `prefix:{name}`, or `prefix:name`
/// when the name already carries a hash tag.
pub fn side_key(prefix: &str, name: &str) -> String {
    if name.contains('{') {
        format!("{prefix}:{name}")
    } else {
        format!("{prefix}:{{{name}}}")
    }
}

/// The default of the most waiters of a fair lock's queue read and shown
/// (the spec's `queue=N`; `LRANGE 0 N`, one more to tell whether there are
/// more; the page then says "more than N waiters"). docs/operations.md,
/// "Redisson locks".
pub const MAX_QUEUE: usize = 1000;

/// The largest `queue=` a spec may ask: every read of a fair lock holds
/// up to this many waiters (and their deadlines) in one reply.
pub const QUEUE_CEILING: usize = 100_000;

/// The fair lock's queue of `name`.
pub fn queue_key(name: &str) -> String {
    side_key("redisson_lock_queue", name)
}

/// The fair lock's waiters' deadlines of `name`.
pub fn timeout_key(name: &str) -> String {
    side_key("redisson_lock_timeout", name)
}

/// The channel an unlock of `name` is published on.
pub fn channel(name: &str) -> String {
    side_key("redisson_lock__channel", name)
}

/// The lock a queue or timeout key belongs to (`None`: neither).
pub fn lock_of_side_key(key: &str) -> Option<&str> {
    for prefix in ["redisson_lock_queue:", "redisson_lock_timeout:"] {
        if let Some(rest) = key.strip_prefix(prefix) {
            return Some(match rest.strip_prefix('{').and_then(|r| r.strip_suffix('}')) {
                Some(inner) if !inner.contains(['{', '}']) => inner,
                _ => rest,
            });
        }
    }
    None
}

/// The holder of a Redisson hash (`field`, `count`), if every field is
/// `<uuid>:<thread id>` → a positive count (the first such field holds: a
/// Redisson `RLock` keeps one).
pub fn holder(fields: &[(String, String)]) -> Option<(String, i64)> {
    let mut found = None;
    for (field, value) in fields {
        let (uuid, thread) = field.rsplit_once(':')?;
        if uuid.is_empty() || thread.is_empty() || !thread.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let count: i64 = value.parse().ok().filter(|c| *c > 0)?;
        found.get_or_insert((field.clone(), count));
    }
    found
}

/// The unlock Redisson's `forceUnlockAsync` runs, guarded: delete the hash
/// only while it still holds the holder's field (ARGV[1]), then publish the
/// unlock message (`0`) on the lock's channel (KEYS[2]) and, for a fair lock,
/// on the first waiter's own channel (`KEYS[2]:<waiter>`, as
/// `RedissonFairLock.forceUnlockAsync` does) so waiters wake.
pub const GUARDED_UNLOCK: &str = r#"
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('del', KEYS[1])
redis.call('publish', KEYS[2], '0')
local nextThreadId = redis.call('lindex', KEYS[3], 0)
if nextThreadId ~= false then redis.call('publish', KEYS[2] .. ':' .. nextThreadId, '0') end
return 1
"#;

/// Lock `name` as read from its hash: the holder's field, count and `PTTL`,
/// and the fair lock's queue with deadlines (`queue_truncated_at`: it holds
/// more than [`MAX_QUEUE`], only the first are in `queue`).
pub(crate) fn entry(
    name: String,
    field: &str,
    count: i64,
    pttl: i64,
    queue: Vec<(String, Option<i64>)>,
    queue_truncated_at: Option<u32>,
    revision: i64,
) -> LockEntry {
    let (uuid, thread) = field.rsplit_once(':').unwrap_or((field, ""));
    LockEntry {
        name,
        fence: fence_of(field.as_bytes()),
        revision,
        body: LockBody::Foreign {
            session: Some(uuid.to_string()),
            written_at: None,
            lease: None,
            proposal: None,
            key: Some(Box::new(TokenKey {
                token: field.to_string(),
                ttl_ms: (pttl >= 0).then_some(pttl),
                read_at: now_ms(),
            })),
            detail: Some(Box::new(FamilyDetail::Redisson(RedissonLock {
                thread: thread.to_string(),
                count,
                queue: queue
                    .into_iter()
                    .map(|(id, deadline)| RedissonWaiter { id, deadline })
                    .collect(),
                queue_truncated_at,
            }))),
        },
    }
}

/// The sessions (client uuids) queued for a fair lock, as waiters.
pub(crate) fn waiting_sessions(e: &LockEntry) -> Vec<String> {
    match &e.body {
        LockBody::Foreign { detail: Some(d), .. } => match &**d {
            FamilyDetail::Redisson(r) => r
                .queue
                .iter()
                .map(|w| w.id.rsplit_once(':').map_or(w.id.as_str(), |(u, _)| u).to_string())
                .collect(),
            _ => Vec::new(),
        },
        _ => Vec::new(),
    }
}
