//! Failed authentication and its cost: every token checked costs one Argon2
//! verification whatever its id, a source over its failures costs none, and
//! a burst waiting together stops hashing at the limit.

use std::net::IpAddr;
use std::sync::Arc;

use lockscope_model::admin::Role;

use super::*;
use crate::settings::{FileConfig, Limits};

async fn auth(limits: &Limits) -> (Auth, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let audit = AuditLog::open(&format!("sqlite:{}", dir.path().join("a.db").display()))
        .await
        .unwrap();
    let (token, entry) = new_token("alice", Role::Admin);
    let file = FileConfig::parse(&entry).unwrap();
    (Auth::new(file.auth, audit).with_limits(limits), token, dir)
}

fn peer(s: &str) -> Option<IpAddr> {
    Some(s.parse().unwrap())
}

#[tokio::test]
async fn unknown_and_known_ids_cost_one_verification_each() {
    let (auth, token, _dir) = auth(&Limits::default()).await;
    let id = token.split_once('.').unwrap().0;
    let p = peer("10.0.0.1");
    // "make unknown and known token ids cost the same": one Argon2 run each.
    for (bad, what) in [
        (format!("{id}.{}", "0".repeat(64)), "a known id"),
        (format!("ffffffff.{}", "0".repeat(64)), "an unknown id"),
        ("no-dot-at-all".to_string(), "no id at all"),
    ] {
        let before = auth.verifications();
        assert_eq!(auth.verify_token(&bad, p).await.err(), Some(TokenRefused::Invalid));
        assert_eq!(auth.verifications(), before + 1, "{what}: one verification");
    }
    assert!(auth.verify_token(&token, p).await.is_ok());
    let before = auth.verifications();
    assert!(auth.verify_token(&token, p).await.is_ok());
    assert_eq!(
        auth.verifications(),
        before,
        "a token that verified is recognised without hashing"
    );
    assert_eq!(
        auth.verified.lock().unwrap().len(),
        1,
        "one cached entry per configured token"
    );
}

#[tokio::test]
async fn a_source_over_its_failures_costs_no_hashing_and_others_are_not_affected() {
    let limits = Limits {
        auth_failures_per_minute: 3,
        ..Limits::default()
    };
    let (auth, token, _dir) = auth(&limits).await;
    let (flood, other) = (peer("10.0.0.1"), peer("10.0.0.2"));
    for _ in 0..3 {
        assert_eq!(auth.verify_token("x.y", flood).await.err(), Some(TokenRefused::Invalid));
    }
    assert_eq!(auth.verifications(), 3);
    let refused = auth.verify_token("x.y", flood).await.unwrap_err();
    assert!(
        matches!(
            refused,
            TokenRefused::TooMany {
                per_minute: 3,
                retry_after: 1..=60
            }
        ),
        "{refused:?}"
    );
    assert!(
        refused
            .to_string()
            .starts_with("too many failed token checks from this address (3 a minute): try again in"),
        "{refused}"
    );
    assert!(
        auth.sign_in(&token, flood, 0).await.is_err(),
        "no new verification from there either"
    );
    assert_eq!(auth.verifications(), 3, "nothing hashed for a source over its limit");
    assert!(auth.retry_after(flood).is_some());
    assert!(
        auth.verify_token(&token, other).await.is_ok(),
        "another source is not limited"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_waiting_together_stops_hashing_at_the_limit() {
    let limits = Limits {
        auth_failures_per_minute: 3,
        ..Limits::default()
    };
    let (auth, _token, _dir) = auth(&limits).await;
    let auth = Arc::new(auth);
    let burst: Vec<_> = (0..12)
        .map(|i| {
            let auth = auth.clone();
            tokio::spawn(async move { auth.verify_token(&format!("x.{i}"), peer("10.0.0.1")).await.err() })
        })
        .collect();
    let mut too_many = 0;
    for b in burst {
        too_many += matches!(b.await.unwrap(), Some(TokenRefused::TooMany { .. })) as u32;
    }
    assert_eq!(too_many, 9);
    assert_eq!(
        auth.verifications(),
        3,
        "twelve at once from one source, three failures allowed: three hashed"
    );
}
