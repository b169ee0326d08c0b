use super::*;

#[test]
fn the_spec_form() {
    let spec = StoreSpec::parse("redis://app:s3cret@cache.internal:6380/2?match=locks:*").unwrap();
    let StoreSpec::Redis(t) = &spec else { panic!("{spec:?}") };
    assert_eq!(
        (t.host.as_str(), t.port, t.db, t.pattern.as_str()),
        ("cache.internal", 6380, 2, "locks:*")
    );
    assert_eq!(
        spec.source(),
        "Redis SET NX locks redis://app@cache.internal:6380/2 match locks:*"
    );
    assert!(!spec.source().contains("s3cret"), "the password is never shown");
    assert_eq!(spec.address(), "cache.internal:6380");
    let StoreSpec::Redis(t) = StoreSpec::parse("redis://127.0.0.1:6379").unwrap() else {
        panic!()
    };
    assert_eq!(
        (t.db, t.pattern.as_str()),
        (0, "*"),
        "database 0 and every key by default"
    );
    assert_eq!(t.queue, 1000, "docs/operations.md: `queue=N` (default 1000)");
    let StoreSpec::Redis(t) = StoreSpec::parse("redis://h:1?match=a*&queue=5").unwrap() else {
        panic!()
    };
    assert_eq!((t.pattern.as_str(), t.queue), ("a*", 5));
    assert!(StoreSpec::parse("redis://127.0.0.1:6379").unwrap().open().is_ok());
    // rediss:// (TLS): the server's certificate checked against the system's
    // roots, or the CA file given; never unchecked (no insecure option).
    let tls = StoreSpec::parse("rediss://app:pw@cache:6380/1?match=l:*&ca=/etc/redis/ca.pem").unwrap();
    let StoreSpec::Redis(t) = &tls else { panic!("{tls:?}") };
    assert_eq!(
        t.tls,
        Some(RedisTls {
            ca: Some("/etc/redis/ca.pem".into())
        })
    );
    assert_eq!(
        tls.source(),
        "Redis SET NX locks rediss://app@cache:6380/1 match l:* (TLS, CA /etc/redis/ca.pem)"
    );
    let StoreSpec::Redis(t) = StoreSpec::parse("rediss://cache:6380").unwrap() else {
        panic!()
    };
    assert_eq!(t.tls, Some(RedisTls { ca: None }), "the system's roots");
    for (bad, why) in [
        ("redis://h:6380?ca=/etc/ca.pem", "for rediss:// (TLS) only"),
        ("rediss://h:6380?ca=ca.pem", "absolute path"),
        ("rediss://h:6380?insecure=1", "unknown option"),
        ("redis://h", "needs the port"),
        ("redis://h:x", "port is a number"),
        ("redis://h:0", "from 1 to 65535"),
        ("redis://:6379", "needs a host"),
        ("redis://h:1/x", "database"),
        ("redis://h:1?match=", "needs a key pattern"),
        ("redis://h:1?count=5", "unknown option"),
        ("redis://h:1?queue=0", "from 1 to 100000"),
        ("redis://h:1?queue=100001", "from 1 to 100000"),
        ("redis://h:1?queue=ten", "fair-lock waiters"),
    ] {
        let err = StoreSpec::parse(bad).unwrap_err().to_string();
        assert!(err.contains(why), "{bad:?}: {err}");
    }
}

/// docs/protocol.md: "the fence of a Redis lock is a stable value derived
/// from its holder's token".
#[test]
fn the_fence_is_a_stable_value_of_the_token() {
    assert_eq!(fence_of(b"abc"), fence_of(b"abc"));
    assert_ne!(fence_of(b"abc"), fence_of(b"abd"));
    assert!(fence_of(b"") > 0 && fence_of(&[0xff; 64]) >= 0);
    // FNV-1a 64 of "a" is 0xaf63dc4c8601ec8c; top bit cleared.
    assert_eq!(fence_of(b"a"), 0x2f63dc4c8601ec8c);
}

/// docs/api.md: "A Redis `SET NX PX` lock … is `foreign` with `"session":null` and
/// `"key":{"token":"…","ttl_ms":MS|null,"read_at":MS}`".
#[test]
fn the_wire_form() {
    let e = entry("jobs:nightly".into(), b"tok", 2500, 7);
    let v = serde_json::to_value(&e).unwrap();
    assert_eq!(v["fence"], fence_of(b"tok"));
    assert_eq!(v["body"]["kind"], "foreign");
    assert_eq!(v["body"]["session"], serde_json::Value::Null);
    assert_eq!(v["body"]["key"]["token"], "tok");
    assert_eq!(v["body"]["key"]["ttl_ms"], 2500);
    assert!(v["body"]["key"]["read_at"].as_i64().unwrap() > 0);
    let forever = serde_json::to_value(entry("k".into(), b"t", -1, 1)).unwrap();
    assert_eq!(forever["body"]["key"]["ttl_ms"], serde_json::Value::Null, "no expiry");
}

/// Only Redisson's layout is taken for a lock: every field `<uuid>:<thread
/// id>` with a positive count (a read-write lock's `mode` field, or any
/// application hash, is not).
#[test]
fn a_redisson_hash_is_recognised_and_others_are_not() {
    let f = |pairs: &[(&str, &str)]| {
        redisson::holder(
            &pairs
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect::<Vec<_>>(),
        )
    };
    assert_eq!(f(&[("6f1bc9e2-5a70:57", "2")]), Some(("6f1bc9e2-5a70:57".into(), 2)));
    assert_eq!(f(&[("mode", "read"), ("u:1", "1")]), None);
    assert_eq!(f(&[("u:thread", "1")]), None);
    assert_eq!(f(&[("u:1", "0")]), None);
    assert_eq!(f(&[("name", "ada")]), None);
    assert_eq!(redisson::queue_key("jobs:a"), "redisson_lock_queue:{jobs:a}");
    assert_eq!(
        redisson::channel("{x}y"),
        "redisson_lock__channel:{x}y",
        "a hash tag kept"
    );
    assert_eq!(
        redisson::lock_of_side_key("redisson_lock_timeout:{jobs:a}"),
        Some("jobs:a")
    );
    assert_eq!(redisson::lock_of_side_key("jobs:a"), None);
}

/// docs/operations.md: "a TTL is compared as the instant it runs out": the
/// clock ticking is no change, an extension is.
#[test]
fn a_ttl_ticking_is_no_change_and_an_extension_is() {
    let mut a = entry("k".into(), b"t", 10_000, 1);
    let mut b = entry("k".into(), b"t", 9_000, 2);
    let at = |e: &mut LockEntry, read_at| match &mut e.body {
        LockBody::Foreign { key: Some(k), .. } => k.read_at = read_at,
        _ => unreachable!(),
    };
    at(&mut a, 1_000_000);
    at(&mut b, 1_001_000);
    assert!(shown::same(&a, &b), "the same expiry read 1 s later");
    let mut c = entry("k".into(), b"t", 30_000, 3);
    at(&mut c, 1_001_000);
    assert!(!shown::same(&a, &c), "extended");
    assert!(!shown::same(&a, &entry("k".into(), b"u", 10_000, 1)), "another token");
}
