//! The Redis families' own part of a lock's detail page: a Redisson lock's
//! thread, reentrancy count and fair-lock queue; a Redlock lock's agreement
//! ("2 of 3"), why it is split, and each master's state; and, for every
//! Redis layout, why there is no blacklist button.

use leptos::prelude::*;
use lockscope_model::fleet::redis::{RedissonLock, RedlockMaster, RedlockState};
use lockscope_model::fleet::FamilyDetail;
use lockscope_model::time::{absolute_and_relative, Millis};

/// Why a Redis lock's holder cannot be blacklisted (said instead of a button).
pub const REDIS_NO_BLACKLIST: &str = "Blacklist: not possible. Redis has no sessions to end: nothing in Redis \
     ties a token (or a Redisson client uuid) to a connection that could be refused. Release the lock instead.";

/// What a force-release of a Redisson lock does.
pub const REDISSON_RELEASE: &str = "Redisson RLock (a hash {\"<client uuid>:<thread id>\": count}): a \
     force-release deletes the hash only while it still holds this holder's field, then publishes Redisson's \
     unlock message on its channel (and the fair lock's first waiter's) so waiters wake. The holder's thread is \
     not told; its watchdog stops renewing once the field is gone.";

/// What a force-release of a Redlock lock does.
pub const REDLOCK_RELEASE: &str = "Redlock: a force-release deletes the key on every master where it still \
     holds the token shown (the libraries' compare-and-delete); masters down then keep theirs until its TTL \
     runs out. The holder is not told.";

/// A Redisson lock's queue is listed here; other Redis layouts keep none.
pub fn keeps_queue(d: Option<&FamilyDetail>) -> bool {
    matches!(d, Some(FamilyDetail::Redisson(_)))
}

/// One queued thread: who, and when it drops out unless it asks again.
pub fn queue_line(id: &str, deadline: Option<Millis>, now: Millis) -> String {
    match deadline {
        Some(at) => format!(
            "{id}: leaves the queue {} unless it asks again",
            absolute_and_relative(at, now)
        ),
        None => format!("{id}: no deadline recorded"),
    }
}

/// Said above a fair lock's queue read only in part.
pub fn queue_more_text(n: u32) -> String {
    format!("more than {n} waiters: only the first {n} in the queue are read and shown")
}

/// One master's state under the lock's key.
pub fn master_line(m: &RedlockMaster) -> String {
    match (&m.token, m.reachable) {
        (_, false) => format!("{}: unreachable", m.address),
        (None, true) => format!("{}: no key", m.address),
        (Some(t), true) => match m.ttl_ms {
            Some(ms) => format!("{}: holds {t} ({} ms left when read)", m.address, ms),
            None => format!("{}: holds {t} (no expiry)", m.address),
        },
    }
}

fn redisson(r: RedissonLock, now: Millis) -> AnyView {
    let queue = if r.queue.is_empty() {
        view! { <dd data-testid="detail-no-waiters">"none queued (a plain RLock's contenders wait on its channel and are listed nowhere)"</dd> }
            .into_any()
    } else {
        let items = r
            .queue
            .iter()
            .map(|w| view! { <li data-testid="detail-redisson-waiter">{queue_line(&w.id, w.deadline, now)}</li> })
            .collect_view();
        let more = r.queue_truncated_at.map(|n| {
            view! { <p class="warn" data-testid="detail-redisson-more">{queue_more_text(n)}</p> }
        });
        view! { <dd>{more}<ol class="waiters">{items}</ol></dd> }.into_any()
    };
    view! {
        <dt>"layout"</dt><dd data-testid="detail-redisson">{REDISSON_RELEASE}</dd>
        <dt>"thread"</dt><dd data-testid="detail-redisson-thread">{r.thread}</dd>
        <dt>"re-entered"</dt><dd data-testid="detail-redisson-count">{format!("{} time(s)", r.count)}</dd>
        <dt>"waiters (fair lock queue)"</dt>{queue}
        <dt>"blacklist"</dt><dd>{REDIS_NO_BLACKLIST}</dd>
    }
    .into_any()
}

fn redlock(r: RedlockState) -> AnyView {
    let masters = r
        .masters
        .iter()
        .map(|m| view! { <li data-testid="detail-redlock-master">{master_line(m)}</li> })
        .collect_view();
    let agree = format!("{} (quorum {})", r.agreement(), r.quorum);
    view! {
        <dt>"layout"</dt><dd data-testid="detail-redlock">{REDLOCK_RELEASE}</dd>
        <dt>"masters agreeing"</dt><dd data-testid="detail-redlock-agree">{agree}</dd>
        {r.split.map(|why| view! { <dt>"split"</dt><dd class="error" data-testid="detail-redlock-split">{why}</dd> })}
        <dt>"masters"</dt><dd><ul class="keys">{masters}</ul></dd>
        <dt>"blacklist"</dt><dd>{REDIS_NO_BLACKLIST}</dd>
    }
    .into_any()
}

/// The family's own `<dt>/<dd>` lines, if the lock is a Redisson or Redlock one.
pub fn family(d: Option<&FamilyDetail>, now: Millis) -> Option<AnyView> {
    match d? {
        FamilyDetail::Redisson(r) => Some(redisson(r.clone(), now)),
        FamilyDetail::Redlock(r) => Some(redlock(r.clone())),
        #[allow(unreachable_patterns)]
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_master_line_says_what_it_holds() {
        let m = |reachable, token: Option<&str>, ttl_ms| RedlockMaster {
            address: "h:1".into(),
            reachable,
            token: token.map(str::to_string),
            ttl_ms,
        };
        assert_eq!(master_line(&m(false, None, None)), "h:1: unreachable");
        assert_eq!(master_line(&m(true, None, None)), "h:1: no key");
        assert_eq!(
            master_line(&m(true, Some("t"), Some(900))),
            "h:1: holds t (900 ms left when read)"
        );
        assert!(queue_line("u:7", Some(2_000), 1_000).starts_with("u:7: leaves the queue"));
    }
}
