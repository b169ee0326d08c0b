//! The web layer's one error ([`AppError`]): a page answers its status with
//! the reason as text (or the sign-in redirect); the JSON API answers
//! `{"error": …}` ([`AppError::api`]), with `Retry-After` when told when to
//! come back. Handlers return `Result<_, AppError>` and use `?`.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::act::admin::Verdict;

/// Errors of the HTTP layer. Clients get a status and a short reason; details go
/// to the log.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error("the fleet hub is not running")]
    HubUnavailable,
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    BadRequest(String),
    /// No such fleet: the message says which there are ([`crate::live::hub::Fleets::unknown`]).
    #[error("{0}")]
    NoSuchFleet(String),
    #[error("the audit log cannot be read now")]
    AuditUnavailable,
    /// Not signed in: go to this sign-in URL.
    #[error("sign in first")]
    SignIn(String),
    /// An API call refused: `{"error": why}` with `status`, and `Retry-After:
    /// retry_after` when `status` is `429` or `503`.
    #[error("{why}")]
    Api {
        status: StatusCode,
        why: String,
        retry_after: Option<u64>,
    },
}

impl AppError {
    /// An API call's refusal: `{"error": why}` with `status`.
    pub fn api(status: StatusCode, why: impl Into<String>) -> AppError {
        AppError::Api {
            status,
            why: why.into(),
            retry_after: None,
        }
    }

    /// The same refusal, telling the client to come back in `secs` (a `429`
    /// or `503` of the API only).
    pub fn retry_after(self, secs: u64) -> AppError {
        match self {
            AppError::Api { status, why, .. } => AppError::Api {
                status,
                why,
                retry_after: Some(secs),
            },
            other => other,
        }
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        let status = match &self {
            AppError::SignIn(to) => return axum::response::Redirect::to(to).into_response(),
            AppError::Api {
                status,
                why,
                retry_after: secs,
            } => {
                let body = ErrorBody { error: why.clone() };
                let json = (*status, Json(body)).into_response();
                return retry_after(json, *status, *secs);
            }
            AppError::HubUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            AppError::Forbidden(_) => StatusCode::FORBIDDEN,
            AppError::BadRequest(_) => StatusCode::BAD_REQUEST,
            AppError::NoSuchFleet(_) => StatusCode::NOT_FOUND,
            AppError::AuditUnavailable => StatusCode::SERVICE_UNAVAILABLE,
        };
        tracing::warn!(%status, error = %self, "request failed");
        (status, self.to_string()).into_response()
    }
}

/// The JSON API's error answer, `{"error": "<why>"}` (the OpenAPI document's
/// `ErrorBody`: this struct is both what is sent and what is documented).
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// Why the call was refused, in one sentence.
    pub error: String,
}

/// `response` with `Retry-After: secs` when `status` is `429` or `503`.
pub(crate) fn retry_after(mut response: Response, status: StatusCode, secs: Option<u64>) -> Response {
    let later = [StatusCode::TOO_MANY_REQUESTS, StatusCode::SERVICE_UNAVAILABLE].contains(&status);
    if let (true, Some(secs)) = (later, secs) {
        response.headers_mut().insert(header::RETRY_AFTER, secs.into());
    }
    response
}

/// The HTTP status of an admin attempt's [`Verdict`] (the API and the forms).
pub fn status_of(verdict: Verdict) -> StatusCode {
    match verdict {
        Verdict::Done => StatusCode::OK,
        Verdict::Unauthenticated => StatusCode::UNAUTHORIZED,
        Verdict::Ambiguous | Verdict::Invalid => StatusCode::BAD_REQUEST,
        Verdict::Forbidden => StatusCode::FORBIDDEN,
        Verdict::NotFound => StatusCode::NOT_FOUND,
        Verdict::Conflict => StatusCode::CONFLICT,
        Verdict::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Verdict::Unrecorded => StatusCode::INTERNAL_SERVER_ERROR,
    }
}
