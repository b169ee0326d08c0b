//! The lock detail page's force-release dialog (`<details>`, posting to
//! `/actions/release`).
//!
//! A force-release that deletes a lock someone else just acquired is the worst
//! thing this product can do, so the dialog acts on exactly what the operator
//! read: opening it freezes a snapshot of the lock, the dialog shows that
//! snapshot and posts its fencing token, owner id and revision (the server deletes
//! only that acquisition). Should the live lock move on meanwhile (another
//! acquisition, or released), the dialog says so prominently. Rendered by the
//! server (or without JavaScript), the snapshot is the rendered lock itself.
//!
//! An alive holder does not learn it lost its lock until its next extend, so for
//! one the dialog recommends blacklisting its session first, and offers that
//! form before the release form.

use leptos::prelude::*;
use lockscope_model::admin::MAX_REASON_BYTES;
use lockscope_model::admin::{Action, Viewer};
use lockscope_model::detail::LockDetail;
use lockscope_model::time::{absolute_and_relative, rfc3339, Millis};
use lockscope_model::{Holder, LockBody, LockEntry};

use crate::actions::{may_on_sessions, AdminForm, BlacklistForm};
use crate::live::LiveView;
use crate::sessions::{holder_word, session_text};

/// What a force-release means for an etcd native mutex's holder and waiters
/// (docs/operations.md, "etcd's native mutexes" says the same).
pub const MUTEX_RELEASE_NOTE: &str = "The holder's process is not told: etcd's mutex and election clients do not \
     watch their own key once they hold it, so it carries on as if it still held the lock (an election's next \
     Proclaim fails). Its first waiter proceeds because every waiter watches the delete of the key just before \
     its own: that delete is its turn. To stop the holder too, blacklist its session: that revokes its lease, \
     which deletes every key it holds or waits with.";

/// The snapshot the open dialog shows, and when it was taken (server clock).
type Snapshot = Option<(LockDetail, Millis)>;

/// "service@host:pid (session ID)", or what is known of a malformed record or
/// of a foreign schema's lock (its session at most).
pub fn holder_text(e: &LockEntry) -> String {
    match &e.body {
        LockBody::Held(r) => format!("{} (session {})", r.holder(), r.session),
        LockBody::Malformed { .. } => "an unknown holder (its record is malformed)".into(),
        LockBody::Foreign { session: Some(s), .. } => format!("session {s} (foreign schema)"),
        LockBody::Foreign { session: None, .. } => "an unknown session (foreign schema)".into(),
    }
}

/// The warning for a dialog opened on `seen` when the lock is now `now`:
/// `None` while it is still the same acquisition (same fencing token).
pub fn stale_text(seen: &LockDetail, now: &LockDetail) -> Option<String> {
    let fence = |d: &LockDetail| d.entry.as_ref().map(|e| e.fence);
    if fence(seen) == fence(now) {
        return None;
    }
    Some(match &now.entry {
        Some(e) => format!(
            "This lock changed since you opened this: now fence {} held by {}; releasing would do nothing \
             — close and reopen to act on the current holder.",
            e.fence,
            holder_text(e)
        ),
        None => "This lock changed since you opened this: nobody holds it now; releasing would do nothing \
                 — close this."
            .into(),
    })
}

/// The "Force-release…" section: only on a writable fleet, for a viewer who may
/// release this lock, while it is held (or while the dialog is open on it).
#[component]
pub fn ReleaseSection(detail: Memo<LockDetail>) -> impl IntoView {
    let live = expect_context::<LiveView>();
    let viewer = expect_context::<Viewer>();
    let name = detail.with_untracked(|d| d.name.clone());
    let may = viewer.may(Action::Release, &live.fleet.get_untracked(), Some(&name));
    let snapshot = RwSignal::new(Snapshot::None);
    let held = Memo::new(move |_| detail.with(|d| d.entry.is_some()));
    let shown = Memo::new(move |_| may && live.writable() && (held.get() || snapshot.with(Option::is_some)));
    (move || shown.get().then(|| view! { <ReleaseDialog detail snapshot/> })).into_any()
}

#[component]
fn ReleaseDialog(detail: Memo<LockDetail>, snapshot: RwSignal<Snapshot>) -> impl IntoView {
    let live = expect_context::<LiveView>();
    let node = NodeRef::<leptos::html::Details>::new();
    // Opening freezes what the operator sees; closing lets go of it.
    let sync = move || {
        let Some(el) = node.get_untracked() else { return };
        match (el.open(), snapshot.with_untracked(Option::is_some)) {
            (true, false) => snapshot.set(Some((detail.get_untracked(), live.now.get_untracked()))),
            (false, true) => snapshot.set(None),
            _ => {}
        }
    };
    // Opened before the page hydrated: the snapshot is what it rendered.
    Effect::new(move |_| {
        if node.get().is_some() {
            sync();
        }
    });
    let seen = Memo::new(move |_| {
        snapshot
            .with(|s| s.as_ref().map(|(d, _)| d.clone()))
            .unwrap_or_else(|| detail.get())
    });
    let stale =
        Memo::new(move |_| snapshot.with(|s| s.as_ref().and_then(|(d, _)| detail.with(|now| stale_text(d, now)))));
    let when = move || {
        snapshot.with(|s| {
            s.as_ref().map(|(_, at)| {
                format!(
                    "What you are acting on, as it was when you opened this ({}):",
                    absolute_and_relative(*at, live.now.get())
                )
            })
        })
    };
    view! {
        <details class="dialog release" data-testid="release-dialog" node_ref=node
            on:toggle=move |_| { sync(); crate::focus::on_toggle(node) }
            on:keydown=move |ev| crate::focus::on_keydown(node, ev)>
            <summary>"Force-release…"</summary>
            <div class="dialog-body" role="group" aria-label="Force-release this lock">
                {move || stale.get().map(|text| view! {
                    <p class="warning stale" data-testid="release-stale" role="alert">
                        <span class="icon" aria-hidden="true">"⚠"</span>{text}
                    </p>
                })}
                <p class="hint">{move || when().unwrap_or_else(|| "What you are acting on:".into())}</p>
                <Facts seen/>
                <AliveWarning seen/>
                <ReleaseForm seen/>
            </div>
        </details>
    }
    .into_any()
}

/// For a holder that is alive: it keeps running as if it held the lock, so
/// blacklist its session first (that form right here).
#[component]
fn AliveWarning(seen: Memo<LockDetail>) -> impl IntoView {
    let alive_session = Memo::new(move |_| {
        seen.with(|d| {
            (d.holder == Holder::Alive)
                .then(|| d.entry.as_ref().and_then(|e| e.record()).map(|r| r.session.to_string()))
                .flatten()
        })
    });
    let may_blacklist = may_on_sessions(Action::Blacklist);
    (move || {
        alive_session.get().map(|session| {
            view! {
                <div class="warning alive" data-testid="release-alive">
                    <p>
                        <span class="icon" aria-hidden="true">"⚠"</span>
                        "The holder is alive and heartbeating: it will not learn it lost the lock until its next \
                         extend. Prefer blacklisting its session first."
                    </p>
                    {move || may_blacklist.get().then(|| view! { <BlacklistForm session=session.clone()/> })}
                </div>
            }
        })
    })
    .into_any()
}

/// The release itself, of the fencing token and revision in `seen`.
#[component]
fn ReleaseForm(seen: Memo<LockDetail>) -> impl IntoView {
    let fence = Memo::new(move |_| seen.with(|d| d.entry.as_ref().map(|e| e.fence)));
    let revision = Memo::new(move |_| seen.with(|d| d.entry.as_ref().map(|e| e.revision)));
    // The acquisition's own id (fresh per acquisition): the server releases only
    // the one with this fence *and* this owner. Empty: the lock shows none
    // (a malformed value, a foreign schema's row).
    let owner = Memo::new(move |_| {
        seen.with(|d| {
            d.entry
                .as_ref()
                .and_then(|e| e.record())
                .map(|r| r.owner.clone())
                .unwrap_or_default()
        })
    });
    let name = seen.with_untracked(|d| d.name.clone());
    view! {
        <AdminForm action="/actions/release" testid="release-form" class="release-form">
            <input type="hidden" name="name" value=name.clone()/>
            <input type="hidden" name="fence" value=move || fence.get()/>
            <input type="hidden" name="revision" value=move || revision.get()/>
            <input type="hidden" name="owner" value=move || owner.get()/>
            <p class="explain">
                {move || format!(
                    "Deletes the lock only if it is still this acquisition (fence {}); if it changed, nothing \
                     is deleted and you are told what is there now. Waiters may acquire it at once.",
                    fence_text(fence.get())
                )}
            </p>
            <label class="field">
                <span>"Reason (kept in the audit log)"</span>
                <textarea name="reason" required maxlength=MAX_REASON_BYTES rows="2" data-testid="release-reason"></textarea>
            </label>
            <label class="field">
                <span>"Type the lock's name to confirm: " <code class="confirm-name">{name}</code></span>
                <input type="text" name="confirm" required autocomplete="off" autocapitalize="off"
                    spellcheck="false" data-testid="release-confirm"/>
            </label>
            <button type="submit" class="danger" data-testid="release-submit">
                {move || format!("Force-release fence {}", fence_text(fence.get()))}
            </button>
        </AdminForm>
    }
    .into_any()
}

fn fence_text(fence: Option<i64>) -> String {
    fence.map_or_else(|| "(not held)".into(), |f| f.to_string())
}

/// The facts of the snapshot: who holds it, whether that holder is alive, what
/// for, who waits, and the token the release compares on.
#[component]
fn Facts(seen: Memo<LockDetail>) -> impl IntoView {
    let live = expect_context::<LiveView>();
    // The ages follow the clock; the rest only the snapshot.
    let heartbeat = move || {
        let now = live.now.get();
        seen.with(|d| match (&d.session, d.entry.as_ref().and_then(|e| e.record())) {
            (Some(s), _) => session_text(Some(s), d.blacklist.as_ref(), now).heartbeat_title,
            (None, Some(r)) => format!(
                "no session record; the lock was last extended {} (holder's clock)",
                absolute_and_relative(r.heartbeat_at, now)
            ),
            (None, None) => "unknown".into(),
        })
    };
    let auto_unlock = move || {
        let now = live.now.get();
        seen.with(|d| {
            d.entry
                .as_ref()
                .and_then(|e| e.record())
                .map(|r| (rfc3339(r.auto_unlock_at), absolute_and_relative(r.auto_unlock_at, now)))
        })
    };
    let foreign = move || {
        seen.with(|d| {
            d.entry
                .as_ref()
                .is_some_and(|e| matches!(e.body, LockBody::Foreign { .. }))
        })
    };
    let lease = move || {
        let now = live.now.get();
        seen.with(|d| match d.entry.as_ref().map(|e| &e.body) {
            Some(LockBody::Foreign { lease: Some(l), .. }) => Some(crate::lease::lease_text(l, now)),
            _ => None,
        })
    };
    let facts = move || {
        let d = seen.get();
        let (word, icon) = holder_word(d.holder);
        let (who, session, purpose) = match d.entry.as_ref().map(|e| (e, &e.body)) {
            Some((_, LockBody::Held(r))) => (r.holder(), r.session.to_string(), r.purpose.clone()),
            Some((_, LockBody::Malformed { error, .. })) => (
                "unknown: the record is malformed".into(),
                "unknown".into(),
                format!("unreadable ({error})"),
            ),
            // Only the session is known: the holder is described by it.
            Some((e, LockBody::Foreign { session, .. })) => (
                holder_text(e),
                session.clone().unwrap_or_else(|| "unknown".into()),
                "unknown (not kept by this schema)".into(),
            ),
            None => ("nobody (not held)".into(), "—".into(), "—".into()),
        };
        let waiters = d
            .waiters
            .iter()
            .map(|w| {
                let who = w.who.clone().unwrap_or_else(|| "unknown holder".into());
                view! { <li>{who}" "<code class="session">{w.session.clone()}</code></li> }
            })
            .collect_view();
        let count = match d.waiters.len() {
            0 => "nobody waits".to_string(),
            1 => "1 waits".to_string(),
            n => format!("{n} wait"),
        };
        let (fence, revision) = d
            .entry
            .as_ref()
            .map_or((None, None), |e| (Some(e.fence), Some(e.revision)));
        view! {
            <dt>"holder"</dt><dd data-testid="release-holder">{who}</dd>
            <dt>"session"</dt><dd><code>{session}</code></dd>
            <dt>"session liveness"</dt>
            <dd data-testid="release-liveness" data-state=word>
                <span class="icon" aria-hidden="true">{icon}</span>{word}" — "{d.holder.reason()}
            </dd>
            <dt>"purpose"</dt><dd>{purpose}</dd>
            <dt>"waiters"</dt>
            <dd data-testid="release-waiters">{count}{(!d.waiters.is_empty()).then(|| view! { <ul class="waiters">{waiters}</ul> })}</dd>
            <dt>"fencing token"</dt><dd data-testid="release-fence">{fence_text(fence)}</dd>
            <dt>"store revision"</dt><dd data-testid="release-revision">{revision.map(|r| r.to_string()).unwrap_or_else(|| "—".into())}</dd>
        }
    };
    view! {
        <section class="facts">
            <dl>
                {facts}
                <dt>"heartbeat"</dt><dd data-testid="release-heartbeat">{heartbeat}</dd>
                {move || auto_unlock().map(|(iso, text)| view! {
                    <dt>"auto-unlock at"</dt>
                    <dd><time datetime=iso>{text}</time>" — it runs out by itself then, unless extended"</dd>
                })}
                {move || foreign().then(|| view! {
                    <dt>"auto-unlock at"</dt>
                    <dd>"unknown: not kept by this schema (its own housekeeping releases such locks)"</dd>
                })}
                {move || lease().map(|text| view! {
                    <dt>"lease"</dt><dd data-testid="release-lease">{text}</dd>
                    <dt>"what a release does"</dt><dd data-testid="release-mutex-note">{MUTEX_RELEASE_NOTE}</dd>
                })}
            </dl>
        </section>
    }
    .into_any()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn detail(fence: Option<i64>) -> LockDetail {
        let rec = r#"{"v":1,"owner":"o","session":"s-9","service":"billing","host":"h1","pid":7,"acquired_at":0,
            "expected_runtime_ms":60000,"alert_at":60000,"auto_unlock_at":120000,"heartbeat_at":0}"#;
        LockDetail {
            name: "demo/job-3".into(),
            entry: fence.map(|f| LockEntry::from_stored("demo/job-3".into(), f, f + 1, rec.as_bytes())),
            ..LockDetail::default()
        }
    }

    #[test]
    fn the_dialog_warns_when_the_lock_moved_on() {
        assert_eq!(stale_text(&detail(Some(5)), &detail(Some(5))), None, "same acquisition");
        let moved = stale_text(&detail(Some(5)), &detail(Some(6))).unwrap();
        assert!(
            moved.contains("now fence 6 held by billing@h1:7 (session s-9)"),
            "{moved}"
        );
        assert!(moved.contains("releasing would do nothing"));
        let gone = stale_text(&detail(Some(5)), &detail(None)).unwrap();
        assert!(gone.contains("nobody holds it now"), "{gone}");
    }

    #[test]
    fn the_mutex_note_is_the_operations_guide() {
        let words = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
        let docs = words(include_str!("../../docs/operations.md"));
        assert!(
            docs.contains(&words(MUTEX_RELEASE_NOTE)),
            "docs/operations.md (etcd's native mutexes) says what the dialog says: the holder's process \
             is not told; its waiters proceed because each watches the delete of the key before its own"
        );
    }

    #[test]
    fn a_foreign_holder_is_its_session() {
        let e = LockEntry::foreign("t".into(), 4, 4, Some("s-7".into()), Some(0));
        assert_eq!(holder_text(&e), "session s-7 (foreign schema)");
        let anon = LockEntry::foreign("t".into(), 4, 4, None, None);
        assert_eq!(holder_text(&anon), "an unknown session (foreign schema)");
        let moved = LockDetail {
            entry: Some(e),
            ..detail(None)
        };
        let warning = stale_text(&detail(Some(5)), &moved).unwrap();
        assert!(
            warning.contains("now fence 4 held by session s-7 (foreign schema)"),
            "{warning}"
        );
    }
}
