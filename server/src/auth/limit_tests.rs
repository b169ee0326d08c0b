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

/// Waits (at most 10 s) until no verification is queued, running or waiting.
async fn until_idle(auth: &Auth) {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while auth.verifier.out_and_waiting() != (0, 0) {
        assert!(tokio::time::Instant::now() < deadline, "verifications never drained");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// A send-and-close loop: each request is dropped (the client reset the
/// connection, hyper drops the handler) while its hash is queued or running.
/// Its turn is not given back before its job is done, and its failure is
/// counted all the same, so the source reaches its limit and the hashing stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_dropped_while_they_wait_are_counted_and_keep_their_turn() {
    let limits = Limits {
        auth_failures_per_minute: 3,
        auth_verify_queue: 4,
        ..Limits::default()
    };
    let (auth, token, _dir) = auth(&limits).await;
    let auth = Arc::new(auth);
    let flood = peer("10.0.0.1");
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut dropped = 0;
    while auth.retry_after(flood).is_none() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "after {dropped} dropped requests the source is still not limited: \
             their failures were not counted ({} hashes run)",
            auth.verifications()
        );
        let a = auth.clone();
        let request = tokio::spawn(async move { a.verify_token(&format!("x.{dropped}"), flood).await.is_ok() });
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        request.abort();
        dropped += 1;
        let (out, waiting) = auth.verifier.out_and_waiting();
        assert!(
            out <= 1 && waiting <= 4,
            "one turn, four places: {out} out, {waiting} waiting"
        );
    }
    until_idle(&auth).await;
    let (failed, _, hashed, _) = auth.counts();
    assert_eq!(failed, 3, "each job that was sent counted a failure, dropped or not");
    assert!(
        hashed <= 3,
        "{hashed} hashes for {dropped} dropped requests: at most the three failures allowed"
    );
    // And the next one from there costs nothing.
    assert!(matches!(
        auth.verify_token("x.y", flood).await,
        Err(TokenRefused::TooMany { .. })
    ));
    assert_eq!(auth.verifications(), hashed);
    // A request dropped before its turn came costs nothing and counts nothing.
    let other = peer("10.0.0.2");
    let held = auth.verifier.turn(auth.verifier.place().unwrap()).await;
    let a = auth.clone();
    let request = tokio::spawn(async move { a.verify_token(&token, other).await.is_ok() });
    while auth.verifier.out_and_waiting().1 == 0 {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    request.abort();
    let _ = request.await;
    drop(held);
    until_idle(&auth).await;
    assert_eq!(
        (auth.counts().0, auth.verifications()),
        (3, hashed),
        "dropped while waiting for its turn: no job, no count"
    );
}

/// docs/operations.md: "token checks waiting for a password hash … | 64 |
/// `auth_verify_queue` | `503` with `Retry-After: 1` and `too many token checks
/// are waiting (64, [limits] auth_verify_queue): try again in 1 s`".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_queue_a_check_is_refused_at_once() {
    let limits = Limits {
        auth_verify_queue: 2,
        ..Limits::default()
    };
    let (auth, _token, _dir) = auth(&limits).await;
    let auth = Arc::new(auth);
    // The only turn, held: whatever comes now waits.
    let held = auth.verifier.turn(auth.verifier.place().unwrap()).await;
    let waiting: Vec<_> = (1..=2)
        .map(|i| {
            let a = auth.clone();
            tokio::spawn(async move { a.verify_token("x.y", peer(&format!("10.0.1.{i}"))).await.err() })
        })
        .collect();
    while auth.verifier.out_and_waiting() != (1, 2) {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let refused = auth.verify_token("x.y", peer("10.0.2.1")).await.unwrap_err();
    assert_eq!(
        refused,
        TokenRefused::Busy {
            waiting: 2,
            retry_after: 1
        }
    );
    assert_eq!(
        refused.to_string(),
        "too many token checks are waiting (2, [limits] auth_verify_queue): try again in 1 s"
    );
    assert_eq!(auth.counts(), (0, 0, 0, 1), "refused at once: no failure, no hash");
    drop(held);
    for w in waiting {
        assert_eq!(
            w.await.unwrap(),
            Some(TokenRefused::Invalid),
            "the waiting ones are checked"
        );
    }
    assert_eq!(auth.verifications(), 2);
}
