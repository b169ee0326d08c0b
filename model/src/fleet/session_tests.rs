//! The reducer's sessions, blacklist, liveness and deadlock flags.

use super::*;
use crate::record::{sample, BlacklistRecord, SessionRecord, RECORD_VERSION};

fn lock_of(name: &str, session: &str, revision: i64) -> LockEntry {
    let mut r = sample(&format!("o{revision}"));
    r.session = session.into();
    LockEntry {
        name: name.into(),
        fence: revision,
        revision,
        body: LockBody::Held(r),
    }
}

fn session_record(id: &str, heartbeat_at: i64) -> SessionRecord {
    SessionRecord {
        v: RECORD_VERSION,
        session: id.into(),
        service: "billing".into(),
        host: "host-a".into(),
        pid: 7,
        started_at: 0,
        heartbeat_at,
        waiting_for: None,
        contention: Default::default(),
    }
}

fn session(id: &str) -> SessionEntry {
    SessionEntry::from_stored(id.into(), 1, &serde_json::to_vec(&session_record(id, 0)).unwrap(), None)
}

fn blacklisted(id: &str) -> BlacklistEntry {
    let rec = BlacklistRecord {
        v: RECORD_VERSION,
        session: id.into(),
        by: "oncall".into(),
        reason: "stuck".into(),
        at: 5,
    };
    BlacklistEntry::from_stored(id.into(), 1, &serde_json::to_vec(&rec).unwrap())
}

fn tracked(locks: Vec<LockEntry>, sessions: Vec<SessionEntry>, blacklist: Vec<BlacklistEntry>) -> FleetState {
    let mut s = FleetState::default();
    s.apply(FleetEvent::Reset(Snapshot {
        revision: 1,
        locks,
        sessions: Some(sessions),
        blacklist,
        ..Snapshot::default()
    }));
    s
}

#[test]
fn every_liveness_state() {
    let r = sample("o");
    let before_alert = r.alert_at - 1;
    struct Case {
        name: &'static str,
        sessions: Vec<SessionEntry>,
        blacklist: Vec<BlacklistEntry>,
        now: i64,
        want: RowState,
    }
    let cases = [
        Case {
            name: "healthy: session alive, before alert_at",
            sessions: vec![session("s-1")],
            blacklist: vec![],
            now: before_alert,
            want: RowState::Healthy,
        },
        Case {
            name: "overdue: past alert_at",
            sessions: vec![session("s-1")],
            blacklist: vec![],
            now: r.alert_at,
            want: RowState::Overdue,
        },
        Case {
            name: "expired: past auto_unlock_at",
            sessions: vec![session("s-1")],
            blacklist: vec![],
            now: r.auto_unlock_at,
            want: RowState::Expired,
        },
        Case {
            name: "orphaned: no session",
            sessions: vec![session("other")],
            blacklist: vec![],
            now: before_alert,
            want: RowState::Orphaned,
        },
        Case {
            name: "orphaned beats overdue",
            sessions: vec![],
            blacklist: vec![],
            now: r.alert_at,
            want: RowState::Orphaned,
        },
        Case {
            name: "expired beats orphaned",
            sessions: vec![],
            blacklist: vec![],
            now: r.auto_unlock_at,
            want: RowState::Expired,
        },
        Case {
            name: "blacklisted: alive but on the blacklist",
            sessions: vec![session("s-1")],
            blacklist: vec![blacklisted("s-1")],
            now: before_alert,
            want: RowState::Blacklisted,
        },
        Case {
            name: "blacklisted and gone",
            sessions: vec![],
            blacklist: vec![blacklisted("s-1")],
            now: before_alert,
            want: RowState::Blacklisted,
        },
    ];
    for c in cases {
        let s = tracked(vec![lock_of("a", "s-1", 2)], c.sessions, c.blacklist);
        let e = s.get("a").unwrap();
        assert_eq!(s.state_of(e, c.now), c.want, "{}", c.name);
        assert_eq!(s.counts(c.now).of(c.want), 1, "{}: counted", c.name);
        assert!(!c.want.reason().is_empty());
    }
    // A store without sessions: liveness from the times alone.
    let mut s = FleetState::default();
    s.apply(FleetEvent::Upsert(lock_of("a", "s-1", 2)));
    assert_eq!(s.state_of(s.get("a").unwrap(), before_alert), RowState::Healthy);
    let bad = LockEntry::from_stored("bad".into(), 3, 3, b"{");
    assert_eq!(RowState::of(&bad, Holder::Gone, before_alert), RowState::Malformed);
}

#[test]
fn session_events_report_holder_changes_only_when_the_holder_state_moves() {
    let mut s = tracked(
        vec![lock_of("a", "s-1", 2), lock_of("b", "s-1", 3), lock_of("c", "s-2", 4)],
        vec![session("s-1"), session("s-2")],
        vec![],
    );
    let sess = |n: &str| Changed::Session(n.into());
    let holder = |n: &str| Changed::Holder(n.into());
    // A heartbeat: the session changed, its locks' state did not.
    let mut beat = session("s-1");
    beat.revision = 9;
    assert_eq!(s.apply(FleetEvent::Session(beat.clone())), vec![sess("s-1")]);
    assert_eq!(
        s.apply(FleetEvent::Session(beat)),
        vec![],
        "a duplicate changes nothing"
    );
    assert_eq!(
        s.apply(FleetEvent::SessionGone { id: "s-1".into() }),
        vec![sess("s-1"), holder("s-1")]
    );
    assert_eq!(s.holder(s.get("a").unwrap()), Holder::Gone);
    assert_eq!(s.apply(FleetEvent::SessionGone { id: "s-1".into() }), vec![]);
    assert_eq!(
        s.apply(FleetEvent::Blacklisted(blacklisted("s-2"))),
        vec![sess("s-2"), holder("s-2")]
    );
    assert_eq!(s.holder(s.get("c").unwrap()), Holder::Blacklisted);
    assert_eq!(
        s.apply(FleetEvent::BlacklistLifted { session: "s-2".into() }),
        vec![sess("s-2"), holder("s-2")]
    );
    // A reset that brings s-1 back: its holder state moved, s-2's did not.
    let changes = s.apply(FleetEvent::Reset(Snapshot {
        revision: 12,
        locks: s.locks().cloned().collect(),
        sessions: Some(vec![session("s-1"), session("s-2")]),
        ..Snapshot::default()
    }));
    assert_eq!(changes, vec![sess("s-1"), holder("s-1")]);
    assert_eq!(s.holder(s.get("a").unwrap()), Holder::Alive);
}

#[test]
fn skew_is_heartbeat_minus_receive_time() {
    let raw = serde_json::to_vec(&session_record("s", 50_000)).unwrap();
    let seen = SessionEntry::from_stored("s".into(), 1, &raw, Some(47_000));
    assert_eq!(
        seen.skew_estimate(),
        Some(3_000),
        "the holder's clock is at least 3 s ahead"
    );
    let behind = SessionEntry::from_stored("s".into(), 1, &raw, Some(52_500));
    assert_eq!(behind.skew_estimate(), Some(-2_500));
    let snapshot = SessionEntry::from_stored("s".into(), 1, &raw, None);
    assert_eq!(snapshot.skew_estimate(), None, "a snapshot's heartbeat may be old");
    let malformed = SessionEntry::from_stored("s".into(), 1, b"[]", Some(1));
    assert_eq!(malformed.skew_estimate(), None);
    assert!(malformed.record().is_none());
}

#[test]
fn wait_for_cycles_of_two_and_three_are_flagged_and_cleared() {
    let mut s = tracked(
        vec![lock_of("x", "A", 2), lock_of("y", "B", 3), lock_of("z", "C", 4)],
        vec![session("A"), session("B"), session("C")],
        vec![],
    );
    let w = |lock: &str, session: &str| Waiter {
        lock: lock.into(),
        session: session.into(),
    };
    // Length 2: A waits for y (held by B), B waits for x (held by A).
    s.apply(FleetEvent::Waiting(w("y", "A")));
    assert!(s.deadlocks().sessions.is_empty());
    let changes = s.apply(FleetEvent::Waiting(w("x", "B")));
    assert_eq!(
        changes,
        vec![
            Changed::Waiters("x".into()),
            Changed::Lock("x".into()),
            Changed::Lock("y".into()),
            Changed::Session("A".into()),
            Changed::Session("B".into()),
        ]
    );
    assert_eq!(s.deadlocks().locks.iter().collect::<Vec<_>>(), ["x", "y"]);
    // Broken by B giving up.
    s.apply(FleetEvent::StoppedWaiting(w("x", "B")));
    assert!(s.deadlocks().locks.is_empty());
    // Length 3: A -> y (B), B -> z (C), C -> x (A).
    s.apply(FleetEvent::Waiting(w("z", "B")));
    s.apply(FleetEvent::Waiting(w("x", "C")));
    assert_eq!(s.deadlocks().sessions.iter().collect::<Vec<_>>(), ["A", "B", "C"]);
    assert_eq!(s.deadlocks().locks.iter().collect::<Vec<_>>(), ["x", "y", "z"]);
    // Broken by x changing hands (its holder A released it, D took it).
    s.apply(FleetEvent::Upsert(lock_of("x", "D", 9)));
    assert!(s.deadlocks().sessions.is_empty(), "{:?}", s.deadlocks());
}

#[test]
fn the_first_reset_of_a_store_with_sessions_reports_each_lock_once() {
    let mut s = FleetState::default();
    let changes = s.apply(FleetEvent::Reset(Snapshot {
        revision: 1,
        locks: vec![lock_of("a", "s-1", 2), lock_of("b", "s-1", 3)],
        sessions: Some(vec![session("s-1")]),
        ..Snapshot::default()
    }));
    let locks: Vec<&Changed> = changes.iter().filter(|c| matches!(c, Changed::Lock(_))).collect();
    assert_eq!(locks, [&Changed::Lock("a".into()), &Changed::Lock("b".into())]);
    // Back to a store without sessions (the same locks): every lock again, once.
    let changes = s.apply(FleetEvent::Reset(Snapshot {
        revision: 2,
        locks: vec![lock_of("a", "s-1", 2), lock_of("b", "s-1", 3)],
        ..Snapshot::default()
    }));
    assert_eq!(changes.iter().filter(|c| matches!(c, Changed::Lock(_))).count(), 2);
    assert_eq!(s.holder(s.get("a").unwrap()), Holder::Unknown);
}

/// A foreign schema's lock has no times: only its session's liveness (when the
/// row names one) moves it off [`RowState::Foreign`], whatever the clock says.
#[test]
fn a_foreign_lock_follows_its_session_only() {
    struct Case {
        name: &'static str,
        session: Option<&'static str>,
        sessions: Vec<SessionEntry>,
        blacklist: Vec<BlacklistEntry>,
        want: RowState,
    }
    let cases = [
        Case {
            name: "session alive",
            session: Some("s-1"),
            sessions: vec![session("s-1")],
            blacklist: vec![],
            want: RowState::Foreign,
        },
        Case {
            name: "session gone",
            session: Some("s-1"),
            sessions: vec![session("other")],
            blacklist: vec![],
            want: RowState::Orphaned,
        },
        Case {
            name: "session blacklisted",
            session: Some("s-1"),
            sessions: vec![session("s-1")],
            blacklist: vec![blacklisted("s-1")],
            want: RowState::Blacklisted,
        },
        Case {
            name: "blacklisted and gone",
            session: Some("s-1"),
            sessions: vec![],
            blacklist: vec![blacklisted("s-1")],
            want: RowState::Blacklisted,
        },
        Case {
            name: "the row names no session",
            session: None,
            sessions: vec![],
            blacklist: vec![],
            want: RowState::Foreign,
        },
    ];
    for c in cases {
        let lock = LockEntry::foreign("t".into(), 2, 2, c.session.map(Into::into), Some(0));
        let s = tracked(vec![lock], c.sessions, c.blacklist);
        let e = s.get("t").unwrap();
        // Times never matter: not at the epoch, not at the end of time.
        for now in [0, i64::MAX] {
            assert_eq!(s.state_of(e, now), c.want, "{} at {now}", c.name);
        }
        assert_eq!(s.counts(0).of(c.want), 1, "{}: counted", c.name);
        assert_eq!(RowState::next_change(e, 0), None, "{}: no deadline", c.name);
    }
    // The pure function, each holder state, without a table.
    let named = LockEntry::foreign("t".into(), 2, 2, Some("s-1".into()), None);
    let anon = LockEntry::foreign("t".into(), 2, 2, None, None);
    for (holder, want_named) in [
        (Holder::Alive, RowState::Foreign),
        (Holder::Unknown, RowState::Foreign),
        (Holder::Gone, RowState::Orphaned),
        (Holder::Blacklisted, RowState::Blacklisted),
    ] {
        assert_eq!(RowState::of(&named, holder, i64::MAX), want_named, "{holder:?}");
        assert_eq!(
            RowState::of(&anon, holder, i64::MAX),
            RowState::Foreign,
            "{holder:?}, no session"
        );
    }
    // A store without sessions: the holder is unknown, the lock is foreign.
    let mut s = FleetState::default();
    s.apply(FleetEvent::Upsert(named.clone()));
    assert_eq!(s.holder(&named), Holder::Unknown);
    assert_eq!(s.state_of(&named, 0), RowState::Foreign);
}

#[test]
fn a_foreign_lock_is_linked_to_its_session() {
    let mut s = tracked(
        vec![LockEntry::foreign("t".into(), 2, 2, Some("s-1".into()), Some(5))],
        vec![session("s-1")],
        vec![],
    );
    assert_eq!(s.get("t").unwrap().holder_session(), Some("s-1"));
    assert_eq!(s.holder(s.get("t").unwrap()), Holder::Alive);
    // Its session going moves its holder state: the views re-place its locks.
    let changes = s.apply(FleetEvent::SessionGone { id: "s-1".into() });
    assert!(changes.contains(&Changed::Holder("s-1".into())), "{changes:?}");
    assert_eq!(s.state_of(s.get("t").unwrap(), 0), RowState::Orphaned);
    let c = s.counts(0);
    assert_eq!((c.orphaned, c.foreign, c.of(RowState::Healthy)), (1, 0, 0));
    // A foreign lock's holder on a wait-for cycle is found like any other.
    s.apply(FleetEvent::Upsert(lock_of("u", "s-2", 3)));
    s.apply(FleetEvent::Waiting(Waiter {
        lock: "t".into(),
        session: "s-2".into(),
    }));
    s.apply(FleetEvent::Waiting(Waiter {
        lock: "u".into(),
        session: "s-1".into(),
    }));
    assert!(s.deadlocks().locks.contains("t"), "{:?}", s.deadlocks());
}
