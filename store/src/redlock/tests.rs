use super::*;

fn reads(r: &[Option<Option<(&str, i64)>>]) -> Vec<MasterRead> {
    r.iter()
        .map(|m| m.map(|k| k.map(|(t, p)| (t.as_bytes().to_vec(), p))))
        .collect()
}

fn state(e: &LockEntry) -> RedlockState {
    match &e.body {
        LockBody::Foreign { detail: Some(d), .. } => match &**d {
            FamilyDetail::Redlock(r) => r.clone(),
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
}

const ADDR: [&str; 3] = ["a:1", "b:2", "c:3"];

fn addrs() -> Vec<String> {
    ADDR.iter().map(|a| a.to_string()).collect()
}

#[test]
fn the_spec_form() {
    let spec = StoreSpec::parse("redlock+redis://app:s3cret@h1:6379,h2:6380,h3:6381/2?match=locks:*").unwrap();
    let StoreSpec::Redlock(t) = &spec else {
        panic!("{spec:?}")
    };
    assert_eq!(t.masters.len(), 3);
    assert_eq!(t.quorum(), 2);
    assert!(t.masters.iter().all(|m| m.db == 2 && m.pattern == "locks:*"));
    assert_eq!(spec.address(), "h1:6379,h2:6380,h3:6381");
    assert_eq!(
        spec.source(),
        "Redlock over 3 masters redlock+redis://app@h1:6379,h2:6380,h3:6381/2 match locks:*"
    );
    assert!(!spec.source().contains("s3cret"));
    assert!(spec.open().is_ok());
    for (bad, why) in [
        ("redlock+redis://h1:1", "two masters or more"),
        ("redlock+redis://h1:1,h1:1", "named twice"),
        ("redlock+redis://h1:1,h2", "needs the port"),
        ("redlock+redis://h1:1,h2:2?x=1", "unknown option"),
        ("redlock+rediss://h1:1,h2:2", "expected redlock+redis://"),
    ] {
        let err = StoreSpec::parse(bad).unwrap_err().to_string();
        assert!(err.contains(why), "{bad:?}: {err}");
    }
}

/// docs/operations.md: "A lock is held when one token holds the key on a
/// quorum of the masters (N/2+1), shown with how many agree ("2 of 3" when a
/// master is down or lacks the key)".
#[test]
fn a_quorum_holds_and_a_master_down_reads_two_of_three() {
    let e = combine(
        "k",
        &addrs(),
        &reads(&[Some(Some(("t", 900))), Some(Some(("t", 1000))), None]),
        1,
    )
    .unwrap();
    let s = state(&e);
    assert_eq!((s.agree, s.quorum, s.split.as_deref()), (2, 2, None));
    assert_eq!(s.agreement(), "2 of 3");
    assert!(!s.masters[2].reachable && s.masters[0].reachable);
    assert_eq!(e.fence, fence_of(b"t"));
    assert!(
        matches!(&e.body, LockBody::Foreign { key: Some(k), .. } if k.ttl_ms == Some(900)),
        "the shortest TTL"
    );
    assert!(combine("k", &addrs(), &reads(&[Some(None), None, Some(None)]), 1).is_none());
}

/// docs/operations.md: "When no token reaches the quorum (two tokens on
/// different masters, or one token on a minority) the lock is *split*, with
/// the reason".
#[test]
fn two_tokens_or_a_minority_are_split() {
    let two = combine(
        "k",
        &addrs(),
        &reads(&[Some(Some(("a", 5))), Some(Some(("b", 5))), Some(None)]),
        1,
    )
    .unwrap();
    let s = state(&two);
    assert_eq!(s.agree, 1);
    let why = s.split.unwrap();
    assert!(
        why.contains("no token holds a quorum of 2 of 3") && why.contains("a on 1, b on 1"),
        "{why}"
    );
    let minority = combine("k", &addrs(), &reads(&[Some(Some(("a", 5))), Some(None), None]), 1).unwrap();
    let why = state(&minority).split.unwrap();
    assert!(
        why.contains("held on 1 of 3 masters only") && why.contains("1 master(s) unreachable"),
        "{why}"
    );
}
