use super::intern::Interner;
use super::*;
use crate::record::{sample, LockRecord, MALFORMED_KEEP_BYTES};
use std::sync::Arc;

fn held(name: &str, fence: i64, revision: i64) -> LockEntry {
    LockEntry {
        name: name.into(),
        fence,
        revision,
        body: LockBody::Held(sample(&format!("o{fence}"))),
    }
}
fn up(name: &str, fence: i64, revision: i64) -> FleetEvent {
    FleetEvent::Upsert(held(name, fence, revision))
}
fn rm(name: &str, revision: i64) -> FleetEvent {
    FleetEvent::Remove {
        name: name.into(),
        revision,
    }
}
fn reset(revision: i64, locks: Vec<LockEntry>) -> FleetEvent {
    FleetEvent::Reset(Snapshot {
        revision,
        locks,
        ..Snapshot::default()
    })
}

fn lock(name: &str) -> Changed {
    Changed::Lock(name.into())
}

fn waiter(lock: &str, session: &str) -> Waiter {
    Waiter {
        lock: lock.into(),
        session: session.into(),
    }
}

struct Case {
    name: &'static str,
    start: Vec<FleetEvent>,
    event: FleetEvent,
    changes: Vec<Changed>,
    names_after: Vec<&'static str>,
}

#[test]
fn reducer_table() {
    let cases = vec![
        Case {
            name: "acquire",
            start: vec![],
            event: up("a", 5, 5),
            changes: vec![lock("a")],
            names_after: vec!["a"],
        },
        Case {
            name: "release",
            start: vec![up("a", 5, 5)],
            event: rm("a", 6),
            changes: vec![lock("a")],
            names_after: vec![],
        },
        Case {
            name: "duplicate upsert is ignored",
            start: vec![up("a", 5, 5)],
            event: up("a", 5, 5),
            changes: vec![],
            names_after: vec!["a"],
        },
        Case {
            name: "an upsert at the same revision with news (a lease read again) is applied",
            start: vec![up("a", 5, 5)],
            event: {
                let mut e = held("a", 5, 5);
                if let LockBody::Held(r) = &mut e.body {
                    r.purpose = "read again".into();
                }
                FleetEvent::Upsert(e)
            },
            changes: vec![lock("a")],
            names_after: vec!["a"],
        },
        Case {
            name: "stale upsert is ignored",
            start: vec![up("a", 5, 7)],
            event: up("a", 5, 6),
            changes: vec![],
            names_after: vec!["a"],
        },
        Case {
            name: "heartbeat updates in place",
            start: vec![up("a", 5, 5)],
            event: up("a", 5, 8),
            changes: vec![lock("a")],
            names_after: vec!["a"],
        },
        Case {
            name: "remove of an absent lock is ignored",
            start: vec![],
            event: rm("a", 3),
            changes: vec![],
            names_after: vec![],
        },
        Case {
            name: "stale remove does not delete a newer acquisition",
            start: vec![up("a", 9, 9)],
            event: rm("a", 8),
            changes: vec![],
            names_after: vec!["a"],
        },
        Case {
            name: "reset into empty state lists every lock",
            start: vec![],
            event: reset(10, vec![held("b", 2, 2), held("a", 1, 1)]),
            changes: vec![lock("b"), lock("a")],
            names_after: vec!["a", "b"],
        },
        Case {
            name: "reset after compaction emits only the difference",
            start: vec![up("keep", 1, 1), up("gone", 2, 2), up("moved", 3, 3)],
            event: reset(20, vec![held("keep", 1, 1), held("moved", 15, 15), held("new", 18, 18)]),
            changes: vec![lock("moved"), lock("new"), lock("gone")],
            names_after: vec!["keep", "moved", "new"],
        },
        Case {
            name: "identical reset changes nothing",
            start: vec![up("a", 1, 1)],
            event: reset(30, vec![held("a", 1, 1)]),
            changes: vec![],
            names_after: vec!["a"],
        },
    ];
    for c in cases {
        let mut s = FleetState::default();
        for e in c.start {
            s.apply(e);
        }
        let got = s.apply(c.event);
        assert_eq!(got, c.changes, "{}: changes", c.name);
        let names: Vec<&str> = s.locks().map(|e| e.name.as_str()).collect();
        assert_eq!(names, c.names_after, "{}: table", c.name);
    }
}

#[test]
fn a_reset_removes_what_it_lacks_whatever_the_revisions() {
    // A store whose row revisions run ahead of its reset revision (SQL rows
    // count their own writes): the removal still happens.
    let mut s = FleetState::default();
    s.apply(up("b", 2, 2));
    s.apply(up("e", 60, 60));
    assert_eq!(s.apply(reset(10, vec![held("b", 2, 2)])), vec![lock("e")]);
    assert_eq!(s.locks().map(|e| e.name.as_str()).collect::<Vec<_>>(), vec!["b"]);
    assert_eq!(s.revision(), 10, "a reset's revision replaces ours");
}

#[test]
fn malformed_values_become_entries() {
    let e = LockEntry::from_stored("x".into(), 4, 4, b"not json at all");
    match &e.body {
        LockBody::Malformed { raw, error } => {
            assert_eq!(raw, b"not json at all");
            assert!(error.contains("not a lock record"), "{error}");
        }
        other => panic!("expected malformed, got {other:?}"),
    }
    let big = vec![b'x'; MALFORMED_KEEP_BYTES * 2];
    match LockEntry::from_stored("y".into(), 1, 1, &big).body {
        LockBody::Malformed { raw, .. } => assert_eq!(raw.len(), MALFORMED_KEEP_BYTES),
        other => panic!("expected malformed, got {other:?}"),
    }
}

#[test]
fn counts_by_liveness() {
    let mut s = FleetState::default();
    s.apply(up("a", 1, 1));
    s.apply(FleetEvent::Upsert(LockEntry::from_stored("bad".into(), 2, 2, b"x")));
    s.apply(FleetEvent::Waiting(waiter("a", "s1")));
    let r = sample("o");
    let c = |held, overdue, expired, malformed| Counts {
        held,
        overdue,
        expired,
        malformed,
        waiters: 1,
        ..Counts::default()
    };
    assert_eq!(s.counts(r.alert_at - 1), c(2, 0, 0, 1));
    assert_eq!(s.counts(r.alert_at), c(2, 1, 0, 1));
    assert_eq!(s.counts(r.auto_unlock_at), c(2, 0, 1, 1));
}

#[test]
fn waiters_come_and_go_and_resets_diff_them() {
    let mut s = FleetState::default();
    assert_eq!(
        s.apply(FleetEvent::Waiting(waiter("a", "s1"))),
        vec![Changed::Waiters("a".into())]
    );
    assert_eq!(
        s.apply(FleetEvent::Waiting(waiter("a", "s1"))),
        vec![],
        "duplicates change nothing"
    );
    s.apply(FleetEvent::Waiting(waiter("a", "s2")));
    s.apply(FleetEvent::Waiting(waiter("ab", "s3")));
    assert_eq!(
        s.waiters_of("a").collect::<Vec<_>>(),
        vec!["s1", "s2"],
        "not ab's waiter"
    );
    assert_eq!(s.apply(FleetEvent::StoppedWaiting(waiter("zz", "s9"))), vec![]);
    let changes = s.apply(FleetEvent::Reset(Snapshot {
        revision: 5,
        waiters: vec![waiter("a", "s2"), waiter("b", "s4")],
        ..Snapshot::default()
    }));
    assert_eq!(
        changes,
        vec![
            Changed::Waiters("a".into()),
            Changed::Waiters("ab".into()),
            Changed::Waiters("b".into()),
        ]
    );
    assert_eq!(s.waiters().count(), 2);
}

/// An entry as an observer hands it over: parsed from its JSON, so none of its
/// strings is shared with anything yet.
fn parsed(name: &str, revision: i64, service: &str, session: &str) -> LockEntry {
    let mut r = sample(&format!("o{revision}"));
    r.service = service.into();
    r.session = session.into();
    r.backtrace = backtrace(service).into();
    LockEntry::from_stored(name.into(), revision, revision, &r.to_json())
}

fn backtrace(service: &str) -> Vec<String> {
    vec![format!("{service}::run"), "main".to_string()]
}

fn record<'a>(s: &'a FleetState, name: &str) -> &'a LockRecord {
    s.get(name).and_then(LockEntry::record).expect("held")
}

#[test]
fn locks_share_their_common_values() {
    let mut s = FleetState::default();
    let (a, b) = (parsed("a", 1, "billing", "s-1"), parsed("b", 2, "billing", "s-1"));
    let (ra, rb) = (a.record().unwrap(), b.record().unwrap());
    assert!(!Arc::ptr_eq(&ra.service, &rb.service), "parsed apart");
    s.apply(FleetEvent::Upsert(a));
    s.apply(reset(
        3,
        vec![s.get("a").unwrap().clone(), b, parsed("c", 3, "search", "s-1")],
    ));
    let (ra, rb, rc) = (record(&s, "a"), record(&s, "b"), record(&s, "c"));
    assert!(Arc::ptr_eq(&ra.service, &rb.service), "one service, one allocation");
    assert!(Arc::ptr_eq(&ra.host, &rc.host));
    assert!(Arc::ptr_eq(&ra.session, &rc.session));
    assert!(
        Arc::ptr_eq(&ra.backtrace, &rb.backtrace),
        "one call site, one backtrace"
    );
    assert!(!Arc::ptr_eq(&ra.backtrace, &rc.backtrace));
    assert_eq!(&*rc.service, "search");
    // A heartbeat (a newer record of the same lock) shares them too.
    s.apply(FleetEvent::Upsert(parsed("b", 4, "billing", "s-1")));
    assert!(Arc::ptr_eq(&record(&s, "a").service, &record(&s, "b").service));
    assert_eq!(s, s.clone(), "the interner is no part of the state");
}

/// A snapshot's table is built in one go (full B-tree nodes): that keeps what
/// inserting one by one did, the last entry of a name twice in the snapshot.
#[test]
fn a_snapshot_with_a_name_twice_keeps_the_last() {
    let mut s = FleetState::default();
    let locks = vec![
        parsed("b", 1, "x", "s-1"),
        parsed("a", 2, "x", "s-1"),
        parsed("b", 3, "y", "s-1"),
    ];
    s.apply(reset(3, locks));
    assert_eq!(s.locks().map(|e| e.name.as_str()).collect::<Vec<_>>(), ["a", "b"]);
    assert_eq!(s.get("b").unwrap().fence, 3, "the later entry of b");
    assert_eq!(&*record(&s, "b").service, "y");
}

/// What `SnapshotSharing` is for: an observer's snapshot arrives with its
/// common fields already shared, and the hub keeps those very allocations
/// rather than dropping them all at the end for copies of its own.
#[test]
fn a_snapshot_shared_as_it_is_read_is_kept_as_shared() {
    let mut sharing = SnapshotSharing::default();
    let a = sharing.share(parsed("a", 1, "billing", "s-1"));
    let b = sharing.share(parsed("b", 2, "billing", "s-1"));
    let (ra, rb) = (a.record().unwrap(), b.record().unwrap());
    assert!(Arc::ptr_eq(&ra.service, &rb.service), "shared as it is read");
    assert!(Arc::ptr_eq(&ra.backtrace, &rb.backtrace));
    let service = ra.service.clone();
    drop(sharing);
    let mut s = FleetState::default();
    s.apply(reset(2, vec![a, b]));
    assert!(
        Arc::ptr_eq(&record(&s, "a").service, &service),
        "the table keeps the snapshot's copy"
    );
    assert!(Arc::ptr_eq(&record(&s, "b").service, &service));
}

#[test]
fn values_no_lock_uses_are_dropped_after_churn() {
    let mut s = FleetState::default();
    s.apply(FleetEvent::Upsert(parsed("keep", 1, "billing", "s-keep")));
    for i in 0..10 {
        s.apply(FleetEvent::Upsert(parsed(
            &format!("gone-{i}"),
            2 + i,
            "retired",
            "s-gone",
        )));
    }
    for i in 0..10 {
        s.apply(rm(&format!("gone-{i}"), 100 + i));
    }
    assert!(s.shared.strings.holds("retired"), "not yet pruned: nothing new came");
    // Each interner prunes only when it grows: churn of short-lived locks of
    // ever new services and sessions (so new backtraces too), released at once.
    let mut revision = 1_000;
    for i in 0..1_000 {
        revision += 2;
        let (service, session) = (format!("batch-{i}"), format!("s-{i}"));
        s.apply(FleetEvent::Upsert(parsed("churn", revision, &service, &session)));
        s.apply(rm("churn", revision + 1));
    }
    let strings = &s.shared.strings;
    assert!(!strings.holds("retired") && !strings.holds("s-gone"), "dropped");
    let backtraces = &s.shared.backtraces;
    assert!(!backtraces.holds(&backtrace("retired")), "dropped");
    assert!(backtraces.holds(&backtrace("billing")), "still in use");
    assert!(backtraces.set.len() <= 2 * Interner::<[String]>::MIN_PRUNE);
    assert!(strings.holds("billing") && strings.holds("s-keep"), "still in use");
    assert!(
        strings.set.len() <= 2 * Interner::<str>::MIN_PRUNE,
        "{} values kept",
        strings.set.len()
    );
    assert_eq!(&*record(&s, "keep").service, "billing");
}

#[test]
fn liveness_follows_the_deadlines() {
    let r = sample("o");
    let alive = Holder::Alive;
    assert_eq!(RowState::of_record(&r, alive, r.alert_at - 1), RowState::Healthy);
    assert_eq!(RowState::of_record(&r, alive, r.alert_at), RowState::Overdue);
    assert_eq!(RowState::of_record(&r, alive, r.auto_unlock_at), RowState::Expired);
}

#[test]
fn locks_under_a_prefix_are_a_range_in_name_order() {
    let mut s = FleetState::default();
    for (i, n) in ["b", "ab/c", "a", "ac", "ab", "é", "ab\u{10FFFF}"].iter().enumerate() {
        s.apply(up(n, 1, i as i64 + 1));
    }
    let under = |p: &str| s.locks_under(p).map(|e| e.name.clone()).collect::<Vec<_>>();
    assert_eq!(under("ab"), ["ab", "ab/c", "ab\u{10FFFF}"]);
    assert_eq!(under("a"), ["a", "ab", "ab/c", "ab\u{10FFFF}", "ac"]);
    assert_eq!(under(""), ["a", "ab", "ab/c", "ab\u{10FFFF}", "ac", "b", "é"]);
    assert!(under("z").is_empty());
    // The same ranges read from their ends.
    let rev = |p: &str| s.locks_under_rev(p).map(|e| e.name.clone()).collect::<Vec<_>>();
    for p in ["ab", "a", "", "z", "ab\u{10FFFF}", "\u{10FFFF}"] {
        let mut forward = under(p);
        forward.reverse();
        assert_eq!(rev(p), forward, "{p:?}");
    }
}

#[test]
fn a_foreign_body_round_trips_in_the_wire_format() {
    let e = LockEntry::foreign("scylla/t".into(), 7, 9, Some("sess-1".into()), Some(1_700_000_000_000));
    assert_eq!(e.record(), None, "no lockscope record");
    assert_eq!(e.holder_session(), Some("sess-1"));
    let json = serde_json::to_value(&e).unwrap();
    assert_eq!(
        json,
        serde_json::json!({
            "name": "scylla/t", "fence": 7, "revision": 9,
            "body": {"kind": "foreign", "session": "sess-1", "written_at": 1_700_000_000_000i64},
        })
    );
    assert_eq!(serde_json::from_value::<LockEntry>(json).unwrap(), e);
    // Unknowns are null on the wire, and read back as unknown.
    let anon = LockEntry::foreign("t".into(), 1, 1, None, None);
    let json = serde_json::to_string(&anon.body).unwrap();
    assert_eq!(json, r#"{"kind":"foreign","session":null,"written_at":null}"#);
    assert_eq!(serde_json::from_str::<LockBody>(&json).unwrap(), anon.body);
    assert_eq!(anon.holder_session(), None);
}

#[test]
fn foreign_locks_are_counted_apart_from_healthy_and_attention() {
    let mut s = FleetState::default();
    s.apply(up("a", 1, 1));
    s.apply(FleetEvent::Upsert(LockEntry::foreign(
        "f".into(),
        2,
        2,
        Some("x".into()),
        None,
    )));
    let now = sample("o").alert_at - 1;
    let c = s.counts(now);
    assert_eq!((c.held, c.foreign, c.attention()), (2, 1, 0));
    assert_eq!(c.of(RowState::Foreign), 1);
    assert_eq!(c.of(RowState::Healthy), 1, "the foreign lock is not healthy");
    assert_eq!(c.worst(), RowState::Foreign);
}
