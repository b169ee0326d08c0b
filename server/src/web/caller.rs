//! Who sent a request ([`Caller`]): resolved once per request from its headers
//! and peer, for pages, the API, the forms and the websocket alike.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, StatusCode};
use lockscope_store::now_ms;

use super::error::AppError;
use super::state::AppState;
use crate::auth::{check_csrf, Identity, TokenRefused, Via, Who, CSRF_HEADER};

/// Who sent a request: resolved once per request from its headers and peer.
pub struct Caller {
    pub who: Who,
    pub headers: HeaderMap,
    /// The peer's address (`None`: not over a socket, as in tests).
    pub peer: Option<std::net::IpAddr>,
    /// The client's address, as the limits count it: the peer's, or behind a
    /// proxy of `[limits] proxies` the client it forwarded ([`crate::auth::Auth::client`]).
    pub client: Option<std::net::IpAddr>,
    /// Set when the request carried a `Bearer` token that was not accepted
    /// and its source has used up its failed checks for the minute
    /// (`[limits] auth_failures_per_minute`): answered `429` with
    /// `Retry-After` (these seconds) rather than `401`; or (with `busy`) when
    /// it could not be checked for the checks already waiting.
    pub retry_after: Option<u64>,
    /// The token could not be checked: `[limits] auth_verify_queue` checks
    /// were already waiting for a password hash (`503` with `Retry-After`).
    pub busy: bool,
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Caller, Self::Rejection> {
        let peer = parts
            .extensions
            .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
            .map(|c| c.0.ip());
        let (mut who, refused) = state.auth.identify_why(&parts.headers, peer, now_ms()).await;
        let client = state.auth.client(&parts.headers, peer);
        // Only a refused `Bearer` token counts here: another scheme (a
        // proxy's `Basic`) is ignored, and its request is simply without
        // credentials (`401`).
        let busy = matches!(refused, Some(TokenRefused::Busy { .. }));
        let retry_after = match &refused {
            Some(TokenRefused::Busy { retry_after, .. }) => Some(*retry_after),
            Some(_) => state.auth.retry_after(client).map(crate::auth::limit::secs),
            None => None,
        };
        if let (Some(secs), false) = (retry_after, busy) {
            state.auth.count_rate_limited();
            let why = TokenRefused::TooMany {
                per_minute: state.auth.failures_per_minute(),
                retry_after: secs,
            };
            who = Who::Nobody(why.to_string());
        }
        Ok(Caller {
            who,
            headers: parts.headers.clone(),
            peer,
            client,
            retry_after,
            busy,
        })
    }
}

impl Caller {
    /// The identity of a read request, or the API's refusal: 401, or 400 when
    /// its credentials are ambiguous ([`Who::identity`]), or 429 with
    /// `Retry-After` when its source failed too often ([`Caller::retry_after`]),
    /// or 503 with `Retry-After` when its token could not be checked
    /// ([`Caller::busy`]).
    pub fn reader(&self) -> Result<&Identity, AppError> {
        self.who.identity().map_err(|(status, why)| AppError::Api {
            status: self.limited(status),
            why,
            retry_after: self.retry_after,
        })
    }

    /// `status`, or `429` when this is a `401` of a source over its failed
    /// checks ([`Caller::retry_after`]), or `503` when its token could not be
    /// checked ([`Caller::busy`]).
    pub(crate) fn limited(&self, status: StatusCode) -> StatusCode {
        match self.retry_after {
            Some(_) if status == StatusCode::UNAUTHORIZED && self.busy => StatusCode::SERVICE_UNAVAILABLE,
            Some(_) if status == StatusCode::UNAUTHORIZED => StatusCode::TOO_MANY_REQUESTS,
            _ => status,
        }
    }

    /// The CSRF check of a state-changing API request. Bearer tokens need none;
    /// any request a browser sent (it names an origin or carries cookies) must
    /// carry the page's token in `X-CSRF-Token`; a script on loopback without
    /// authentication sends neither and needs none.
    pub(crate) fn csrf(&self) -> Result<(), String> {
        let Who::Known(id) = &self.who else { return Ok(()) };
        let from_browser = matches!(id.via, Via::Session { .. })
            || [header::ORIGIN, header::COOKIE]
                .iter()
                .any(|h| self.headers.contains_key(h))
            || self.headers.contains_key("sec-fetch-site");
        if !from_browser {
            return Ok(());
        }
        let sent = self.headers.get(CSRF_HEADER).and_then(|v| v.to_str().ok());
        check_csrf(id, &self.headers, sent)
    }
}
