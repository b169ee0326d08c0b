//! The sign-in page (`/signin`): authentication is configured and this browser
//! has no session yet. A plain form posting an API token to `/signin`; the
//! server answers with the page the viewer wanted (`next`), or this page again
//! with what went wrong.

use leptos::prelude::*;
use lockscope_model::admin::Viewer;
use lockscope_model::Screen;

use crate::live::LiveView;

#[component]
pub fn SignInPage() -> impl IntoView {
    let live = expect_context::<LiveView>();
    let viewer = expect_context::<Viewer>();
    let (next, error) = live.screen.with_untracked(|s| match s {
        Screen::SignIn { next, error } => (next.clone(), error.clone()),
        _ => Default::default(),
    });
    view! {
        <section class="signin">
            <h2>"Sign in"</h2>
            {error.map(|e| view! {
                <p class="error" data-testid="signin-error" role="alert">
                    <span class="icon" aria-hidden="true">"⚠ "</span>{e}
                </p>
            })}
            <form method="post" action="/signin" class="admin signin" data-testid="signin-form">
                <input type="hidden" name="csrf" value=viewer.csrf/>
                <input type="hidden" name="next" value=next/>
                <label class="field">
                    <span>"API token"</span>
                    <input type="password" name="token" required autocomplete="current-password" autofocus
                        data-testid="signin-token"/>
                </label>
                <button type="submit" data-testid="signin-submit">"Sign in"</button>
            </form>
            <p class="hint">
                "No token? Ask an admin; tokens are configured in lockscope.toml — see docs/operations.md."
            </p>
        </section>
    }
}
