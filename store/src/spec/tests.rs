use super::*;
use crate::scylla::Serial;

#[test]
fn every_form_parses() {
    let cases = [
        (
            "etcd:http://a:1,http://b:2",
            StoreSpec::Etcd {
                endpoints: vec!["http://a:1".into(), "http://b:2".into()],
                prefix: None,
            },
        ),
        (
            "etcd:http://a:1#/team/",
            StoreSpec::Etcd {
                endpoints: vec!["http://a:1".into()],
                prefix: Some("/team/".into()),
            },
        ),
        (
            "sqlite:/tmp/x.db",
            StoreSpec::Sql {
                url: "sqlite:///tmp/x.db?mode=rwc".into(),
            },
        ),
        (
            "sqlite:///tmp/x.db",
            StoreSpec::Sql {
                url: "sqlite:///tmp/x.db?mode=rwc".into(),
            },
        ),
        (
            "postgres://u:p@h/db",
            StoreSpec::Sql {
                url: "postgres://u:p@h/db".into(),
            },
        ),
        (
            "shedlock+postgres://u@h/db#sched.shedlock",
            StoreSpec::ShedLock {
                url: "postgres://u@h/db".into(),
                table: "sched.shedlock".into(),
            },
        ),
        (
            "shedlock+sqlite:/tmp/s.db",
            StoreSpec::ShedLock {
                url: "sqlite:///tmp/s.db".into(),
                table: "shedlock".into(),
            },
        ),
    ];
    for (text, want) in cases {
        assert_eq!(StoreSpec::parse(text).unwrap(), want, "{text}");
    }
}

#[test]
fn scylla_forms_parse() {
    let StoreSpec::Scylla(ScyllaTarget::Cluster(c)) = StoreSpec::parse(
        "scylla:10.0.0.1,10.0.0.2:19042/locks?dc=eu-west&serial=local&user=lockscope&password_file=/run/pw&tls_ca=/etc/ca.pem&scan_ms=2500",
    )
    .unwrap() else {
        panic!("a cluster")
    };
    assert_eq!(c.nodes, ["10.0.0.1:9042", "10.0.0.2:19042"]);
    let StoreSpec::Scylla(ScyllaTarget::Cluster(v6)) = StoreSpec::parse("scylla:[::1],[fe80::1]:19042").unwrap() else {
        panic!("a cluster")
    };
    assert_eq!(v6.nodes, ["[::1]:9042", "[fe80::1]:19042"]);
    assert_eq!(c.keyspace, "locks");
    assert_eq!(c.datacenter.as_deref(), Some("eu-west"));
    assert_eq!(c.serial, Serial::Local);
    assert_eq!(c.user.as_deref(), Some("lockscope"));
    assert_eq!(c.password_file.as_deref(), Some("/run/pw"));
    assert_eq!(c.tls_ca.as_deref(), Some("/etc/ca.pem"));
    assert_eq!(c.scan, std::time::Duration::from_millis(2500));
    let plain = StoreSpec::parse("scylla://db-1").unwrap();
    assert_eq!(plain.source(), "ScyllaDB db-1:9042 keyspace lockscope");
    assert_eq!(
        StoreSpec::parse("scylla-memory:demo?schema=published").unwrap(),
        StoreSpec::Scylla(ScyllaTarget::Memory {
            name: "demo".into(),
            published: true
        })
    );
    for (text, want) in [
        ("scylla:", "at least one contact point"),
        ("scylla:h/bad-keyspace", "not a plain CQL identifier"),
        ("scylla:h?password=hunter2", "never written in a spec"),
        ("scylla:h?serial=maybe", "unknown or empty option serial"),
        ("scylla:h?scan_ms=5", "from 100 to 3600000"),
        ("scylla:h?pwd=hunter2", "unknown or empty option pwd"),
        ("scylla://admin:hunter2@h", "credentials are never written"),
        ("scylla-memory:", "needs a name"),
        ("scylla-memory:x?schema=other", "only ?schema=published"),
    ] {
        let err = StoreSpec::parse(text).unwrap_err().to_string();
        assert!(err.contains(want), "{text}: {err}");
        assert!(!err.contains("hunter2"), "{err}");
    }
}

#[test]
fn mistakes_are_configuration_errors_that_hide_passwords() {
    for (text, want) in [
        ("etcd:", "at least one endpoint"),
        ("etcd:http://a:1#", "empty etcd prefix"),
        ("mysql://root:hunter2@h/db", "expected etcd:"),
        ("shedlock+mysql://h", "ShedLock"),
        ("shedlock+sqlite:/x#drop table", "not a plain SQL identifier"),
        ("sqlite:", "file path"),
    ] {
        let err = StoreSpec::parse(text).unwrap_err();
        assert!(matches!(err, StoreError::Config(_)), "{text}: {err:?}");
        assert!(err.to_string().contains(want), "{text}: {err}");
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }
}

#[test]
fn sources_carry_no_credentials() {
    let pg = StoreSpec::parse("postgres://admin:hunter2@db:5432/locks?sslmode=require").unwrap();
    assert_eq!(pg.source(), "postgres://admin@db:5432/locks");
    let etcd = StoreSpec::parse("etcd:http://a:1").unwrap().with_default_prefix("/x/");
    assert_eq!(etcd.source(), "etcd http://a:1 /x/");
    assert!(!StoreSpec::parse("shedlock+sqlite:/s.db").unwrap().writable());
}

#[test]
fn a_spec_built_by_hand_that_cannot_be_observed_is_refused_at_open() {
    let bad = StoreSpec::ShedLock {
        url: "sqlite:///tmp/s.db".into(),
        table: "x; drop table y".into(),
    };
    assert!(matches!(bad.open(), Err(StoreError::Config(_))));
    assert!(
        StoreSpec::parse("sqlite:/tmp/x.db").unwrap().open().is_ok(),
        "no connection at open"
    );
}
