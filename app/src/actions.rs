//! The admin forms the lock detail and sessions pages share: blacklisting a
//! session and lifting its blacklist, and the frame every admin form has.
//!
//! They are plain HTML forms posted to the server's `/actions/…` endpoints:
//! they work without JavaScript and are not intercepted after hydration (the
//! server answers 303 back to the page named by `back`, with `audit=ID`, and
//! that page shows the outcome as its notice). Each carries the page's CSRF
//! token. They are shown only to viewers who may use them, on fleets whose store
//! accepts actions; the server checks both again.
//!
//! A live page re-renders often (heartbeats, the clock), so a form must sit
//! where only a change of what it acts on re-renders it: otherwise an open form
//! would close, and lose its typed reason, on the next heartbeat.

use leptos::prelude::*;
use lockscope_model::admin::MAX_REASON_BYTES;
use lockscope_model::admin::{Action, Viewer};
use lockscope_model::Screen;

use crate::links::{charts_href, history_href, href, lock_href, sessions_href};
use crate::live::LiveView;
use crate::rows::short;

/// What blacklisting does, in one line (shown beside every blacklist form).
pub const BLACKLIST_EXPLAINED: &str = "Its next heartbeat fails, so its client learns it lost its locks; \
     its locks stop being extended and run out at auto-unlock.";

/// What lifting a blacklist does, in one line.
pub const UNBLACKLIST_EXPLAINED: &str =
    "Its heartbeats succeed again; locks it lost while blacklisted are not given back.";

/// The page a form returns to: this page's path and query, built from what it
/// shows (so a previous `audit=` is not carried along).
pub fn back_path(live: LiveView) -> String {
    let fleet = live.fleet.get_untracked();
    live.screen.with_untracked(|s| match s {
        Screen::Lock { detail } => lock_href(&fleet, &detail.name),
        Screen::Sessions { .. } => sessions_href(&fleet),
        Screen::Locks => href(&fleet, &live.view.get_untracked()),
        Screen::Audit { .. } => "/audit".into(),
        Screen::History { review } => {
            let pairs = review.form.query_pairs();
            let pairs: Vec<_> = pairs.into_iter().map(|(k, v)| (k, v.to_string())).collect();
            history_href(&fleet, &pairs)
        }
        Screen::Charts { charts } => charts_href(&fleet, charts.window),
        Screen::SignIn { .. } => "/".into(),
    })
}

/// A form posting to `action`, with the hidden fields every admin form sends
/// (`csrf`, `back`, `fleet`).
#[component]
pub fn AdminForm(
    action: &'static str,
    testid: &'static str,
    #[prop(optional)] class: &'static str,
    children: Children,
) -> impl IntoView {
    let live = expect_context::<LiveView>();
    let viewer = expect_context::<Viewer>();
    view! {
        <form method="post" action=action class=format!("admin {class}") data-testid=testid>
            <input type="hidden" name="csrf" value=viewer.csrf/>
            <input type="hidden" name="back" value=back_path(live)/>
            <input type="hidden" name="fleet" value=live.fleet.get_untracked()/>
            {children()}
        </form>
    }
}

/// The required reason field of a session form.
#[component]
fn Reason(testid: &'static str) -> impl IntoView {
    view! {
        <label class="field">
            <span>"Reason (kept in the audit log)"</span>
            <input type="text" name="reason" required maxlength=MAX_REASON_BYTES autocomplete="off" data-testid=testid/>
        </label>
    }
}

/// Blacklists `session` of the page's fleet.
#[component]
pub fn BlacklistForm(session: String) -> impl IntoView {
    let button = format!("Blacklist session {}", short(&session));
    view! {
        <AdminForm action="/actions/blacklist" testid="blacklist-form">
            <input type="hidden" name="session" value=session/>
            <p class="explain">{BLACKLIST_EXPLAINED}</p>
            <Reason testid="blacklist-reason"/>
            <button type="submit" class="danger" data-testid="blacklist-submit">{button}</button>
        </AdminForm>
    }
}

/// Lifts the blacklist of `session` of the page's fleet.
#[component]
pub fn UnblacklistForm(session: String) -> impl IntoView {
    let button = format!("Lift the blacklist of {}", short(&session));
    view! {
        <AdminForm action="/actions/unblacklist" testid="unblacklist-form">
            <input type="hidden" name="session" value=session/>
            <p class="explain">{UNBLACKLIST_EXPLAINED}</p>
            <Reason testid="unblacklist-reason"/>
            <button type="submit" data-testid="unblacklist-submit">{button}</button>
        </AdminForm>
    }
}

/// Whether the viewer may take `action` on the page's fleet's sessions, and
/// the fleet accepts actions at all (reactive only in the latter, and only
/// when it changes).
pub fn may_on_sessions(action: Action) -> Memo<bool> {
    let live = expect_context::<LiveView>();
    let viewer = expect_context::<Viewer>();
    let may = viewer.may(action, &live.fleet.get_untracked(), None);
    Memo::new(move |_| may && live.writable())
}

/// What the viewer may do to `session`: blacklist it, or lift its blacklist,
/// each folded behind a `<details>` until asked for. Nothing when the viewer
/// may not, or the fleet is read-only.
#[component]
pub fn SessionActions(session: String, blacklisted: bool) -> impl IntoView {
    let (action, testid, summary) = if blacklisted {
        (Action::Unblacklist, "unblacklist", "Lift blacklist…")
    } else {
        (Action::Blacklist, "blacklist", "Blacklist…")
    };
    let allowed = may_on_sessions(action);
    move || {
        let session = session.clone();
        allowed.get().then(|| {
            let form = if blacklisted {
                view! { <UnblacklistForm session/> }.into_any()
            } else {
                view! { <BlacklistForm session/> }.into_any()
            };
            let node = NodeRef::<leptos::html::Details>::new();
            view! {
                <details class="action" data-testid=testid node_ref=node
                    on:toggle=move |_| crate::focus::on_toggle(node)
                    on:keydown=move |ev| crate::focus::on_keydown(node, ev)>
                    <summary>{summary}</summary>
                    {form}
                </details>
            }
        })
    }
}
