//! The API's OpenAPI 3.1 document, served at `GET /api/v1/openapi.json`
//! (docs/api.md, "OpenAPI"). It is generated from the code that serves the
//! API: each handler carries a `#[utoipa::path]` attribute, and the router is
//! built with `utoipa_axum`'s `routes!`, which adds a handler's route and its
//! description to the document in one step ([`served`]). The answers'
//! schemas are derived from the wire types themselves (`lockscope-model`'s
//! `openapi` feature, the server's own `ErrorBody` and list pages).
//!
//! Served to anyone, without credentials: it says what every copy of this
//! version says (docs/api.md), and nothing of this server's fleets, stores,
//! identities or configuration; `info.version` is the API's (`1`), not the build's.

use std::sync::Arc;

use axum::http::header;
use axum::response::IntoResponse;
use axum::{Extension, Router};
use lockscope_model::admin::Outcome;
use lockscope_model::{FleetSummary, LockEntry};
use serde::Serialize;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{IntoParams, IntoResponses, Modify, OpenApi, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::web::error::ErrorBody;
use crate::web::state::AppState;

/// Where the document is served.
pub const PATH: &str = "/api/v1/openapi.json";

#[derive(OpenApi)]
#[openapi(
    info(
        title = "lockscope",
        version = "1",
        description = "The lockscope dashboard's HTTP API (docs/api.md): fleets, their locks and \
sessions, the admin actions, the audit log, the lock history and the contention charts; and the \
probes (/healthz, /metrics). Without [auth] in lockscope.toml every request is the admin \
`anonymous` (the server then listens on loopback only); with [auth], a Bearer token from \
`lockscope token`, the trusted proxy's header or the sign-in cookie. Each operation's \
description names the least role it needs (viewer < operator < admin). Errors are \
`{\"error\": \"<why>\"}` (ErrorBody); actions always answer an ActionAnswer.",
        license(name = "Apache-2.0")
    ),
    modifiers(&Credentials),
    security(("bearer" = []), ("cookie" = [])),
    components(schemas(ErrorBody, ActionAnswer)),
    tags(
        (name = "fleets", description = "The fleets this server watches"),
        (name = "locks", description = "Locks, live"),
        (name = "sessions", description = "Sessions and the blacklist"),
        (name = "actions", description = "Admin actions, each audited (CSRF rules: docs/api.md)"),
        (name = "audit", description = "The audit log"),
        (name = "history", description = "The lock history"),
        (name = "charts", description = "Contention charts"),
        (name = "probes", description = "Liveness, metrics and this document"),
    )
)]
struct ApiDoc;

/// The two ways a script or browser authenticates (docs/api.md, "Authentication").
struct Credentials;

impl Modify for Credentials {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("<id>.<secret> (lockscope token)")
                    .description(Some("A token made by `lockscope token`."))
                    .build(),
            ),
        );
        components.add_security_scheme(
            "cookie",
            SecurityScheme::ApiKey(ApiKey::Cookie(ApiKeyValue::with_description(
                crate::auth::SESSION_COOKIE,
                "The sign-in page's session; state-changing calls also need X-CSRF-Token.",
            ))),
        );
    }
}

/// What every admin action answers, whatever its status (docs/api.md, "Actions").
// Documentation of `act::admin::Answer::json`; the served answers are
// checked against it by the OpenAPI tests.
#[derive(Serialize, ToSchema)]
#[allow(dead_code)] // documents `Answer::json`, never built
pub struct ActionAnswer {
    /// How the attempt ended (`null`: refused before it was an attempt).
    outcome: Option<Outcome>,
    /// What happened, in words.
    detail: String,
    /// The audit log's entry for it (`null`: not recorded yet, or not at all).
    audit_id: Option<i64>,
    /// Release only: whether the lock was released.
    #[schema(required = false)]
    released: Option<bool>,
    /// Cancel only: whether the wait was cancelled.
    #[schema(required = false)]
    cancelled: Option<bool>,
    /// Release and cancel, outcome `changed`: the lock as it is now.
    #[schema(required = false)]
    current: Option<LockEntry>,
}

/// `GET /healthz`'s answer.
#[derive(Serialize, ToSchema)]
#[allow(dead_code)] // documents `web::healthz`'s answer, never built
pub struct Health {
    /// Always `ok` when the server answers.
    status: String,
    /// The fleets' numbers, to an authenticated caller only.
    #[schema(required = false)]
    fleets: Option<Vec<FleetSummary>>,
}

/// The document as served (pretty JSON, built once per router).
#[derive(Clone)]
struct Document(Arc<str>);

/// `routes` (each added with `routes!`) as an axum router, with
/// `GET /api/v1/openapi.json` serving their document.
pub fn served(routes: OpenApiRouter<AppState>) -> Router<AppState> {
    let (router, doc) = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .merge(routes)
        .routes(routes!(openapi_json))
        .split_for_parts();
    let mut json = serde_json::to_value(&doc).expect("the OpenAPI document serializes");
    name_millis(&mut json);
    let json = serde_json::to_string_pretty(&json).expect("JSON serializes");
    router.layer(Extension(Document(json.into())))
}

/// utoipa documents the model's `Millis` (an alias of `i64`) as a schema
/// named `i64`: named `Millis` here, and said what it is.
fn name_millis(doc: &mut serde_json::Value) {
    const FROM: &str = "#/components/schemas/i64";
    fn walk(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::String(s) if s == FROM => *s = "#/components/schemas/Millis".into(),
            serde_json::Value::Array(a) => a.iter_mut().for_each(walk),
            serde_json::Value::Object(o) => o.values_mut().for_each(walk),
            _ => {}
        }
    }
    walk(doc);
    if let Some(schemas) = doc.pointer_mut("/components/schemas").and_then(|s| s.as_object_mut()) {
        if let Some(mut millis) = schemas.remove("i64") {
            millis["description"] = "An instant: unix milliseconds.".into();
            schemas.insert("Millis".into(), millis);
        }
    }
}

/// This document.
#[utoipa::path(get, path = "/api/v1/openapi.json", tag = "probes",
    summary = "This API's OpenAPI 3.1 document",
    description = "Least role: none (no credentials needed): the document says what every server \
of this version says, nothing of this server's fleets or configuration.",
    security(()),
    responses((status = 200, description = "The document", content_type = "application/json")))]
async fn openapi_json(Extension(doc): Extension<Document>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], doc.0.to_string())
}

/// `{fleet}` in a path.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // read by the handlers as `Path<String>`
pub struct FleetPath {
    /// The fleet's name (as configured).
    fleet: String,
}

/// `{fleet}` and `{name}` in a path.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
pub struct LockPath {
    /// The fleet's name (as configured).
    fleet: String,
    /// The lock's name, percent-encoded: its `/` is `%2F`, a space `%20`, a `+` `%2B`.
    name: String,
}

/// `{fleet}` and `{session}` in a path.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
pub struct SessionPath {
    /// The fleet's name (as configured).
    fleet: String,
    /// The session's id.
    session: String,
}

/// The refusals every read call may answer before it looks at its request.
#[derive(IntoResponses)]
#[allow(dead_code)]
pub enum NotSignedIn {
    /// No usable credentials: no token, one that does not verify, an expired sign-in.
    #[response(status = 401)]
    Unauthenticated(ErrorBody),
    /// The source's Bearer tokens failed too often this minute (`[limits]
    /// auth_failures_per_minute`); `Retry-After` says when to come back.
    #[response(status = 429, headers(("Retry-After" = u64, description = "Seconds to wait")))]
    TooMany(ErrorBody),
}

/// An admin action's answers: always an [`ActionAnswer`], whose `outcome`
/// and `detail` say what happened (docs/api.md, "Actions": the checks in order).
#[derive(IntoResponses)]
#[allow(dead_code)]
pub enum ActionAnswers {
    /// Done, and audited.
    #[response(status = 200)]
    Done(ActionAnswer),
    /// Ambiguous credentials; not JSON, or not exactly the body's fields; no
    /// reason, or a name or reason too long; a name the store refuses.
    #[response(status = 400)]
    Invalid(ActionAnswer),
    /// No usable credentials.
    #[response(status = 401)]
    Unauthenticated(ActionAnswer),
    /// The role or the scope does not allow it, or the CSRF check failed.
    #[response(status = 403)]
    Forbidden(ActionAnswer),
    /// No such fleet (or, to blacklist, a session the fleet does not know).
    #[response(status = 404)]
    NotFound(ActionAnswer),
    /// The target is not what the caller saw (`outcome: changed`), or the
    /// store is read-only or there is none to act through.
    #[response(status = 409)]
    Conflict(ActionAnswer),
    /// The source's Bearer tokens failed too often this minute (`Retry-After`).
    #[response(status = 429, headers(("Retry-After" = u64, description = "Seconds to wait")))]
    TooMany(ActionAnswer),
    /// Done or not as `outcome` says, but the audit log could not be written.
    #[response(status = 500)]
    Unrecorded(ActionAnswer),
    /// Nothing done: the store failed or is busy, the audit spool is full,
    /// the hub is not running, or a token could not be checked now.
    #[response(status = 503)]
    Unavailable(ActionAnswer),
}
