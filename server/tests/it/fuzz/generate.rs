//! The generator of the HTTP fuzz test: requests to every route, with
//! identities, headers, queries and bodies drawn from a seeded generator.

use std::net::SocketAddr;

use lockscope_model::admin::Role;
use lockscope_model::url::segment as seg;

use super::{StoreState, Target, NAMES, PROXY_HEADER};

/// Who a generated request claims to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Claim {
    Nobody,
    Token(Role),
    BadToken,
    Basic,
    /// The proxy's header, from the trusted proxy's address.
    ProxyUser(Role),
    /// The proxy's header from an address that is not trusted.
    UntrustedProxy,
    /// Two proxy headers (a client's and the proxy's).
    DoubledProxy,
    GarbageCookie,
}

/// Acquisitions a request may name: the held ones (so some releases succeed).
pub(super) fn held(state: &StoreState) -> Vec<(String, i64, String)> {
    state
        .locks
        .iter()
        .filter_map(|(n, f, owner)| owner.as_ref().map(|o| (n.clone(), *f, o.clone())))
        .collect()
}

/// A generated request, kept printable for the failure message.
#[derive(Debug)]
pub(super) struct Case {
    pub(super) method: &'static str,
    pub(super) uri: String,
    pub(super) headers: Vec<(String, String)>,
    pub(super) body: Vec<u8>,
    pub(super) peer: SocketAddr,
    pub(super) claim: Claim,
    /// A release's lock, fence and owner: the acquisition the caller saw.
    pub(super) release: Option<(String, i64, String)>,
}

fn pick<'a, T>(rng: &mut fastrand::Rng, xs: &'a [T]) -> &'a T {
    &xs[rng.usize(..xs.len())]
}

fn text(rng: &mut fastrand::Rng) -> String {
    match rng.u8(..10) {
        0 => String::new(),
        1 => "x".repeat(rng.usize(200..3000)),
        2 => (0..rng.usize(1..12)).map(|_| rng.char(..)).collect(),
        3 => "\u{0}\r\n%00%ZZ+ &=?#/..".into(),
        4 => "../../etc/passwd".into(),
        5 => "<script>alert(1)</script>".into(),
        _ => (0..rng.usize(1..16)).map(|_| rng.alphanumeric()).collect(),
    }
}

fn number(rng: &mut fastrand::Rng) -> String {
    match rng.u8(..8) {
        0 => i64::MAX.to_string(),
        1 => i64::MIN.to_string(),
        2 => "-0".into(),
        3 => (*pick(rng, &["1e309", "now-9999999d", "-1h", "now+100000000d", "0"])).into(),
        4 => (*pick(
            rng,
            &[
                "2026-11-26T03:00:00Z",
                "9999-12-31T23:59:59Z",
                "0000-01-01T00:00:00Z",
                "+275760-09-13T00:00:00Z",
            ],
        ))
        .into(),
        5 => "99999999999999999999999".into(),
        _ => rng.i64(..).to_string(),
    }
}

fn value(rng: &mut fastrand::Rng, t: &Target) -> String {
    match rng.u8(..6) {
        0 | 1 => number(rng),
        2 => pick(rng, &NAMES).to_string(),
        3 => t.sessions().first().cloned().unwrap_or_default(),
        _ => text(rng),
    }
}

const KEYS: &[&str] = &[
    "fleet", "name", "lock", "from", "to", "at", "limit", "offset", "sort", "dir", "filter", "state", "window",
    "format", "session", "service", "actor", "action", "outcome", "next", "audit", "kind", "b", "cursor", "q",
];

fn query(rng: &mut fastrand::Rng, t: &Target) -> String {
    let mut q: Vec<String> = Vec::new();
    if rng.bool() {
        q.push(format!("fleet={}", if rng.u8(..4) == 0 { "nosuch" } else { "sql" }));
    }
    // The time-taking parameters, often, over the whole i64 range and beyond.
    for k in ["from", "to", "at", "lock"] {
        if rng.u8(..3) == 0 {
            let v = if k == "lock" {
                pick(rng, &NAMES).to_string()
            } else {
                number(rng)
            };
            q.push(format!("{k}={}", seg(&v)));
        }
    }
    for _ in 0..rng.usize(..4) {
        let k = pick(rng, KEYS);
        let v = value(rng, t);
        q.push(format!("{k}={}", seg(&v)));
    }
    if q.is_empty() {
        String::new()
    } else {
        format!("?{}", q.join("&"))
    }
}

pub(super) fn generate(rng: &mut fastrand::Rng, t: &Target, now: &StoreState) -> Case {
    let held = held(now);
    // The acquisition the operator saw, or one close to it (a wrong fence or
    // owner, a name that encodes alike), or made up.
    let (name, fence, owner) = match (rng.bool(), held.is_empty()) {
        (true, false) => {
            let (n, f, o) = pick(rng, &held).clone();
            match rng.u8(..6) {
                0 => (n, f + 1, o),
                1 => (n, f, lockscope::client::random_hex(16)),
                2 => (n.replace(' ', "+"), f, o),
                _ => (n, f, o),
            }
        }
        _ => (value(rng, t), rng.i64(-2..1_000), text(rng)),
    };
    let sessions = t.sessions();
    let session = match (rng.u8(..3), sessions.is_empty()) {
        (0 | 1, false) => pick(rng, &sessions).clone(),
        _ => text(rng),
    };
    let fleet = if rng.u8(..5) == 0 { text(rng) } else { "sql".to_string() };
    let reason = if rng.u8(..5) == 0 {
        text(rng)
    } else {
        "fuzz".to_string()
    };
    let (f, n, s) = (seg(&fleet), seg(&name), seg(&session));
    let q = query(rng, t);
    let json_release = format!(
        r#"{{"fence": {fence}, "owner": {}, "reason": {}}}"#,
        serde_json::json!(owner),
        serde_json::json!(reason)
    );
    let json_reason = format!(r#"{{"reason": {}}}"#, serde_json::json!(reason));
    let csrf_junk = text(rng);
    let form = |key: &str, target: &str| {
        format!(
            "fleet={}&{key}={}&confirm={}&fence={fence}&owner={}&reason={}&csrf={}&back=%2F",
            seg(&fleet),
            seg(target),
            seg(target),
            seg(&owner),
            seg(&reason),
            seg(&csrf_junk)
        )
    };
    let (method, uri, body, content_type): (&str, String, String, &str) = match rng.u8(..26) {
        0 => ("GET", format!("/{q}"), String::new(), ""),
        1 => ("GET", format!("/lock{q}"), String::new(), ""),
        2 => ("GET", format!("/sessions{q}"), String::new(), ""),
        3 => ("GET", format!("/audit{q}"), String::new(), ""),
        4 => ("GET", format!("/history{q}"), String::new(), ""),
        5 => ("GET", format!("/charts{q}"), String::new(), ""),
        6 => ("GET", format!("/signin{q}"), String::new(), ""),
        7 => (
            "POST",
            "/signin".into(),
            format!("token={}&next=%2F&csrf=x", seg(&text(rng))),
            "application/x-www-form-urlencoded",
        ),
        8 => (
            "POST",
            "/signout".into(),
            "csrf=x".into(),
            "application/x-www-form-urlencoded",
        ),
        9 => (
            "POST",
            "/actions/release".into(),
            form("name", &name),
            "application/x-www-form-urlencoded",
        ),
        10 => (
            "POST",
            "/actions/blacklist".into(),
            form("session", &session),
            "application/x-www-form-urlencoded",
        ),
        11 => (
            "POST",
            "/actions/unblacklist".into(),
            form("session", &session),
            "application/x-www-form-urlencoded",
        ),
        12 => ("GET", format!("/api/v1/fleets{q}"), String::new(), ""),
        13 => ("GET", format!("/api/v1/fleets/{f}/locks/{n}{q}"), String::new(), ""),
        14 | 15 => (
            "POST",
            format!("/api/v1/fleets/{f}/locks/{n}/release"),
            json_release,
            "application/json",
        ),
        16 => ("GET", format!("/api/v1/fleets/{f}/sessions{q}"), String::new(), ""),
        17 => (
            "POST",
            format!("/api/v1/fleets/{f}/sessions/{s}/blacklist"),
            json_reason,
            "application/json",
        ),
        18 => (
            "DELETE",
            format!("/api/v1/fleets/{f}/sessions/{s}/blacklist"),
            json_reason,
            "application/json",
        ),
        19 => ("GET", format!("/api/v1/audit{q}"), String::new(), ""),
        20 => ("GET", format!("/api/v1/fleets/{f}/history{q}"), String::new(), ""),
        21 => ("GET", format!("/api/v1/fleets/{f}/table{q}"), String::new(), ""),
        22 => ("GET", format!("/api/v1/fleets/{f}/charts{q}"), String::new(), ""),
        23 => (
            "GET",
            pick(
                rng,
                &[
                    "/metrics",
                    "/healthz",
                    "/favicon.svg",
                    "/ws?fleet=sql",
                    "/pkg/%00",
                    "/pkg/..%2F..%2FCargo.toml",
                ],
            )
            .to_string(),
            String::new(),
            "",
        ),
        24 => ("GET", format!("/pkg/{}", seg(&text(rng))), String::new(), ""),
        _ => (
            *pick(rng, &["GET", "POST", "DELETE", "PUT", "PATCH", "HEAD", "OPTIONS"]),
            format!("/{}/{}{q}", seg(&text(rng)), seg(&text(rng))),
            text(rng),
            *pick(
                rng,
                &[
                    "",
                    "application/json",
                    "text/plain",
                    "application/x-www-form-urlencoded",
                ],
            ),
        ),
    };
    // Sometimes the body is mangled: truncated, random bytes, the wrong type.
    let mut body = body.into_bytes();
    match rng.u8(..12) {
        0 => body.truncate(rng.usize(..=body.len())),
        1 => body = (0..rng.usize(..64)).map(|_| rng.u8(..)).collect(),
        2 => body.extend(std::iter::repeat_n(b'x', 17 * 1024)),
        _ => {}
    }
    let claim = *pick(
        rng,
        &[
            Claim::Nobody,
            Claim::Token(Role::Viewer),
            Claim::Token(Role::Operator),
            Claim::Token(Role::Admin),
            Claim::Token(Role::Admin),
            Claim::ProxyUser(Role::Viewer),
            Claim::ProxyUser(Role::Operator),
            Claim::ProxyUser(Role::Admin),
            Claim::UntrustedProxy,
            Claim::DoubledProxy,
            Claim::Basic,
            Claim::GarbageCookie,
        ],
    );
    // A bad token costs a password hash: rarely, so a long campaign stays fast.
    let claim = if rng.u16(..200) == 0 { Claim::BadToken } else { claim };
    let mut headers: Vec<(String, String)> = Vec::new();
    let host = match rng.u8(..10) {
        0 => "evil.example".to_string(),
        1 => String::new(),
        _ => "127.0.0.1:3000".to_string(),
    };
    if !host.is_empty() {
        headers.push(("host".into(), host));
    }
    if !content_type.is_empty() && rng.u8(..10) != 0 {
        headers.push(("content-type".into(), content_type.into()));
    }
    let mut peer: SocketAddr = "127.0.0.1:40000".parse().unwrap();
    match claim {
        Claim::Nobody => {}
        Claim::Token(role) => headers.push(("authorization".into(), format!("Bearer {}", t.tokens[&role]))),
        Claim::BadToken => {
            let id = t.tokens[&Role::Admin].split('.').next().unwrap().to_string();
            let id = if rng.bool() { id } else { "00000000".into() };
            headers.push(("authorization".into(), format!("Bearer {id}.{}", text(rng))));
        }
        Claim::Basic => headers.push(("authorization".into(), "Basic YWRtaW46YWRtaW4=".into())),
        Claim::ProxyUser(role) => headers.push((PROXY_HEADER.into(), format!("proxy-{}", role.as_str()))),
        Claim::UntrustedProxy => {
            peer = "10.9.8.7:40000".parse().unwrap();
            headers.push((PROXY_HEADER.into(), "proxy-admin".into()));
        }
        Claim::DoubledProxy => {
            headers.push((PROXY_HEADER.into(), "proxy-admin".into()));
            headers.push((PROXY_HEADER.into(), "proxy-viewer".into()));
        }
        Claim::GarbageCookie => headers.push(("cookie".into(), format!("lockscope_session={}", text(rng)))),
    }
    // Browser and proxy headers, each now and then.
    for (h, v) in [
        ("origin", "http://evil.example"),
        ("origin", "http://127.0.0.1:3000"),
        ("sec-fetch-site", "cross-site"),
        ("sec-fetch-site", "none"),
        ("cookie", "lockscope_csrf=abc"),
        ("x-csrf-token", "abc"),
        ("x-forwarded-for", "203.0.113.9"),
        ("forwarded", "for=203.0.113.9"),
        ("x-real-ip", "203.0.113.9"),
        ("x-forwarded-host", "lockscope.example.com"),
        ("x-forwarded-proto", "https"),
        ("accept", "text/csv"),
        ("upgrade", "websocket"),
    ] {
        if rng.u8(..14) == 0 {
            headers.push((h.into(), v.into()));
        }
    }
    let release =
        (uri.ends_with("/release") || uri == "/actions/release").then(|| (name.clone(), fence, owner.clone()));
    Case {
        method,
        uri,
        headers,
        body,
        peer,
        claim,
        release,
    }
}
