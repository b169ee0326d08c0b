use super::*;
use argon2::password_hash::{PasswordHash, PasswordVerifier};

#[test]
fn cookies_are_found_among_others() {
    let mut h = HeaderMap::new();
    h.insert(header::COOKIE, "a=1; lockscope_session=abc; b=2".parse().unwrap());
    assert_eq!(cookie(&h, SESSION_COOKIE), Some("abc"));
    assert_eq!(cookie(&h, CSRF_COOKIE), None);
    let set = set_cookie(false, &h, CSRF_COOKIE, "x", Duration::from_secs(60));
    assert!(set_cookie(true, &h, CSRF_COOKIE, "x", Duration::from_secs(60)).ends_with("; Secure"));
    assert!(set.contains("HttpOnly") && set.contains("SameSite=Strict") && !set.contains("Secure"));
    h.insert("x-forwarded-proto", "https".parse().unwrap());
    assert!(set_cookie(false, &h, CSRF_COOKIE, "x", Duration::from_secs(60)).ends_with("; Secure"));
}

#[test]
fn csrf_is_bound_to_the_session_or_the_cookie() {
    let session = Identity {
        actor: "a".into(),
        role: Role::Operator,
        scope: vec![],
        via: Via::Session { csrf: "s3cr3t".into() },
    };
    let h = HeaderMap::new();
    assert!(check_csrf(&session, &h, Some("s3cr3t")).is_ok());
    assert!(check_csrf(&session, &h, Some("other")).is_err());
    assert!(check_csrf(&session, &h, None).is_err());
    let anon = Identity {
        via: Via::NoAuth,
        ..session.clone()
    };
    assert!(check_csrf(&anon, &h, Some("x")).is_err(), "no cookie, no CSRF token");
    let mut h = HeaderMap::new();
    h.insert(header::COOKIE, format!("{CSRF_COOKIE}=c00kie").parse().unwrap());
    assert!(check_csrf(&anon, &h, Some("c00kie")).is_ok());
    assert!(check_csrf(&anon, &h, Some("c00kiE")).is_err());
    let token = Identity {
        via: Via::Token,
        ..session
    };
    assert!(
        check_csrf(&token, &HeaderMap::new(), None).is_ok(),
        "bearer tokens need none"
    );
}

#[test]
fn a_new_token_verifies_against_its_own_entry_only() {
    let (token, entry) = new_token("alice", Role::Operator);
    let file: crate::settings::FileConfig = crate::settings::FileConfig::parse(&entry).unwrap();
    let t = &file.auth.unwrap().tokens[0];
    assert!(token.starts_with(&format!("{}.", t.id)));
    let hash = PasswordHash::new(&t.hash).unwrap();
    assert!(Argon2::default().verify_password(token.as_bytes(), &hash).is_ok());
    assert!(Argon2::default().verify_password(b"nope", &hash).is_err());
    assert_eq!(t.role, Some(Role::Operator));
}

/// docs/api.md: "a `Sec-Fetch-Site` other than `same-origin` (`none` included: a typed URL or a
/// bookmark never posts a form), is `403` too".
#[test]
fn only_same_origin_requests_pass() {
    let with = |pairs: &[(&'static str, &str)]| {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    };
    assert!(same_origin(&with(&[])).is_ok(), "not a browser");
    assert!(same_origin(&with(&[("sec-fetch-site", "same-origin")])).is_ok());
    for site in ["none", "same-site", "cross-site", "Same-Origin", ""] {
        let why = same_origin(&with(&[("sec-fetch-site", site)])).unwrap_err();
        assert!(
            why.starts_with(&format!("a request with Sec-Fetch-Site: {site} refused")),
            "{why}"
        );
    }
    let host = ("host", "127.0.0.1:3000");
    assert!(same_origin(&with(&[host, ("origin", "http://127.0.0.1:3000")])).is_ok());
    let why = same_origin(&with(&[host, ("origin", "http://127.0.0.1:3001")])).unwrap_err();
    assert_eq!(
        why,
        "a request from http://127.0.0.1:3001 refused: only this server's own pages may send it"
    );
}

/// docs/operations.md: "any other `Authorization`, such as a proxy's own `Basic`, is ignored".
#[test]
fn only_the_bearer_scheme_is_read() {
    let auth = |v: &str| {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, v.parse().unwrap());
        h
    };
    assert_eq!(bearer(&auth("Bearer a.b")), Some(&b"a.b"[..]));
    assert_eq!(bearer(&auth("bearer  a.b ")), Some(&b"a.b"[..]));
    assert_eq!(
        bearer(&auth("Bearer")),
        Some(&b""[..]),
        "a Bearer without a token is a bad token"
    );
    for other in ["Basic Ym9iOnB3", "Bearerx a.b", "Token a.b", "Beare"] {
        assert_eq!(bearer(&auth(other)), None, "{other}");
    }
    assert_eq!(bearer(&HeaderMap::new()), None);
}

/// docs/api.md: "A request with more than one `Authorization` header, or more than one of the
/// proxy's header, is `400`, whoever it names".
#[tokio::test]
async fn repeated_identity_headers_are_ambiguous() {
    let dir = tempfile::tempdir().unwrap();
    let audit = AuditLog::open(&format!("sqlite:{}", dir.path().join("audit.db").display()))
        .await
        .unwrap();
    let file =
        crate::settings::FileConfig::parse("[auth.proxy]\nheader = \"X-Forwarded-User\"\ntrusted = [\"127.0.0.1\"]\n")
            .unwrap();
    let auth = Auth::new(file.auth, audit);
    let peer = Some(IpAddr::from([127, 0, 0, 1]));
    let mut h = HeaderMap::new();
    h.append("x-forwarded-user", "mallory".parse().unwrap());
    assert!(matches!(auth.identify(&h, peer, 0).await, Who::Known(id) if id.actor == "mallory"));
    h.append("x-forwarded-user", "bob".parse().unwrap());
    let who = auth.identify(&h, peer, 0).await;
    assert_eq!(
        who.identity().unwrap_err(),
        (
            StatusCode::BAD_REQUEST,
            "more than one X-Forwarded-User header: the proxy must replace the client's".to_string()
        )
    );
    let mut h = HeaderMap::new();
    h.append(header::AUTHORIZATION, "Basic Ym9iOnB3".parse().unwrap());
    h.append(header::AUTHORIZATION, "Bearer a.b".parse().unwrap());
    let who = auth.identify(&h, peer, 0).await;
    assert_eq!(
        who.identity().unwrap_err(),
        (
            StatusCode::BAD_REQUEST,
            "more than one Authorization header: send one".to_string()
        )
    );
    assert_eq!(
        Who::Nobody("why".into()).identity().unwrap_err(),
        (StatusCode::UNAUTHORIZED, "why".to_string())
    );
}
