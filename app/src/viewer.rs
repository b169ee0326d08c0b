//! Who is looking, and what became of their last action: the warning every
//! page carries when no authentication is configured, the header's "signed in
//! as" with its sign-out button, and the notice a page shows after one of the
//! viewer's own admin actions (the server redirects back with `?audit=ID` and
//! the page carries that audit entry). Outcomes are words and icons, never
//! colour alone; the audit page uses the same words.

use leptos::prelude::*;
use lockscope_model::admin::{Action, AuditEntry, Outcome, Viewer};
use lockscope_model::time::{absolute_and_relative, rfc3339};

use crate::live::LiveView;

/// An outcome as a word and an icon.
pub fn outcome_word(o: Option<Outcome>) -> (&'static str, &'static str) {
    match o {
        Some(Outcome::Done) => ("done", "✓"),
        Some(Outcome::Changed) => ("changed", "≠"),
        Some(Outcome::Refused) => ("refused", "✖"),
        None => ("unknown", "?"),
    }
}

/// What the notice says about `e`, in one sentence.
pub fn notice_text(e: &AuditEntry) -> String {
    match e.outcome {
        Some(Outcome::Done) => match e.action {
            Some(Action::Release) => match e.fence {
                Some(fence) => format!("Released fence {fence} of {}", e.target),
                None => format!("Released {}", e.target),
            },
            Some(Action::Blacklist) => format!("Blacklisted session {}", e.target),
            Some(Action::Unblacklist) => format!("Lifted the blacklist of session {}", e.target),
            Some(Action::Cancel) => format!("Done: {}", e.detail),
            None => format!("Done: {}", e.detail),
        },
        Some(Outcome::Changed) => match e.action {
            Some(Action::Release) => format!("Nothing was released: {}", e.detail),
            Some(Action::Cancel) => format!("Nothing was cancelled: {}", e.detail),
            _ => format!("Nothing was done: {}", e.detail),
        },
        Some(Outcome::Refused) => format!("Refused: {}", e.detail),
        None => format!("Outcome unknown: {}", e.detail),
    }
}

/// A warning strip above the header when the server has no authentication.
#[component]
pub fn NoAuthBanner() -> impl IntoView {
    let viewer = expect_context::<Viewer>();
    viewer.no_auth.then(|| {
        view! {
            <div class="no-auth" data-testid="no-auth-banner" role="note">
                <span class="icon" aria-hidden="true">"⚠"</span>
                "No authentication: anyone who can reach this port is admin"
            </div>
        }
    })
}

/// "signed in as ACTOR (ROLE)", with a sign-out button for a token session.
#[component]
pub fn WhoAmI(
    /// The sign-in page: nobody is signed in yet.
    signing_in: bool,
) -> impl IntoView {
    let viewer = expect_context::<Viewer>();
    if viewer.no_auth {
        return None;
    }
    if signing_in {
        return Some(view! { <span class="whoami" data-testid="whoami">"not signed in"</span> }.into_any());
    }
    let signout = viewer.signed_in.then(|| {
        view! {
            <form method="post" action="/signout" class="signout">
                <input type="hidden" name="csrf" value=viewer.csrf.clone()/>
                <button type="submit" data-testid="signout">"sign out"</button>
            </form>
        }
    });
    Some(
        view! {
            <span class="whoami" data-testid="whoami" data-role=viewer.role.as_str()>
                "signed in as " <b>{viewer.actor.clone()}</b> {format!(" ({})", viewer.role.as_str())}
                {signout}
            </span>
        }
        .into_any(),
    )
}

/// The outcome of the viewer's last action, at the top of the page.
#[component]
pub fn Notice(entry: AuditEntry) -> impl IntoView {
    let live = expect_context::<LiveView>();
    let (word, icon) = outcome_word(entry.outcome);
    let at = entry.at;
    let fleet = (!entry.fleet.is_empty()).then(|| format!(" · fleet {}", entry.fleet));
    view! {
        <div class="notice" data-testid="notice" data-outcome=word role="status">
            <span class="icon" aria-hidden="true">{icon}</span>
            <span class="text" data-testid="notice-text">{notice_text(&entry)}</span>
            <span class="when">
                <time datetime=rfc3339(at)>{move || absolute_and_relative(at, live.now.get())}</time>
                {fleet}
            </span>
        </div>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(action: Action, outcome: Outcome, detail: &str) -> AuditEntry {
        AuditEntry {
            action: Some(action),
            outcome: Some(outcome),
            target: match action {
                Action::Release => "demo/job-3".into(),
                _ => "s-1".into(),
            },
            fence: (action == Action::Release).then_some(5),
            detail: detail.into(),
            ..AuditEntry::default()
        }
    }

    #[test]
    fn notices_say_what_happened_in_words() {
        assert_eq!(
            notice_text(&entry(Action::Release, Outcome::Done, "")),
            "Released fence 5 of demo/job-3"
        );
        assert_eq!(
            notice_text(&entry(Action::Blacklist, Outcome::Done, "")),
            "Blacklisted session s-1"
        );
        assert_eq!(
            notice_text(&entry(Action::Release, Outcome::Changed, "now fence 6 held by x@h:1")),
            "Nothing was released: now fence 6 held by x@h:1"
        );
        assert_eq!(
            notice_text(&entry(Action::Unblacklist, Outcome::Refused, "needs role admin")),
            "Refused: needs role admin"
        );
        assert_eq!(outcome_word(Some(Outcome::Done)), ("done", "✓"));
        assert_eq!(outcome_word(None).0, "unknown");
    }
}
