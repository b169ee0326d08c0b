//! The browser's side of the admin console: plain HTML form posts (they work
//! before the page hydrates, and without JavaScript) for the admin actions and
//! for signing in and out. Every state-changing form carries the page's CSRF
//! token. An action that was done, or found its target changed, answers 303
//! back to the page it came from with `audit=ID` added, and that page shows the
//! outcome from the audit log; a refused one answers its status (401, 403, 409,
//! …) and the reason.

use axum::body::Body;
use axum::extract::{Query, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use lockscope_model::admin::{Action, Outcome, Role};
use lockscope_model::{Page, Screen};
use lockscope_store::now_ms;
use serde::Deserialize;

use crate::act::admin::{self, Attempt};
use crate::auth::{check_csrf, constant_time_eq, cookie, Identity, Via, Who, CSRF_COOKIE, SESSION_COOKIE};
use crate::web::caller::Caller;
use crate::web::error::status_of;
use crate::web::pages::{encode, render};
use crate::web::state::AppState;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/actions/release", post(release))
        .route("/actions/blacklist", post(blacklist))
        .route("/actions/unblacklist", post(unblacklist))
        .route("/actions/cancel", post(cancel))
        .route("/signin", get(signin_page).post(signin))
        .route("/signout", post(signout))
        .layer(axum::extract::DefaultBodyLimit::max(crate::web::api::MAX_BODY_BYTES))
}

/// Every action form's fields (missing ones are empty: the checks say what is
/// wrong, and the attempt is audited like any other).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ActionForm {
    csrf: String,
    back: String,
    fleet: String,
    /// Release: the lock.
    name: String,
    /// Blacklist, unblacklist: the session.
    session: String,
    fence: String,
    /// Release: the store revision the page showed.
    revision: String,
    /// Release: the owner id of the acquisition the page showed (empty: it
    /// showed none; absent: a form from before owners were sent, refused).
    owner: Option<String>,
    reason: String,
    /// Release: the lock's name typed again.
    confirm: String,
    /// Cancel: the waiting backend's pid and backend start (unix µs), as the page showed them.
    pid: String,
    backend_start_us: String,
}

/// A form that could not be read is still an attempt: audited, refused (400).
type Posted = Result<Form<ActionForm>, axum::extract::rejection::FormRejection>;

fn read(posted: Posted) -> (ActionForm, Option<String>) {
    match posted {
        Ok(Form(f)) => (f, None),
        Err(e) => (
            ActionForm::default(),
            Some(format!("the form could not be read: {}", e.body_text())),
        ),
    }
}

async fn release(State(state): State<AppState>, caller: Caller, posted: Posted) -> Response {
    let (f, unreadable) = read(posted);
    let fence = f.fence.trim().parse::<i64>();
    let invalid = unreadable.or(match (&fence, f.confirm.trim() == f.name, &f.owner) {
        (Err(_), _, _) => Some(format!("fence {:?} is not a fencing token", f.fence)),
        (_, false, _) => Some("type the lock's name exactly to confirm the release".to_string()),
        (_, _, None) => Some("the form names no owner of the acquisition: reload the page".to_string()),
        _ => None,
    });
    let fence = fence.ok();
    let owner = f.owner.clone().map(|o| Some(o).filter(|o| !o.is_empty()));
    let target = f.name.clone();
    act(state, caller, Action::Release, f, target, (fence, owner), invalid).await
}

async fn blacklist(State(state): State<AppState>, caller: Caller, posted: Posted) -> Response {
    let (f, invalid) = read(posted);
    let target = f.session.clone();
    act(state, caller, Action::Blacklist, f, target, (None, None), invalid).await
}

async fn unblacklist(State(state): State<AppState>, caller: Caller, posted: Posted) -> Response {
    let (f, invalid) = read(posted);
    let target = f.session.clone();
    act(state, caller, Action::Unblacklist, f, target, (None, None), invalid).await
}

async fn cancel(State(state): State<AppState>, caller: Caller, posted: Posted) -> Response {
    let (f, unreadable) = read(posted);
    let pid = f.pid.trim().parse::<i32>();
    let start = f.backend_start_us.trim().parse::<i64>();
    let invalid = unreadable.or(match (&pid, &start) {
        (Ok(_), Ok(_)) => None,
        _ => Some(format!(
            "pid {:?} and backend start {:?} do not name a backend: reload the page",
            f.pid, f.backend_start_us
        )),
    });
    let waiter = pid
        .ok()
        .zip(start.ok())
        .map(|(pid, start)| crate::web::api::waiter_id(pid, start));
    let target = f.name.clone();
    let (csrf, attempt) = attempt_of(&caller, Action::Cancel, &f, target, (None, None), invalid);
    finish(state, caller, Attempt { waiter, ..attempt }, csrf, &f.back).await
}

async fn act(
    state: AppState,
    caller: Caller,
    action: Action,
    f: ActionForm,
    target: String,
    (fence, owner): (Option<i64>, Option<Option<String>>),
    invalid: Option<String>,
) -> Response {
    let (csrf, attempt) = attempt_of(&caller, action, &f, target, (fence, owner), invalid);
    finish(state, caller, attempt, csrf, &f.back).await
}

/// The attempt a form makes, and its CSRF check.
fn attempt_of(
    caller: &Caller,
    action: Action,
    f: &ActionForm,
    target: String,
    (fence, owner): (Option<i64>, Option<Option<String>>),
    invalid: Option<String>,
) -> (Result<(), String>, Attempt) {
    let csrf = match &caller.who {
        Who::Known(id) => check_csrf(id, &caller.headers, Some(&f.csrf)),
        Who::Nobody(_) | Who::Ambiguous(_) => Ok(()),
    };
    let attempt = Attempt {
        action,
        fleet: f.fleet.clone(),
        target,
        fence,
        owner,
        waiter: None,
        revision: f.revision.trim().parse().ok(),
        reason: f.reason.clone(),
        via: "browser",
        invalid,
        source: caller.client,
    };
    (csrf, attempt)
}

/// Makes the attempt and answers the browser (see the module docs).
async fn finish(state: AppState, caller: Caller, attempt: Attempt, csrf: Result<(), String>, back: &str) -> Response {
    let answer = admin::attempt(&state.door(), &caller.who, csrf, attempt).await;
    let back = with_audit(back, answer.entry.id);
    let recorded = answer.entry.id != 0;
    match answer.entry.outcome {
        // Done, or nothing done because the target changed: the page shows the
        // outcome (from the audit log) beside what is there now.
        Some(Outcome::Done | Outcome::Changed) if recorded => Redirect::to(&back).into_response(),
        // Refused, or the log could not be written: said here, with the status
        // the API would answer.
        outcome => {
            // A known caller's answer without an id: its audit entry is
            // queued for the log (admin::Answer::audit_id), not lost.
            let queued = answer.audit_id.is_none();
            let (icon, word) = match outcome {
                Some(Outcome::Refused) => ("✖", "Refused"),
                Some(Outcome::Done) if queued => ("✔", "Done, its audit entry queued"),
                Some(Outcome::Changed) if queued => ("⚠", "Not done, the target changed; its audit entry queued"),
                _ => ("⚠", "Not recorded"),
            };
            let status = status_of(answer.verdict);
            let body = format!(
                "<!doctype html><meta charset=utf-8><title>{word} · lockscope</title>\
                 <p role=alert>{icon} {word} ({status}): {}</p><p><a href=\"{}\">Back</a></p>",
                escape(&answer.entry.detail),
                escape(&back)
            );
            (status, axum::response::Html(body)).into_response()
        }
    }
}

/// Text made safe inside HTML.
fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// `back` (a path on this server; anything else becomes `/`) with `audit=ID`.
fn with_audit(back: &str, id: i64) -> String {
    let back = local_path(back);
    let sep = if back.contains('?') { '&' } else { '?' };
    format!("{back}{sep}audit={id}")
}

/// `path` if it is a path on this server, else `/`: it starts with one `/`
/// (not `//` or `/\`, which browsers take for another host) and holds no
/// whitespace or control characters (which browsers drop before deciding).
fn local_path(path: &str) -> &str {
    let mut chars = path.chars();
    let local = chars.next() == Some('/')
        && !matches!(chars.next(), Some('/' | '\\'))
        && !path.chars().any(|c| c.is_whitespace() || c.is_control());
    if local {
        path
    } else {
        "/"
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct SignInQuery {
    next: String,
}

async fn signin_page(
    State(state): State<AppState>,
    caller: Caller,
    Query(q): Query<SignInQuery>,
    req: Request<Body>,
) -> Response {
    if !state.auth.enabled() {
        return Redirect::to("/").into_response();
    }
    signin_screen(&state, &caller, q.next, None, req).await
}

/// The sign-in form (to someone not yet known: they get a CSRF cookie, and a
/// page that names nobody and shows nothing of the fleets: no names, stores or
/// counts, which `/api/v1/fleets` refuses them too).
async fn signin_screen(
    state: &AppState,
    caller: &Caller,
    next: String,
    error: Option<String>,
    req: Request<Body>,
) -> Response {
    let stranger = Identity {
        actor: String::new(),
        role: Role::Viewer,
        scope: Vec::new(),
        via: Via::Proxy,
    };
    let page = Page {
        screen: Screen::SignIn {
            next,
            error: error.clone(),
        },
        server_time: now_ms(),
        ..Page::default()
    };
    let mut response = render(state, stranger, caller, page, req).await;
    if error.is_some() {
        *response.status_mut() = StatusCode::UNAUTHORIZED;
    }
    response
}

/// (No `Debug`: it holds a token.)
#[derive(Default, Deserialize)]
#[serde(default)]
struct SignInForm {
    token: String,
    next: String,
    csrf: String,
}

async fn signin(State(state): State<AppState>, caller: Caller, req: Request<Body>) -> Response {
    let (parts, body) = req.into_parts();
    let form = axum::body::to_bytes(body, crate::web::api::MAX_BODY_BYTES)
        .await
        .ok()
        .and_then(|b| serde_urlencoded::from_bytes::<SignInForm>(&b).ok())
        .unwrap_or_default();
    let req = Request::from_parts(parts, Body::empty());
    // Login CSRF: the form must come from our own sign-in page.
    let from_our_page = cookie(&caller.headers, CSRF_COOKIE)
        .is_some_and(|c| !form.csrf.is_empty() && constant_time_eq(c.as_bytes(), form.csrf.as_bytes()))
        && crate::auth::same_origin(&caller.headers).is_ok();
    if !from_our_page {
        return signin_screen(
            &state,
            &caller,
            form.next,
            Some("the form expired: try again".into()),
            req,
        )
        .await;
    }
    match state.auth.sign_in(&form.token, caller.client, now_ms()).await {
        Ok((id, session)) => {
            tracing::info!(actor = %id.actor, role = id.role.as_str(), "signed in");
            let next = local_path(&form.next).to_string();
            let mut r = Redirect::to(&next).into_response();
            let ttl = state.auth.session_ttl();
            if let Ok(c) = HeaderValue::from_str(&state.auth.set_cookie(
                &caller.headers,
                SESSION_COOKIE,
                &session.cookie,
                ttl,
            )) {
                r.headers_mut().append(header::SET_COOKIE, c);
            }
            r
        }
        Err(e) => {
            tracing::warn!(error = %e, "sign-in refused");
            signin_screen(&state, &caller, form.next, Some(e.to_string()), req).await
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct SignOutForm {
    csrf: String,
}

async fn signout(State(state): State<AppState>, caller: Caller, Form(f): Form<SignOutForm>) -> Response {
    if let Who::Known(id) = &caller.who {
        if let Err(why) = check_csrf(id, &caller.headers, Some(&f.csrf)) {
            return (StatusCode::FORBIDDEN, why).into_response();
        }
    }
    state.auth.sign_out(&caller.headers).await;
    let mut r = Redirect::to(&format!("/signin?next={}", encode("/"))).into_response();
    let gone = state
        .auth
        .set_cookie(&caller.headers, SESSION_COOKIE, "", std::time::Duration::ZERO);
    if let Ok(c) = HeaderValue::from_str(&gone) {
        r.headers_mut().append(header::SET_COOKIE, c);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn back_stays_on_this_server() {
        assert_eq!(with_audit("/lock?fleet=a&name=b", 7), "/lock?fleet=a&name=b&audit=7");
        assert_eq!(with_audit("/sessions", 7), "/sessions?audit=7");
        assert_eq!(with_audit("https://evil.example/", 7), "/?audit=7");
        assert_eq!(with_audit("//evil.example/", 7), "/?audit=7");
        for evil in [
            "/\\evil.example",
            "/\t/evil.example",
            "\t//evil.example",
            "/a b",
            "/\u{7f}",
        ] {
            assert_eq!(local_path(evil), "/", "{evil:?}");
        }
        assert_eq!(local_path("/lock?fleet=a&name=b%2Fc"), "/lock?fleet=a&name=b%2Fc");
    }
}
