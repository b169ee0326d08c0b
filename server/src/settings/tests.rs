use super::*;

#[test]
fn the_documented_example_parses() {
    let text = r#"
            listen = "0.0.0.0:3000"
            audit = "postgres://lockscope@db/lockscope"
            [[fleets]]
            name = "prod"
            store = "etcd:http://10.0.0.5:2379"
            unlocker = "on"
            [unlocker]
            grace_secs = 15
            lease_secs = 10
            [history_exports]
            per_identity = 3
            total = 9
            idle_secs = 20
            connections = 1
            [[auth.tokens]]
            name = "alice"
            id = "3f9a0c1e"
            hash = "$argon2id$v=19$m=19456,t=2,p=1$c2FsdA$aGFzaA"
            role = "operator"
            scope = { prod = ["billing/"] }
            [auth.proxy]
            header = "X-Forwarded-User"
            trusted = ["127.0.0.1"]
            [[auth.users]]
            name = "bob@example.com"
            role = "admin"
            [limits]
            ws_per_identity = 64
            ws_per_address = 64
            ws_total = 1024
            auth_failures_per_minute = 10
            auth_sources = 10000
            auth_verify_concurrency = 1
            auth_verify_queue = 64
            audit_sources_per_minute = 100
            proxies = []
        "#;
    let c = FileConfig::parse(text).unwrap();
    assert_eq!(c.limits, Limits::default(), "the documented example shows the defaults");
    assert_eq!(c.fleets[0].name, "prod");
    assert_eq!(c.fleets[0].unlocker, Some(Mode::On));
    assert_eq!(c.unlocker.unwrap().grace_secs, Some(15));
    let limits = c.history_exports.unwrap().limits();
    assert_eq!(
        (
            limits.per_identity,
            limits.total,
            limits.idle.as_secs(),
            limits.connections
        ),
        (3, 9, 20, 1)
    );
    assert_eq!(
        HistoryExportsFile::default().limits(),
        ExportLimits::default(),
        "an absent [history_exports] keeps the defaults"
    );
    let auth = c.auth.unwrap();
    assert_eq!(auth.tokens[0].role, Some(Role::Operator));
    assert_eq!(auth.tokens[0].scope["prod"], ["billing/"]);
    assert_eq!(auth.users[0].role, Some(Role::Admin));
}

#[test]
fn the_limits_operations_md_shows_are_the_defaults() {
    // docs/operations.md: "[limits] … every key optional; these are the defaults".
    let doc = include_str!("../../../docs/operations.md");
    let start = doc.find("\n[limits]").expect("operations.md shows [limits]");
    let block = doc[start..].split("```").next().unwrap();
    let c = FileConfig::parse(block).unwrap_or_else(|e| panic!("{e}\n{block}"));
    assert_eq!(c.limits, Limits::default(), "{block}");
    for key in block.lines().filter_map(|l| l.split_once(" = ")).map(|(k, _)| k.trim()) {
        assert!(doc.contains(&format!("`{key}`")), "the Limits table names {key}");
    }
}

#[test]
fn mistakes_are_errors_that_say_where() {
    for (text, why) in [
        ("lissen = \"x\"", "unknown field"),
        ("[[auth.tokens]]\nname=\"a\"\nid=\"1\"\nhash=\"plain\"", "Argon2"),
        (
            "[[auth.tokens]]\nname=\"a\"\nid=\"1\"\nhash=\"$argon2id$x\"\nrole=\"root\"",
            "unknown variant",
        ),
        ("[auth]\nsession_hours = 1", "nobody could sign in"),
        (
            "[auth.proxy]\nheader=\"X-User\"\ntrusted=[]",
            "trusted lists no address",
        ),
        ("[limits]\nws_total = 0", "ws_total = 0 would refuse everyone"),
        ("[limits]\nws_per_user = 3", "unknown field"),
        // docs/operations.md: "lockscope refuses to start when … a
        // `[limits]` or `[history_exports]` key is 0" (or past its maximum).
        (
            "[history_exports]\nidle_secs = 0",
            "[history_exports] idle_secs = 0 would refuse or end every export",
        ),
        ("[history_exports]\nper_identity = 0", "per_identity = 0"),
        ("[history_exports]\ntotal = 0", "total = 0"),
        ("[history_exports]\nconnections = 0", "connections = 0"),
        (
            "[history_exports]\nidle_secs = 18446744073709551615",
            "[history_exports] idle_secs = 18446744073709551615 is too large: at most 86400",
        ),
        (
            "[history_exports]\ntotal = 100000",
            "total = 100000 is too large: at most 1024",
        ),
        (
            "[history_exports]\nconnections = 65",
            "connections = 65 is too large: at most 64",
        ),
    ] {
        let err = FileConfig::parse(text).unwrap_err();
        assert!(err.contains(why), "{text}: {err}");
    }
}
