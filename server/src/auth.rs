//! Who is asking, and what they may do: identities from API tokens
//! (`Authorization: Bearer`), browser sign-in sessions (an HttpOnly,
//! SameSite=Strict cookie), or a trusted reverse proxy's header; their roles
//! and scopes from `lockscope.toml`; and the CSRF token every state-changing
//! browser request must carry.
//!
//! With no `[auth]` configured everyone is the anonymous admin, which the
//! server allows on loopback addresses only (see [`crate::check_exposure`]).

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Duration;

use argon2::password_hash::{PasswordHasher, SaltString};
use argon2::Argon2;
use axum::http::{header, HeaderMap, StatusCode};
use lockscope_model::admin::{Role, Viewer};

use crate::remember::audit::{AuditError, AuditLog, NewSession};
use crate::settings::{AuthFile, Limits, TokenFile};

pub mod limit;
mod verify;

use limit::Failures;
pub use verify::TokenRefused;
use verify::Verifier;

/// The browser's sign-in session.
pub const SESSION_COOKIE: &str = "lockscope_session";
/// The CSRF token of a browser without a sign-in session (no authentication,
/// or a proxy identity): a double-submit cookie, HttpOnly, SameSite=Strict.
pub const CSRF_COOKIE: &str = "lockscope_csrf";
/// Where API requests made with a browser's cookie carry the CSRF token.
pub const CSRF_HEADER: &str = "x-csrf-token";
/// The actor of requests when no authentication is configured.
pub const ANONYMOUS: &str = "anonymous";
/// The actor the audit log names for requests without credentials.
pub const UNAUTHENTICATED: &str = "(unauthenticated)";

/// Someone the server recognised.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    pub actor: String,
    pub role: Role,
    /// Fleet → lock-name prefixes; empty: everything.
    pub scope: Vec<(String, Vec<String>)>,
    pub via: Via,
}

/// How an identity was established, which decides where its CSRF token is.
/// (`Debug` leaves the token out.)
#[derive(Clone, PartialEq, Eq)]
pub enum Via {
    /// No authentication configured.
    NoAuth,
    /// `Authorization: Bearer` (browsers never send it on their own: no CSRF).
    Token,
    /// A browser sign-in session, with its CSRF token.
    Session { csrf: String },
    /// A trusted proxy's header.
    Proxy,
}

impl std::fmt::Debug for Via {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Via::NoAuth => "NoAuth",
            Via::Token => "Token",
            Via::Session { .. } => "Session",
            Via::Proxy => "Proxy",
        })
    }
}

/// The result of looking at a request's credentials.
#[derive(Clone, Debug)]
pub enum Who {
    Known(Identity),
    /// No usable credentials, and why (`401`).
    Nobody(String),
    /// Credentials that could name more than one party (a repeated
    /// `Authorization` or proxy identity header), and why: refused (`400`),
    /// whichever copy is genuine.
    Ambiguous(String),
}

impl Who {
    /// The identity, or the status and reason that refuse the request: `401`
    /// without usable credentials, `400` with ambiguous ones. (The one place a
    /// `Who` becomes a status.)
    pub fn identity(&self) -> Result<&Identity, (StatusCode, String)> {
        match self {
            Who::Known(id) => Ok(id),
            Who::Nobody(why) => Err((StatusCode::UNAUTHORIZED, why.clone())),
            Who::Ambiguous(why) => Err((StatusCode::BAD_REQUEST, why.clone())),
        }
    }
}

pub struct Auth {
    config: Option<AuthFile>,
    audit: AuditLog,
    /// token id → SHA-256 of the token that verified: a repeat bearer skips the
    /// (deliberately slow) password hash. Only configured ids are keys, so it
    /// holds at most one entry per `[[auth.tokens]]`.
    verified: Mutex<HashMap<String, [u8; 32]>>,
    /// The password hashing, on `[limits] auth_verify_concurrency` threads (a
    /// flood of bad tokens queues there instead of starving the hub tasks).
    verifier: Verifier,
    /// Failed token checks per source (`[limits] auth_failures_per_minute`;
    /// shared with the verifying threads, which count the failures).
    failures: std::sync::Arc<Failures>,
    /// `[limits] proxies`: peers whose `X-Forwarded-For` names the client.
    proxies: Vec<IpAddr>,
}

impl Auth {
    pub fn new(config: Option<AuthFile>, audit: AuditLog) -> Auth {
        Auth {
            config,
            audit,
            verified: Mutex::new(HashMap::new()),
            verifier: Verifier::new(
                Limits::default().auth_verify_concurrency,
                Limits::default().auth_verify_queue,
            ),
            failures: verify::failures(&Limits::default()),
            proxies: Vec::new(),
        }
    }

    /// Whether any authentication is configured.
    pub fn enabled(&self) -> bool {
        self.config.is_some()
    }

    pub fn session_ttl(&self) -> Duration {
        let hours = self.config.as_ref().and_then(|c| c.session_hours).unwrap_or(12);
        Duration::from_secs(hours * 3600)
    }

    /// Who sent a request with these headers from `peer`.
    pub async fn identify(&self, headers: &HeaderMap, peer: Option<IpAddr>, now_ms: i64) -> Who {
        self.identify_why(headers, peer, now_ms).await.0
    }

    /// The same, and why its `Authorization: Bearer` token was refused, if it
    /// carried one that was (what decides between `401`, `429` and `503`).
    pub async fn identify_why(
        &self,
        headers: &HeaderMap,
        peer: Option<IpAddr>,
        now_ms: i64,
    ) -> (Who, Option<TokenRefused>) {
        let Some(config) = &self.config else {
            let who = Who::Known(Identity {
                actor: ANONYMOUS.into(),
                role: Role::Admin,
                scope: Vec::new(),
                via: Via::NoAuth,
            });
            return (who, None);
        };
        let proxy_header = config.proxy.as_ref().map(|p| p.header.as_str());
        if let Some(why) = repeated(headers, "Authorization", "send one")
            .or_else(|| proxy_header.and_then(|h| repeated(headers, h, "the proxy must replace the client's")))
        {
            return (Who::Ambiguous(why), None);
        }
        if let Some(token) = bearer(headers) {
            let token = std::str::from_utf8(token).unwrap_or("");
            return match self.verify_token(token, self.client(headers, peer)).await {
                Ok(t) => (Who::Known(token_identity(t, Via::Token)), None),
                Err(why) => (Who::Nobody(why.to_string()), Some(why)),
            };
        }
        (self.identify_other(config, headers, peer, now_ms).await, None)
    }

    /// [`Auth::identify_why`] without an `Authorization: Bearer` token: a
    /// proxy's header, a sign-in session, or nobody.
    async fn identify_other(&self, config: &AuthFile, headers: &HeaderMap, peer: Option<IpAddr>, now_ms: i64) -> Who {
        if let Some(proxy) = &config.proxy {
            if let Some(user) = headers.get(proxy.header.as_str()) {
                let trusted = peer.is_some_and(|p| proxy.trusted.contains(&p));
                let user = user.to_str().unwrap_or("").trim();
                if !trusted {
                    return Who::Nobody(format!(
                        "the {} header came from {}, which is not a trusted proxy",
                        proxy.header,
                        peer.map_or("an unknown address".into(), |p| p.to_string())
                    ));
                }
                if user.is_empty() {
                    return Who::Nobody(format!("the proxy's {} header names nobody", proxy.header));
                }
                let known = config.users.iter().find(|u| u.name == user);
                return Who::Known(Identity {
                    actor: user.to_string(),
                    role: known.and_then(|u| u.role).unwrap_or_default(),
                    scope: known.map(|u| scope(&u.scope)).unwrap_or_default(),
                    via: Via::Proxy,
                });
            }
        }
        if let Some(cookie) = cookie(headers, SESSION_COOKIE) {
            return match self.audit.session(cookie, now_ms).await {
                Ok(Some(s)) => match config.tokens.iter().find(|t| t.id == s.actor) {
                    Some(t) => Who::Known(token_identity(t, Via::Session { csrf: s.csrf })),
                    None => Who::Nobody("the token this browser signed in with is no longer configured".into()),
                },
                Ok(None) => Who::Nobody("the sign-in has expired or was signed out".into()),
                Err(e) => {
                    tracing::error!(error = %e, "reading a sign-in session");
                    Who::Nobody("sign-in sessions cannot be read now".into())
                }
            };
        }
        Who::Nobody("no credentials: sign in, or send `Authorization: Bearer TOKEN`".into())
    }

    /// Signs a browser in with `token`: a new sign-in session.
    pub async fn sign_in(
        &self,
        token: &str,
        client: Option<IpAddr>,
        now_ms: i64,
    ) -> Result<(Identity, NewSession), SignInError> {
        let entry = self.verify_token(token.trim(), client).await.map_err(|e| match e {
            TokenRefused::Invalid => SignInError::BadToken,
            e => SignInError::TooMany(e),
        })?;
        let session = self
            .audit
            .create_session(&entry.id, self.session_ttl(), now_ms)
            .await
            .map_err(SignInError::Store)?;
        let identity = token_identity(
            entry,
            Via::Session {
                csrf: session.csrf.clone(),
            },
        );
        Ok((identity, session))
    }

    /// Ends the browser's sign-in session, if it has one.
    pub async fn sign_out(&self, headers: &HeaderMap) {
        if let Some(cookie) = cookie(headers, SESSION_COOKIE) {
            if let Err(e) = self.audit.delete_session(cookie).await {
                tracing::error!(error = %e, "signing out");
            }
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SignInError {
    #[error("that token is not valid")]
    BadToken,
    #[error("{0}")]
    TooMany(TokenRefused),
    #[error("sign-in sessions cannot be stored now")]
    Store(#[source] AuditError),
}

fn token_identity(t: &TokenFile, via: Via) -> Identity {
    Identity {
        actor: t.name.clone(),
        role: t.role.unwrap_or_default(),
        scope: scope(&t.scope),
        via,
    }
}

fn scope(map: &BTreeMap<String, Vec<String>>) -> Vec<(String, Vec<String>)> {
    map.iter().map(|(f, p)| (f.clone(), p.clone())).collect()
}

/// The token of an `Authorization: Bearer TOKEN` header (the scheme in any
/// case). `None` without one, or for another scheme (such as the `Basic` of a
/// proxy that authenticated the user itself): that header is ignored.
fn bearer(headers: &HeaderMap) -> Option<&[u8]> {
    let value = headers.get(header::AUTHORIZATION)?.as_bytes();
    let (scheme, rest) = value.split_at_checked(6)?;
    let bearer = scheme.eq_ignore_ascii_case(b"bearer") && rest.first().is_none_or(|c| *c == b' ');
    bearer.then(|| rest.trim_ascii())
}

/// Why a request carrying `name` more than once is refused (`hint`: what to
/// do), if it does: a second copy may be the client's own, and no copy can be
/// told apart from the genuine one.
fn repeated(headers: &HeaderMap, name: &str, hint: &str) -> Option<String> {
    (headers.get_all(name).iter().count() > 1).then(|| format!("more than one {name} header: {hint}"))
}

/// A cookie's value from the request.
pub fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
        .filter(|v| !v.is_empty())
}

/// A `Set-Cookie` value for one of our cookies: HttpOnly, SameSite=Strict, and
/// Secure when `secure` or the request came over HTTPS (through a proxy that
/// says so with `X-Forwarded-Proto: https`).
fn set_cookie(secure: bool, headers: &HeaderMap, name: &str, value: &str, max_age: Duration) -> String {
    let secure = secure
        || headers
            .get("x-forwarded-proto")
            .is_some_and(|p| p.as_bytes().eq_ignore_ascii_case(b"https"));
    format!(
        "{name}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{}",
        max_age.as_secs(),
        if secure { "; Secure" } else { "" }
    )
}

/// The CSRF token a browser request of `identity` must carry, if any: its
/// sign-in session's, or the double-submit cookie's (which must exist).
/// `Err` says why the request cannot have a valid one.
pub fn expected_csrf(identity: &Identity, headers: &HeaderMap) -> Result<Option<String>, String> {
    match &identity.via {
        Via::Token => Ok(None),
        Via::Session { csrf } => Ok(Some(csrf.clone())),
        Via::NoAuth | Via::Proxy => cookie(headers, CSRF_COOKIE)
            .map(|c| Some(c.to_string()))
            .ok_or_else(|| "no CSRF cookie: reload the page and try again".into()),
    }
}

/// When a browser names the request's origin (`Origin`, `Sec-Fetch-Site`),
/// it must be this server: another site's page (even one on another port of
/// this host, which shares our cookies) cannot act or read through it.
/// `Sec-Fetch-Site: none` (typed in the address bar, a bookmark) is refused
/// too: what this guards (a form post, an API call, the websocket) only
/// ever comes from our own pages.
pub fn same_origin(headers: &HeaderMap) -> Result<(), String> {
    if let Some(site) = headers.get("sec-fetch-site") {
        if site.as_bytes() != b"same-origin" {
            let site = String::from_utf8_lossy(site.as_bytes());
            return Err(format!(
                "a request with Sec-Fetch-Site: {site} refused: only this server's own pages may send it"
            ));
        }
    }
    let Some(origin) = headers.get(header::ORIGIN).and_then(|o| o.to_str().ok()) else {
        return Ok(()); // not a browser, or a same-origin GET
    };
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("");
    let origin_host = origin.split_once("://").map(|(_, rest)| rest).unwrap_or(origin);
    if origin_host.eq_ignore_ascii_case(host) {
        Ok(())
    } else {
        Err(format!(
            "a request from {origin} refused: only this server's own pages may send it"
        ))
    }
}

/// Checks a browser request: its origin ([`same_origin`]) and its CSRF token
/// (`sent`: the form field or the `X-CSRF-Token` header).
pub fn check_csrf(identity: &Identity, headers: &HeaderMap, sent: Option<&str>) -> Result<(), String> {
    if identity.via != Via::Token {
        same_origin(headers)?;
    }
    match expected_csrf(identity, headers)? {
        None => Ok(()),
        Some(expected) => match sent {
            None | Some("") => Err("the request carries no CSRF token".into()),
            Some(sent) if constant_time_eq(sent.as_bytes(), expected.as_bytes()) => Ok(()),
            Some(_) => Err("the CSRF token does not match this browser's session: reload the page".into()),
        },
    }
}

pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Auth {
    /// A `Set-Cookie` value for one of our cookies (`[auth] secure_cookies`
    /// marks every one Secure; otherwise only over HTTPS).
    pub fn set_cookie(&self, headers: &HeaderMap, name: &str, value: &str, max_age: Duration) -> String {
        let secure = self.config.as_ref().is_some_and(|c| c.secure_cookies);
        set_cookie(secure, headers, name, value, max_age)
    }

    /// What a page tells its viewer about themselves, and the `Set-Cookie` that
    /// gives a browser its double-submit CSRF cookie when it has none yet.
    pub fn viewer(&self, identity: &Identity, headers: &HeaderMap) -> (Viewer, Option<String>) {
        viewer(identity, headers, |c| {
            self.set_cookie(headers, CSRF_COOKIE, c, Duration::from_secs(30 * 86_400))
        })
    }
}

fn viewer(identity: &Identity, headers: &HeaderMap, set: impl Fn(&str) -> String) -> (Viewer, Option<String>) {
    let (csrf, set) = match expected_csrf(identity, headers) {
        Ok(Some(c)) => (c, None),
        _ => {
            let c = random_hex(16);
            let cookie = set(&c);
            (c, Some(cookie))
        }
    };
    let viewer = Viewer {
        actor: identity.actor.clone(),
        role: identity.role,
        no_auth: identity.via == Via::NoAuth,
        signed_in: matches!(identity.via, Via::Session { .. }),
        scope: identity.scope.clone(),
        csrf,
    };
    (viewer, set)
}

use crate::client::random_hex;

/// A new API token for `name` and the `[[auth.tokens]]` entry that accepts it
/// (`lockscope token`). The token is shown once; the file keeps its hash.
pub fn new_token(name: &str, role: Role) -> (String, String) {
    let id = random_hex(4);
    let token = format!("{id}.{}", random_hex(32));
    let mut salt = [0u8; 16];
    getrandom::fill(&mut salt).expect("the operating system's random source");
    let salt = SaltString::encode_b64(&salt).expect("16 bytes is a valid salt");
    let hash = Argon2::default()
        .hash_password(token.as_bytes(), &salt)
        .expect("Argon2 with default parameters")
        .to_string();
    let entry = format!(
        "[[auth.tokens]]\nname = {name:?}\nid = {id:?}\nhash = {hash:?}\nrole = {:?}\n",
        role.as_str()
    );
    (token, entry)
}

#[cfg(test)]
mod limit_tests;
#[cfg(test)]
mod tests;
