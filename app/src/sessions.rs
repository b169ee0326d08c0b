//! The sessions page (`/sessions?fleet=`): every worker session of the fleet,
//! blacklisted ones first, with its heartbeat age, the locks it holds and waits
//! for, its contention counters and its clock-skew estimate. Kept live over the
//! websocket (at most one update a second; the ages tick with the clock). For
//! those who may: a blacklist (or lift-the-blacklist) form per session
//! ([`crate::actions`]).

use std::collections::HashMap;

use leptos::prelude::*;
use lockscope_model::admin::Action;
use lockscope_model::detail::{SessionList, SessionRow};
use lockscope_model::session::SKEW_SHOWN_FROM_MS;
use lockscope_model::time::{absolute_and_relative, datetime, hms, human_duration, Millis};
use lockscope_model::{BlacklistEntry, Holder, Screen, SessionEntry};

use crate::actions::{may_on_sessions, SessionActions, BLACKLIST_EXPLAINED};
use crate::links::{lock_href, locks_href};
use crate::live::LiveView;
use crate::rows::short as short_id;

mod foreign;

/// A session's liveness as a word and an icon (never colour alone).
pub fn holder_word(h: Holder) -> (&'static str, &'static str) {
    match h {
        Holder::Alive => ("alive", "✓"),
        Holder::Gone => ("gone", "☠"),
        Holder::Blacklisted => ("blacklisted", "⊘"),
        Holder::Unknown => ("unknown", "?"),
    }
}

/// What one row says, as text (pure: tested without a browser).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionText {
    pub who: String,
    pub started: String,
    pub started_title: String,
    /// How long ago this server last saw a heartbeat (its own clock), or, before
    /// it has seen one live, the record's heartbeat time (the holder's clock).
    pub heartbeat: String,
    pub heartbeat_title: String,
    pub contention: String,
    pub contention_title: String,
    /// The estimate when 1 s or more, "under 1 s" below, empty when not
    /// measured yet (no heartbeat seen live).
    pub skew: String,
    pub skew_title: String,
    pub blacklist: String,
    /// The locks a foreign session holds, by name (the locks cell's hover).
    pub holds: String,
}

/// An etcd lease's row: no service, host or pid is known; its TTL stands in
/// the heartbeat column.
fn lease_row_text(r: &SessionRow, now: Millis) -> SessionText {
    let (heartbeat, heartbeat_title) = crate::lease::lease_row(r.lease.as_ref(), now);
    SessionText {
        who: "etcd lease".into(),
        heartbeat,
        heartbeat_title,
        ..SessionText::default()
    }
}

/// What a session says: its entry (`None`: gone) and blacklist entry, at `now`.
pub fn session_text(entry: Option<&SessionEntry>, blacklist: Option<&BlacklistEntry>, now: Millis) -> SessionText {
    let mut t = SessionText::default();
    if let Some(bl) = blacklist {
        t.blacklist = match bl.body.value() {
            Some(b) => format!("by {}: {} ({})", b.by, b.reason, absolute_and_relative(b.at, now)),
            None => "blacklisted (unreadable entry)".into(),
        };
    }
    let Some(entry) = entry else {
        t.who = "gone".into();
        t.heartbeat = "—".into();
        return t;
    };
    let Some(rec) = entry.record() else {
        t.who = "malformed session record".into();
        return t;
    };
    t.who = rec.holder();
    // Both on the holder's clock: no comparison with ours.
    t.started = human_duration(rec.heartbeat_at - rec.started_at);
    t.started_title = format!(
        "started {}, up {} at its last heartbeat (both on the holder's clock)",
        datetime(rec.started_at),
        t.started
    );
    match entry.seen_at {
        Some(seen) => {
            t.heartbeat = format!("{} ago", human_duration(now - seen));
            // The page's clock ticks each second: a heartbeat seen since the last
            // tick is "0s ago", not "in 0s".
            t.heartbeat_title = format!("last heartbeat seen {}", absolute_and_relative(seen, now.max(seen)));
        }
        None => {
            // Not seen live yet: its time is the holder's, which says nothing
            // about how long ago on ours.
            t.heartbeat = format!("at {}*", hms(rec.heartbeat_at));
            t.heartbeat_title = format!(
                "heartbeat_at {} on the holder's clock; not yet seen live by this server",
                datetime(rec.heartbeat_at)
            );
        }
    }
    let c = &rec.contention;
    let rate = match c.attempts {
        0 => "–".to_string(),
        n => format!("{:.0} %", 100.0 * c.conflicts as f64 / n as f64),
    };
    t.contention = format!("{} / {} / {} / {}", c.attempts, c.acquired, c.conflicts, c.lost);
    t.contention_title = format!(
        "attempts {}, acquired {}, conflicts {} (conflict rate {rate}), lost {}; waits {} totalling {}",
        c.attempts,
        c.acquired,
        c.conflicts,
        c.lost,
        c.waits(),
        human_duration(c.wait_sum_ms as i64)
    );
    if let Some(skew) = entry.skew_estimate() {
        t.skew = if skew.abs() >= SKEW_SHOWN_FROM_MS {
            let dir = if skew > 0 { "ahead" } else { "behind" };
            format!("{} {dir}", human_duration(skew))
        } else {
            "under 1 s".into()
        };
        t.skew_title = format!(
            "holder clock minus server clock ≥ {skew} ms (heartbeat_at minus when it was seen; \
             the true offset is this plus up to the delivery delay)"
        );
    }
    t
}

#[component]
pub fn SessionsPage() -> impl IntoView {
    let live = expect_context::<LiveView>();
    let list = Memo::new(move |_| {
        live.screen.with(|s| match s {
            Screen::Sessions { sessions } => sessions.clone(),
            _ => SessionList::default(),
        })
    });
    // Rows are keyed by session id and follow their own data, so a heartbeat
    // updates a row's cells instead of replacing the row (and closing a form
    // someone is filling in).
    let index = Memo::new(move |_| {
        list.with(|l| {
            l.rows
                .iter()
                .enumerate()
                .map(|(i, r)| (r.id.clone(), i))
                .collect::<HashMap<_, _>>()
        })
    });
    let ids = move || list.with(|l| l.rows.iter().map(|r| r.id.clone()).collect::<Vec<_>>());
    let blacklist = may_on_sessions(Action::Blacklist);
    let unblacklist = may_on_sessions(Action::Unblacklist);
    let acts = Memo::new(move |_| blacklist.get() || unblacklist.get());
    let fleet = move || live.fleet.get();
    let row = move |id: String| {
        let r = {
            let id = id.clone();
            Memo::new(move |_| index.with(|ix| ix.get(&id).and_then(|&i| list.with(|l| l.rows.get(i).cloned()))))
        };
        let text = Memo::new(move |_| {
            r.with(|r| {
                r.as_ref()
                    .map(|r| match (r.is_lease, r.foreign.as_deref()) {
                        (true, _) => lease_row_text(r, live.now.get()),
                        (false, Some(f)) => foreign::row_text(r, f, live.now.get()),
                        (false, None) => session_text(r.entry.as_ref(), r.blacklist.as_ref(), live.now.get()),
                    })
                    .unwrap_or_default()
            })
        });
        let holder = Memo::new(move |_| field(r, |r| r.holder));
        let deadlock = Memo::new(move |_| field(r, |r| r.deadlock));
        let blacklisted = Memo::new(move |_| field(r, |r| r.blacklist.is_some()));
        let word = move || holder_word(holder.get()).0;
        let waiting = move || {
            field(r, |r| r.waiting_for.clone())
                .into_iter()
                .map(|l| view! { <a href=lock_href(&fleet(), &l) class="lock-link">{l.clone()}</a>" " })
                .collect_view()
        };
        let actions = {
            let id = id.clone();
            move || {
                acts.get().then(|| {
                    let session = id.clone();
                    view! { <td class="act">{move || view! { <SessionActions session=session.clone() blacklisted=blacklisted.get()/> }}</td> }
                })
            }
        };
        view! {
            <tr data-testid="session-row" data-session=id.clone() data-state=word class=word>
                <td class="st" title=move || holder.get().reason()><span class="icon" aria-hidden="true">{move || holder_word(holder.get()).1}</span>{word}
                    {move || deadlock.get().then(|| view! { <span class="deadlock-flag" title="on a wait-for cycle: it and the sessions it waits for wait for each other">" ⟲ deadlock"</span> })}
                </td>
                <td class="who"><span class="where">{move || text.with(|t| t.who.clone())}</span>" "<span class="session" title=id.clone()>{short_id(&id)}</span></td>
                {actions}
                <td class="started" title=move || text.with(|t| t.started_title.clone())>{move || text.with(|t| t.started.clone())}</td>
                <td class="beat" data-testid="heartbeat-age" title=move || text.with(|t| t.heartbeat_title.clone())>{move || text.with(|t| t.heartbeat.clone())}</td>
                <td class="held" title=move || text.with(|t| t.holds.clone())><a href=move || locks_href(&fleet())>{move || field(r, |r| r.locks_held)}</a></td>
                <td class="waiting">{waiting}</td>
                <td class="contention" title=move || text.with(|t| t.contention_title.clone())>{move || text.with(|t| t.contention.clone())}</td>
                <td class="skew" data-testid="skew" title=move || text.with(|t| t.skew_title.clone())>{move || text.with(|t| t.skew.clone())}</td>
                <td class="blacklist">{move || text.with(|t| t.blacklist.clone())}</td>
            </tr>
        }
        .into_any()
    };
    view! {
        <h2>"Sessions"</h2>
        <p class="hint">
            {move || list.with(|l| if l.tracked {
                format!("{} sessions; blacklisted and deadlocked first. Heartbeat ages are on this server's clock; * marks one not yet seen live.", l.total)
            } else if l.rows.iter().any(|r| r.foreign.is_some()) {
                format!("{} ZooKeeper sessions or PostgreSQL backends, as the fleet's locks show them: each with the locks it holds (hover the count) and waits for. What no lock tells is unknown.", l.total)
            } else if l.rows.iter().any(|r| r.is_lease) {
                format!("{} etcd leases: each is the session of the mutex keys on it. The heartbeat column is its TTL left of granted as last read (hover for the keys on it).", l.total)
            } else {
                "This store keeps no sessions.".to_string()
            })}
        </p>
        {move || blacklist.get().then(|| view! { <p class="hint">"Blacklisting a session: " {BLACKLIST_EXPLAINED}</p> })}
        <div class="wide">
            <table class="sessions" data-testid="sessions">
                <thead>
                    <tr>
                        <th class="st">"state"</th>
                        <th class="who">"service@host:pid · session"</th>
                        {move || acts.get().then(|| view! { <th class="act">"action"</th> })}
                        <th class="started">"up"</th>
                        <th class="beat">"heartbeat"</th>
                        <th class="held">"locks"</th>
                        <th class="waiting">"waiting for"</th>
                        <th class="contention" title="attempts / acquired / conflicts / lost">"att / acq / confl / lost"</th>
                        <th class="skew">"clock skew"</th>
                        <th class="blacklist">"blacklisted"</th>
                    </tr>
                </thead>
                <tbody>
                    <For each=ids key=|id| id.clone() let:id>
                        {row(id)}
                    </For>
                </tbody>
            </table>
        </div>
        {move || list.with(|l| (l.total > l.rows.len() as u64).then(|| view! {
            <p class="hint">{format!("showing the first {} of {}", l.rows.len(), l.total)}</p>
        }))}
    }
    .into_any()
}

/// One field of a row that may just have left the list (then the default).
fn field<T: Default>(r: Memo<Option<SessionRow>>, f: impl Fn(&SessionRow) -> T) -> T {
    r.with(|r| r.as_ref().map(f).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(seen_at: Option<Millis>) -> SessionRow {
        let raw = r#"{"v":1,"session":"s1","service":"billing","host":"h1","pid":42,"started_at":1000,"heartbeat_at":50000,
            "contention":{"attempts":10,"acquired":8,"conflicts":2,"lost":1,"wait_buckets":[1,0,0,0,0,0,0,0,0,0,0],"wait_sum_ms":5}}"#;
        SessionRow {
            id: "s1".into(),
            entry: Some(SessionEntry::from_stored("s1".into(), 1, raw.as_bytes(), seen_at)),
            holder: Holder::Alive,
            locks_held: 2,
            waiting_for: vec![],
            blacklist: None,
            deadlock: false,
            lease: None,
            is_lease: false,
            foreign: None,
        }
    }

    #[test]
    fn heartbeat_age_is_on_our_clock_once_seen_live() {
        let text = |r: SessionRow, now| session_text(r.entry.as_ref(), r.blacklist.as_ref(), now);
        let t = text(row(Some(47_000)), 49_000);
        assert_eq!(t.who, "billing@h1:42");
        assert_eq!(t.heartbeat, "2s ago");
        assert_eq!(t.skew, "3s ahead", "heartbeat_at 50 s seen at 47 s");
        assert_eq!(t.contention, "10 / 8 / 2 / 1");
        assert!(t.contention_title.contains("conflict rate 20 %"));
        assert_eq!(t.started, "49s", "heartbeat_at minus started_at, both the holder's");
        let snap = text(row(None), 52_000);
        assert_eq!(
            snap.heartbeat, "at 00:00:50 UTC*",
            "the holder's time, not an age on our clock"
        );
        assert_eq!(snap.skew, "", "no estimate from a snapshot");
    }

    #[test]
    fn small_skews_are_not_shown() {
        let r = row(Some(49_500));
        let t = session_text(r.entry.as_ref(), None, 50_000);
        assert_eq!(t.skew, "under 1 s");
        assert!(t.skew_title.contains("500 ms"));
    }
}
