//! The spec's options and the fence (no database needed).

use std::time::Duration;

use super::*;
use crate::spec::StoreSpec;

fn target(spec: &str) -> AdvisoryTarget {
    match StoreSpec::parse(spec).unwrap() {
        StoreSpec::PgAdvisory(t) => t,
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_spec_and_its_options() {
    let t = target("advisory+postgres://me:secret@db:5432/app");
    assert_eq!(t.url, "postgres://me:secret@db:5432/app");
    assert_eq!(
        (t.poll, t.limit, t.idle),
        (Duration::from_secs(1), 10_000, Duration::from_secs(300))
    );
    assert!(!t.source().contains("secret"), "{}", t.source());
    let t = target(
        "advisory+postgresql://db/app?sslmode=disable#poll=500ms&limit=20&idle=2m&poolers=bouncer&names=ops.lock_names\
         &name.42=migrations&name.1:-2=jobs&hashtext=nightly,weekly",
    );
    assert_eq!(t.url, "postgresql://db/app?sslmode=disable");
    assert_eq!(
        (t.poll, t.limit, t.idle),
        (Duration::from_millis(500), 20, Duration::from_secs(120))
    );
    assert_eq!(t.poolers, vec!["bouncer"]);
    assert_eq!(t.names_table.as_deref(), Some("ops.lock_names"));
    assert_eq!(t.names["42"], "migrations");
    assert_eq!(t.names["1:-2"], "jobs");
    assert_eq!(t.hashtext, vec!["nightly", "weekly"]);
}

#[test]
fn a_bad_spec_says_what_is_wrong() {
    for (spec, said) in [
        ("advisory+mysql://db", "advisory+postgres://"),
        ("advisory+postgres://db#poll=1", "not a duration"),
        ("advisory+postgres://db#poll=10ms", "between 100ms"),
        ("advisory+postgres://db#limit=0", "limit=0"),
        ("advisory+postgres://db#names=x;drop", "plain table name"),
        ("advisory+postgres://db#name.abc=x", "KEY (a bigint) or K1:K2"),
        ("advisory+postgres://db#colour=red", "unknown option"),
    ] {
        let err = StoreSpec::parse(spec).unwrap_err().to_string();
        assert!(err.contains(said), "{spec}: {err}");
    }
}

#[test]
fn a_fence_names_one_backend() {
    assert_eq!(fence_of(7, 1_000), fence_of(7, 1_000));
    assert_ne!(
        fence_of(7, 1_000),
        fence_of(7, 1_001),
        "a reused pid is another backend"
    );
    assert_ne!(fence_of(7, 1_000), fence_of(8, 1_000));
    assert!(fence_of(i32::MAX, i64::MAX) >= 0);
}
