use super::*;

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
