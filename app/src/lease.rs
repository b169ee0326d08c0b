//! A foreign lock's lease in words: what the lock detail page and the
//! force-release dialog both say of an etcd native mutex holder's lease. A
//! leaf, so the dialog ([`crate::release`]) need not import the page that
//! shows it.

use lockscope_model::fleet::LeaseInfo;
use lockscope_model::time::{absolute_and_relative, Millis};

/// The sessions page's row of an etcd lease: (the cell, its title) for its
/// TTL, and the keys on it a revoke (blacklist) would end. `None`: a lease
/// that only waits, whose TTL the observer does not read.
pub fn lease_row(l: Option<&LeaseInfo>, now: Millis) -> (String, String) {
    let Some(l) = l else {
        return (
            "TTL unknown".into(),
            "this lease only waits: the observer reads holders' leases only".into(),
        );
    };
    let cell = if l.ttl_s < 0 {
        "expired or revoked".to_string()
    } else {
        format!("{} s left of {} s", l.ttl_s, l.granted_s)
    };
    let more = l.keys_total.saturating_sub(l.keys.len() as u64);
    let keys = l.keys.join(", ")
        + &if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
    (
        cell,
        format!(
            "{}. Keys on it (a blacklist revokes it and ends them all): {keys}",
            lease_text(l, now)
        ),
    )
}

/// What is known of an etcd native mutex holder's lease: its id, the TTL
/// left when it was last read, and when it runs out unless its client renews it.
pub fn lease_text(l: &LeaseInfo, now: Millis) -> String {
    if l.ttl_s < 0 {
        return format!(
            "{}: expired or revoked when read {}",
            l.id,
            absolute_and_relative(l.read_at, now)
        );
    }
    format!(
        "{}: {} s left of {} s granted when read {}; runs out {} unless its client renews it",
        l.id,
        l.ttl_s,
        l.granted_s,
        absolute_and_relative(l.read_at, now),
        absolute_and_relative(l.read_at.saturating_add(l.ttl_s.saturating_mul(1000)), now)
    )
}
