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
    assert!(StoreSpec::parse("redis://127.0.0.1:6379").unwrap().open().is_ok());
    for (bad, why) in [
        ("rediss://h:6380", "not supported yet"),
        ("redis://h", "needs the port"),
        ("redis://h:x", "port is a number"),
        ("redis://h:0", "from 1 to 65535"),
        ("redis://:6379", "needs a host"),
        ("redis://h:1/x", "database"),
        ("redis://h:1?match=", "needs a key pattern"),
        ("redis://h:1?count=5", "unknown option"),
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
