//! The spec's options and the fence (no database needed).

use std::time::Duration;

use super::*;
use crate::spec::StoreSpec;
use lockscope_model::fleet::FamilyDetail;
use lockscope_model::LockBody;

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
    assert_eq!(t.holds, 50, "store/src/pg_advisory/spec.rs: `holds=50` by default");
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
    assert_eq!(target("advisory+postgres://db#holds=3").holds, 3);
}

#[test]
fn a_bad_spec_says_what_is_wrong() {
    for (spec, said) in [
        ("advisory+mysql://db", "advisory+postgres://"),
        ("advisory+postgres://db#poll=1", "not a duration"),
        ("advisory+postgres://db#poll=10ms", "between 100ms"),
        ("advisory+postgres://db#limit=0", "limit=0"),
        ("advisory+postgres://db#holds=0", "holds=0: a number from 1 to 10000"),
        ("advisory+postgres://db#holds=10001", "from 1 to 10000"),
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

/// A poll's read of `n` advisory locks all held by one backend (a pooled
/// connection or a job runner holding one lock per job).
fn one_backend_holding(n: usize) -> poll::Read {
    poll::Read {
        now_ms: 1_000,
        locks: (0..n)
            .map(|i| poll::LockRow {
                pid: Some(7),
                granted: true,
                mode: "ExclusiveLock".into(),
                sub: 1,
                classid: 0,
                objid: i as i64,
                waitstart: None,
            })
            .collect(),
        blocked: vec![],
        backends: vec![poll::BackendRow {
            pid: 7,
            start_us: Some(1),
            app: Some("runner".into()),
            user: None,
            addr: None,
            xact_ms: None,
            state: Some("idle".into()),
            state_ms: Some(1),
            query_ms: None,
            query: None,
            holds: None,
        }],
        names: vec![],
    }
}

/// The fastest of two builds of `n` locks, in µs.
fn build_us(n: usize) -> u128 {
    let t = target(&format!("advisory+postgres://db/app#limit={n}"));
    // The fastest of five: a run preempted on a loaded machine (a helper's build beside
    // it once made 10x the locks take over 40x the time) is not the cost.
    (0..5)
        .map(|_| {
            let read = one_backend_holding(n);
            let t0 = std::time::Instant::now();
            let snapshot = poll::build(&t, read, &mut Default::default());
            let took = t0.elapsed().as_micros();
            assert_eq!(snapshot.locks.len(), n);
            took
        })
        .min()
        .unwrap()
}

/// docs/performance.md ("PostgreSQL advisory locks"): a poll's snapshot costs time linear in
/// the locks read. Each lock lists what else its holder holds (50 entries at most); listing
/// it once copied everything the holder held, so one backend holding 10,000 keys cost
/// 10,000 × 10,000 copies a poll (1.9 s of a debug build's CPU every second).
#[test]
fn a_poll_costs_time_linear_in_its_locks_when_one_backend_holds_them_all() {
    let small = build_us(500).max(1);
    let large = build_us(5_000);
    assert!(
        large < small * 40,
        "10x the locks took {}x the time ({small} µs, then {large} µs): not linear",
        large / small
    );
    let t = target("advisory+postgres://db/app");
    let snapshot = poll::build(&t, one_backend_holding(100), &mut Default::default());
    let LockBody::Foreign { detail: Some(d), .. } = &snapshot.locks[0].body else {
        panic!("{:?}", snapshot.locks[0]);
    };
    let FamilyDetail::PgAdvisory(l) = &**d else {
        panic!("{d:?}")
    };
    assert_eq!(
        l.holders[0].also_holds.len(),
        AdvisoryTarget::DEFAULT_HOLDS,
        "what else it holds, cut to 50"
    );
    // store/src/pg_advisory/spec.rs: "`holds=50`: the most entries a holder's
    // \"also holds\" lists".
    let t = target("advisory+postgres://db/app#holds=3");
    let snapshot = poll::build(&t, one_backend_holding(100), &mut Default::default());
    let LockBody::Foreign { detail: Some(d), .. } = &snapshot.locks[0].body else {
        panic!("{:?}", snapshot.locks[0]);
    };
    let FamilyDetail::PgAdvisory(l) = &**d else {
        panic!("{d:?}")
    };
    assert_eq!(l.holders[0].also_holds.len(), 3, "holds=3 lists 3");
}
