//! The lock detail page (`/lock?fleet=&name=`): one lock in full — its state
//! and why, the record with absolute (UTC) and relative times, the backtrace as
//! a list, the holder's session and its liveness, the waiters and how long each
//! has waited, the fencing token and store revisions, and the raw stored value
//! when it is malformed. Kept live over the websocket. For those who may: the
//! holder's session's blacklist form ([`crate::actions`]) and the force-release
//! dialog ([`crate::release`]).

use leptos::prelude::*;
use lockscope_model::detail::LockDetail;
use lockscope_model::fleet::{LeaseInfo, TokenKey};
use lockscope_model::time::{absolute_and_relative, human_duration, rfc3339, Millis};
use lockscope_model::view::RowState;
use lockscope_model::{Holder, LockBody, Screen};

use crate::actions::SessionActions;
use crate::lease::lease_text;
use crate::links::{locks_href, sessions_href};
use crate::live::LiveView;
use crate::release::ReleaseSection;
use crate::rows::state_icon;
use crate::sessions::{holder_word, session_text};

pub(crate) mod pg_advisory;
mod polled;
mod redis;
mod zookeeper;

/// The lock's state, if it is held.
pub fn detail_state(d: &LockDetail, now: Millis) -> Option<RowState> {
    d.entry.as_ref().map(|e| RowState::of(e, d.holder, now))
}

/// What a foreign schema's lock does not keep, said plainly on its page.
pub const FOREIGN_UNKNOWN: &str = "Not kept by this schema, so unknown: the holder's service, host and pid, \
     the purpose, the backtrace, when it was acquired, the expected runtime, and the alert and auto-unlock times. \
     Lockscope never releases such a lock by itself; the schema's own housekeeping does.";

/// A Redis SET NX lock keeps no waiters: contenders retry on their own.
pub const NO_WAITERS: &str = "none: this layout has none (a contender retries SET NX on its own)";

/// What is known of a Redis SET NX key's expiry: its TTL left when read, and
/// when it runs out unless its holder extends it (or that it has none).
pub fn key_ttl_text(k: &TokenKey, now: Millis) -> String {
    match k.ttl_ms {
        None => format!(
            "no expiry (held until released) when read {}",
            absolute_and_relative(k.read_at, now)
        ),
        Some(ms) => format!(
            "{:.1} s left when read {}; runs out {} unless its holder extends it",
            ms as f64 / 1000.0,
            absolute_and_relative(k.read_at, now),
            absolute_and_relative(k.read_at.saturating_add(ms), now)
        ),
    }
}

/// What blacklisting an etcd mutex holder's session ends: every key on its lease.
pub fn lease_keys_text(l: &LeaseInfo) -> String {
    let more = l.keys_total.saturating_sub(l.keys.len() as u64);
    let tail = match more {
        0 => String::new(),
        n => format!(" ({n} more not listed)"),
    };
    format!(
        "{} key(s) when read{tail}: blacklisting this session revokes the lease, which deletes them all",
        l.keys_total
    )
}

/// One line per time of the record: (label, "UTC (relative)", RFC 3339). A
/// foreign schema's lock has one: when its row was written, if known.
pub fn record_times(d: &LockDetail, now: Millis) -> Vec<(&'static str, String, String)> {
    if let Some(LockBody::Foreign { written_at, .. }) = d.entry.as_ref().map(|e| &e.body) {
        return written_at
            .iter()
            .map(|&at| {
                (
                    "row written (writer's clock)",
                    absolute_and_relative(at, now),
                    rfc3339(at),
                )
            })
            .collect();
    }
    let Some(rec) = d.entry.as_ref().and_then(|e| e.record()) else {
        return Vec::new();
    };
    [
        ("acquired", rec.acquired_at),
        ("last heartbeat", rec.heartbeat_at),
        ("alert at (overdue from)", rec.alert_at),
        ("auto-unlock at (expired from)", rec.auto_unlock_at),
    ]
    .into_iter()
    .map(|(label, at)| (label, absolute_and_relative(at, now), rfc3339(at)))
    .collect()
}

#[component]
pub fn LockPage() -> impl IntoView {
    let live = expect_context::<LiveView>();
    let detail = Memo::new(move |_| {
        live.screen.with(|s| match s {
            Screen::Lock { detail } => (**detail).clone(),
            _ => LockDetail::default(),
        })
    });
    let fleet = move || live.fleet.get();
    let state = move || detail.with(|d| detail_state(d, live.now.get()));
    let header = move || {
        let d = detail.get();
        let (word, icon, reason) = match state() {
            Some(s) => (s.as_str(), state_icon(s), s.reason().to_string()),
            None => (
                "free",
                "○",
                "not held: released, expired and reaped, or never taken".to_string(),
            ),
        };
        view! {
            <h2 class="lock-name">
                <span class="st" data-testid="detail-state" data-state=word title=reason.clone()>
                    <span class="icon" aria-hidden="true">{icon}</span>{word}
                </span>
                " "
                <span class="name" data-testid="detail-name">{d.name.clone()}</span>
            </h2>
            <p class="reason" data-testid="detail-reason">{reason}</p>
            {d.deadlock.then(|| view! {
                <p class="error" data-testid="detail-deadlock">"⟲ deadlock: its holder waits, through others, for a lock one of its waiters holds."</p>
            })}
        }
        .into_any()
    };
    let record = move || {
        let d = detail.get();
        let now = live.now.get();
        let Some(entry) = d.entry.clone() else {
            return view! { <p class="empty" data-testid="detail-free">"This lock is not held."</p> }.into_any();
        };
        match entry.body {
            LockBody::Foreign {
                detail: Some(ref f), ..
            } if zookeeper::zk(f).is_some() => zookeeper::record(&entry, zookeeper::zk(f).unwrap(), &d, now),
            LockBody::Foreign {
                detail: Some(ref f), ..
            } if pg_advisory::pg(f).is_some() => pg_advisory::record(&entry, pg_advisory::pg(f).unwrap(), &d, now),
            LockBody::Malformed { raw, error } => view! {
                <section class="malformed">
                    <h3>"Malformed value"</h3>
                    <p class="error" data-testid="detail-error">{error}</p>
                    <pre class="raw" data-testid="detail-raw">{String::from_utf8_lossy(&raw).into_owned()}</pre>
                    <dl><dt>"fence"</dt><dd data-testid="detail-fence">{entry.fence}</dd>
                        <dt>"store revision"</dt><dd>{entry.revision}</dd></dl>
                </section>
            }
            .into_any(),
            LockBody::Foreign {
                session,
                lease,
                proposal,
                key,
                detail,
                ..
            } => {
                let queued = redis::keeps_queue(detail.as_deref());
                let family = redis::family(detail.as_deref(), now);
                let mutex = lease.is_some();
                let redis = key.is_some();
                let key = key.map(|k| {
                    let ttl = key_ttl_text(&k, now);
                    view! {
                        <dt>"holder's token"</dt><dd data-testid="detail-token"><code>{k.token}</code></dd>
                        <dt>"TTL"</dt><dd data-testid="detail-ttl">{ttl}</dd>
                        {(!queued).then(|| view! { <dt>"waiters"</dt><dd data-testid="detail-no-waiters">{NO_WAITERS}</dd> })}
                    }
                });
                let lease = lease.map(|l| {
                    let text = lease_text(&l, now);
                    let keys = l
                        .keys
                        .iter()
                        .map(|k| view! { <li><code>{k.clone()}</code></li> })
                        .collect_view();
                    view! {
                        <dt>"lease"</dt><dd data-testid="detail-lease">{text}</dd>
                        <dt>"keys on this lease"</dt>
                        <dd data-testid="detail-lease-keys">{lease_keys_text(&l)}<ul class="keys">{keys}</ul></dd>
                    }
                });
                let proposal =
                    proposal.map(|p| view! { <dt>"proposal"</dt><dd data-testid="detail-proposal">{p}</dd> });
                let times = record_times(&d, now)
                    .into_iter()
                    .map(|(label, text, iso)| view! { <dt>{label}</dt><dd><time datetime=iso>{text}</time></dd> })
                    .collect_view();
                let no_time = record_times(&d, now).is_empty();
                view! {
                    <section class="record foreign">
                        <h3>"Foreign schema"</h3>
                        {if mutex {
                            view! { <p data-testid="detail-foreign">
                                "Held through etcd's native mutex or election ("<code>"etcdctl lock"</code>", "
                                <code>"concurrency.Mutex"</code>"): the holder's session is its lease, its fencing token "
                                "its key's create revision; the layout keeps nothing else."
                            </p> }.into_any()
                        } else if redis {
                            view! { <p data-testid="detail-foreign">
                                "Held through a Redis key ("<code>"SET key token NX PX ms"</code>", as redis-py's "
                                <code>"Lock"</code>" and redsync take it): its holder is the token, its fencing token a "
                                "value derived from the token; Redis keeps no session, waiter or time of it."
                            </p> }.into_any()
                        } else {
                            view! { <p data-testid="detail-foreign">
                                "Written by a client of a foreign locking schema (ScyllaDB's "<code>"tokens"</code>
                                " table), which keeps only the holder's session and when the row was written."
                            </p> }.into_any()
                        }}
                        <dl>
                            <dt>"holder's session"</dt>
                            <dd data-testid="detail-holder">{match session {
                                Some(s) => view! { <code>{s}</code> }.into_any(),
                                None if redis => view! { "none (Redis has no sessions)" }.into_any(),
                                None => view! { "unknown (the row names none)" }.into_any(),
                            }}</dd>
                            {key}
                            {family}
                            {lease}
                            {proposal}
                            {times}
                            {no_time.then(|| view! { <dt>"row written"</dt><dd>"unknown"</dd> })}
                            <dt>"fencing token"</dt><dd data-testid="detail-fence">{entry.fence}</dd>
                            <dt>"store revision"</dt><dd>{format!("{} (fleet at {})", entry.revision, d.store_revision)}</dd>
                        </dl>
                        <p class="unknown" data-testid="detail-unknown">{FOREIGN_UNKNOWN}</p>
                    </section>
                }
                .into_any()
            }
            LockBody::Held(rec) => {
                let times = record_times(&d, now)
                    .into_iter()
                    .map(|(label, text, iso)| view! { <dt>{label}</dt><dd><time datetime=iso>{text}</time></dd> })
                    .collect_view();
                let frames = rec
                    .backtrace
                    .iter()
                    .map(|f| view! { <li><code>{f.clone()}</code></li> })
                    .collect_view();
                let has_frames = !rec.backtrace.is_empty();
                view! {
                    <section class="record">
                        <dl>
                            <dt>"holder"</dt>
                            <dd data-testid="detail-holder">{rec.holder()}</dd>
                            <dt>"purpose"</dt><dd>{rec.purpose.clone()}</dd>
                            <dt>"expected runtime"</dt><dd>{human_duration(rec.expected_runtime_ms as i64)}</dd>
                            {times}
                            <dt>"fencing token"</dt><dd data-testid="detail-fence">{entry.fence}</dd>
                            <dt>"store revision"</dt><dd>{format!("{} (fleet at {})", entry.revision, d.store_revision)}</dd>
                            <dt>"owner"</dt><dd><code>{rec.owner.clone()}</code></dd>
                        </dl>
                        <h3>"Backtrace at lock time"</h3>
                        {if has_frames {
                            view! { <ol class="backtrace" data-testid="detail-backtrace">{frames}</ol> }.into_any()
                        } else {
                            view! { <p class="empty" data-testid="detail-backtrace">"none recorded (the holder turned backtraces off)"</p> }.into_any()
                        }}
                    </section>
                }
                .into_any()
            }
        }
    };
    let session = move || {
        let d = detail.get();
        let now = live.now.get();
        let id = d.entry.as_ref().and_then(|e| e.holder_session()).map(str::to_string)?;
        let (word, icon) = holder_word(d.holder);
        let text = d
            .session
            .as_ref()
            .map(|entry| session_text(Some(entry), d.blacklist.as_ref(), now));
        let sessions_href = sessions_href(&fleet());
        Some(
            view! {
            <section class="holder-session">
                <h3>"Holder's session"</h3>
                <p data-testid="detail-session" data-state=word>
                    <span class="icon" aria-hidden="true">{icon}</span>{word}" — "{d.holder.reason()}
                </p>
                <dl>
                    <dt>"session"</dt><dd><a href=sessions_href><code>{id}</code></a></dd>
                    {text.map(|t| view! {
                        <dt>"heartbeat"</dt><dd title=t.heartbeat_title>{t.heartbeat}</dd>
                        <dt>"up"</dt><dd title=t.started_title>{t.started}</dd>
                        <dt>"clock skew"</dt><dd title=t.skew_title>{if t.skew.is_empty() { "not measured yet (no heartbeat seen live)".to_string() } else { t.skew }}</dd>
                        <dt>"blacklisted"</dt><dd>{if t.blacklist.is_empty() { "no".to_string() } else { t.blacklist }}</dd>
                    })}
                </dl>
            </section>
        }
            .into_any(),
        )
    };
    // The holder's session and whether it is blacklisted: its form re-renders
    // only when these change, not with every heartbeat (an open form stays open).
    let holder_session = Memo::new(move |_| {
        detail.with(|d| {
            let id = d.entry.as_ref().and_then(|e| e.holder_session()).map(str::to_string)?;
            // A store that keeps no sessions has none to blacklist.
            (d.holder != Holder::Unknown).then_some((id, d.blacklist.is_some()))
        })
    });
    let session_actions = move || {
        holder_session.get().map(
            |(session, blacklisted)| view! { <div class="holder-actions"><SessionActions session blacklisted/></div> },
        )
    };
    let waiters = move || {
        let d = detail.get();
        let now = live.now.get();
        if d.waiters.is_empty() {
            return view! { <p class="empty" data-testid="detail-no-waiters">"Nobody waits for it."</p> }.into_any();
        }
        let items = d
            .waiters
            .into_iter()
            .map(|w| {
                let waited = human_duration(now - w.since);
                let waited = if w.at_least {
                    format!("at least {waited}")
                } else {
                    waited
                };
                view! {
                    <li data-testid="detail-waiter" data-session=w.session.clone()>
                        {w.who.unwrap_or_else(|| "unknown holder".into())}" "
                        <code class="session">{w.session.clone()}</code>
                        " — waiting "<span data-testid="waited">{waited}</span>
                        {w.deadlock.then_some(" ⟲ on a deadlock")}
                    </li>
                }
            })
            .collect_view();
        view! { <ol class="waiters" data-testid="detail-waiters">{items}</ol> }.into_any()
    };
    view! {
        <nav class="crumbs"><a href=move || locks_href(&fleet())>"← all locks"</a></nav>
        {header}
        <polled::PolledLine/>
        {record}
        <pg_advisory::CancelWaiters detail/>
        {session}
        {session_actions}
        <section>
            <h3>"Waiters"</h3>
            {waiters}
        </section>
        <ReleaseSection detail/>
    }
    .into_any()
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockscope_model::{Holder, LockEntry};

    #[test]
    fn a_redis_key_is_its_ttl_and_when_it_runs_out() {
        let k = TokenKey {
            token: "tok".into(),
            ttl_ms: Some(7_500),
            read_at: 1_000_000,
        };
        let text = key_ttl_text(&k, 1_002_000);
        assert!(text.starts_with("7.5 s left when read"), "{text}");
        assert!(text.contains("unless its holder extends it"), "{text}");
        let forever = key_ttl_text(&TokenKey { ttl_ms: None, ..k }, 1_002_000);
        assert!(forever.starts_with("no expiry (held until released)"), "{forever}");
        // docs/operations.md: "**No waiters: this layout has none**".
        assert!(NO_WAITERS.contains("this layout has none"));
    }

    #[test]
    fn a_lease_is_its_ttl_and_when_it_runs_out() {
        let l = LeaseInfo {
            id: "694d".into(),
            granted_s: 10,
            ttl_s: 7,
            read_at: 1_000_000,
            keys: vec!["/mx/a/694d".into()],
            keys_total: 3,
        };
        let text = lease_text(&l, 1_002_000);
        assert!(text.starts_with("694d: 7 s left of 10 s granted when read"), "{text}");
        assert!(text.contains("unless its client renews it"), "{text}");
        assert!(
            lease_keys_text(&l).starts_with("3 key(s) when read (2 more not listed): blacklisting"),
            "{}",
            lease_keys_text(&l)
        );
        let gone = lease_text(&LeaseInfo { ttl_s: -1, ..l }, 1_002_000);
        assert!(gone.starts_with("694d: expired or revoked"), "{gone}");
    }

    #[test]
    fn times_are_absolute_and_relative() {
        let rec = r#"{"v":1,"owner":"o","session":"s","service":"x","host":"h","pid":1,"acquired_at":1700000000000,
            "expected_runtime_ms":60000,"alert_at":1700000060000,"auto_unlock_at":1700000120000,"heartbeat_at":1700000000000}"#;
        let d = LockDetail {
            name: "a".into(),
            entry: Some(LockEntry::from_stored("a".into(), 5, 6, rec.as_bytes())),
            holder: Holder::Gone,
            ..LockDetail::default()
        };
        let now = 1_700_000_030_000;
        let times = record_times(&d, now);
        assert_eq!(times[0].1, "2023-11-14 22:13:20 UTC (30s ago)");
        assert_eq!(times[2].1, "2023-11-14 22:14:20 UTC (in 30s)");
        assert_eq!(times[3].2, "2023-11-14T22:15:20.000Z");
        assert_eq!(detail_state(&d, now), Some(RowState::Orphaned));
        assert_eq!(detail_state(&LockDetail::default(), now), None);
    }

    #[test]
    fn a_foreign_lock_has_its_write_time_only() {
        let now = 1_700_000_030_000;
        let d = |written_at| LockDetail {
            name: "t".into(),
            entry: Some(LockEntry::foreign("t".into(), 2, 2, Some("s-1".into()), written_at)),
            holder: Holder::Alive,
            ..LockDetail::default()
        };
        let times = record_times(&d(Some(1_700_000_000_000)), now);
        assert_eq!(times.len(), 1);
        assert_eq!(times[0].0, "row written (writer's clock)");
        assert_eq!(times[0].1, "2023-11-14 22:13:20 UTC (30s ago)");
        assert!(record_times(&d(None), now).is_empty());
        assert_eq!(detail_state(&d(None), now), Some(RowState::Foreign));
        for field in [
            "service",
            "host",
            "pid",
            "purpose",
            "backtrace",
            "expected runtime",
            "auto-unlock",
        ] {
            assert!(FOREIGN_UNKNOWN.contains(field), "{field}");
        }
    }
}
