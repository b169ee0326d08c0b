//! The web layer's one error: a page answers its status with the reason as
//! text (or the sign-in redirect), the JSON API `{"error": …}` ([`error`]).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

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
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        if let AppError::SignIn(to) = &self {
            return axum::response::Redirect::to(to).into_response();
        }
        let status = match self {
            AppError::HubUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            AppError::Forbidden(_) => StatusCode::FORBIDDEN,
            AppError::BadRequest(_) => StatusCode::BAD_REQUEST,
            AppError::NoSuchFleet(_) => StatusCode::NOT_FOUND,
            AppError::AuditUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            AppError::SignIn(_) => StatusCode::UNAUTHORIZED,
        };
        tracing::warn!(%status, error = %self, "request failed");
        (status, self.to_string()).into_response()
    }
}

/// `{"error": why}` with `status`.
pub fn error(status: StatusCode, why: &str) -> Response {
    (status, Json(serde_json::json!({ "error": why }))).into_response()
}
