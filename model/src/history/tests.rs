use super::*;
use crate::record::sample;

fn held(name: &str, fence: i64, revision: i64, heartbeat_at: i64) -> LockEntry {
    let mut r = sample(&format!("o{fence}"));
    r.heartbeat_at = heartbeat_at;
    LockEntry {
        name: name.into(),
        fence,
        revision,
        body: LockBody::Held(r),
    }
}

fn malformed(name: &str, fence: i64, revision: i64) -> LockEntry {
    LockEntry::from_stored(name.into(), fence, revision, b"{not json")
}

fn kinds(d: &[Draft]) -> Vec<Kind> {
    d.iter().map(|d| d.kind.unwrap()).collect()
}

/// (case, before, after, holder, note, the kinds wanted)
type Case<'a> = (
    &'a str,
    Option<&'a LockEntry>,
    Option<&'a LockEntry>,
    Holder,
    Option<&'a ReleaseNote>,
    Vec<Kind>,
);

#[test]
fn lock_changes_become_the_events_they_are() {
    let a1 = held("a", 1, 1, 1_000);
    let a1_same_period = held("a", 1, 2, 59_000);
    let a1_next_period = held("a", 1, 3, 61_000);
    let a1_stale = held("a", 1, 0, 200_000);
    let a2 = held("a", 2, 4, 1_000);
    let bad = malformed("a", 1, 5);
    let bad_again = malformed("a", 1, 6);
    let note = ReleaseNote {
        kind: Kind::ForceReleased,
        actor: "alice".into(),
        reason: "stuck".into(),
    };
    use Holder::*;
    let cases: Vec<Case> = vec![
        ("taken", None, Some(&a1), Alive, None, vec![Kind::Acquired]),
        (
            "heartbeat in the same period",
            Some(&a1),
            Some(&a1_same_period),
            Alive,
            None,
            vec![],
        ),
        (
            "heartbeat in a new period",
            Some(&a1),
            Some(&a1_next_period),
            Alive,
            None,
            vec![Kind::Extended],
        ),
        ("a stale revision", Some(&a1), Some(&a1_stale), Alive, None, vec![]),
        (
            "re-taken under a new fence",
            Some(&a1),
            Some(&a2),
            Alive,
            None,
            vec![Kind::Released, Kind::Acquired],
        ),
        (
            "released by a live holder",
            Some(&a1),
            None,
            Alive,
            None,
            vec![Kind::Released],
        ),
        (
            "a store without sessions",
            Some(&a1),
            None,
            Unknown,
            None,
            vec![Kind::Released],
        ),
        (
            "gone with its session",
            Some(&a1),
            None,
            Gone,
            None,
            vec![Kind::Expired],
        ),
        (
            "gone while blacklisted",
            Some(&a1),
            None,
            Blacklisted,
            None,
            vec![Kind::Expired],
        ),
        (
            "force-released",
            Some(&a1),
            None,
            Alive,
            Some(&note),
            vec![Kind::ForceReleased],
        ),
        (
            "an unreadable value appears",
            None,
            Some(&bad),
            Unknown,
            None,
            vec![Kind::Malformed],
        ),
        (
            "a record turns unreadable",
            Some(&a1),
            Some(&bad),
            Alive,
            None,
            vec![Kind::Malformed],
        ),
        ("still unreadable", Some(&bad), Some(&bad_again), Unknown, None, vec![]),
        (
            "readable again",
            Some(&bad),
            Some(&a1_next_period),
            Unknown,
            None,
            vec![Kind::Extended],
        ),
        ("nothing", None, None, Unknown, None, vec![]),
    ];
    for (case, before, after, holder, note, want) in cases {
        let mut got = lock_events(before, after, Some(9), holder);
        // The hub credits an announced release (what `note` stood for).
        if let Some(n) = note {
            got.iter_mut()
                .filter(|d| d.kind.is_some_and(Kind::ends_hold))
                .for_each(|d| n.credit(d));
        }
        assert_eq!(kinds(&got), want, "{case}");
    }
}

fn foreign(name: &str, fence: i64, revision: i64, session: Option<&str>, written_at: i64) -> LockEntry {
    LockEntry::foreign(name.into(), fence, revision, session.map(Into::into), Some(written_at))
}

#[test]
fn a_foreign_lock_is_acquired_and_released_with_its_session_only() {
    let f1 = foreign("a", 1, 1, Some("s-1"), 1_000);
    let f1_rewritten = foreign("a", 1, 2, Some("s-1"), 500_000);
    let f1_other_session = foreign("a", 1, 3, Some("s-2"), 500_000);
    let f2 = foreign("a", 2, 4, Some("s-3"), 600_000);
    let bad = malformed("a", 1, 5);
    use Holder::*;
    let cases: Vec<Case> = vec![
        ("taken", None, Some(&f1), Alive, None, vec![Kind::Acquired]),
        // No heartbeat or deadline to move: a newer write time says nothing.
        ("the row rewritten", Some(&f1), Some(&f1_rewritten), Alive, None, vec![]),
        ("a stale revision", Some(&f1_rewritten), Some(&f1), Alive, None, vec![]),
        (
            "another session, same fence",
            Some(&f1),
            Some(&f1_other_session),
            Alive,
            None,
            vec![Kind::Extended],
        ),
        (
            "re-taken under a new fence",
            Some(&f1),
            Some(&f2),
            Alive,
            None,
            vec![Kind::Released, Kind::Acquired],
        ),
        (
            "released by a live holder",
            Some(&f1),
            None,
            Alive,
            None,
            vec![Kind::Released],
        ),
        (
            "gone with its session",
            Some(&f1),
            None,
            Gone,
            None,
            vec![Kind::Expired],
        ),
        (
            "turns unreadable",
            Some(&f1),
            Some(&bad),
            Alive,
            None,
            vec![Kind::Malformed],
        ),
        (
            "readable again",
            Some(&bad),
            Some(&f1_rewritten),
            Unknown,
            None,
            vec![Kind::Extended],
        ),
    ];
    for (case, before, after, holder, note, want) in cases {
        let mut got = lock_events(before, after, Some(9), holder);
        // The hub credits an announced release (what `note` stood for).
        if let Some(n) = note {
            got.iter_mut()
                .filter(|d| d.kind.is_some_and(Kind::ends_hold))
                .for_each(|d| n.credit(d));
        }
        assert_eq!(kinds(&got), want, "{case}");
    }
    // The session is known; what the schema does not keep stays empty.
    let taken = lock_events(None, Some(&f1), None, Alive);
    let d = &taken[0];
    assert_eq!(d.session.as_deref(), Some("s-1"));
    assert_eq!((&d.owner, &d.service, &d.host), (&None, &None, &None));
    assert_eq!(d.detail, "");
    let ended = lock_events(Some(&f1), None, Some(9), Alive);
    assert_eq!(ended[0].session.as_deref(), Some("s-1"));
    assert_eq!(ended[0].service, None);
    // Time travel rebuilds the row as it was, foreign body and all.
    let mut r = Replay::default();
    for d in taken {
        r.apply(&HistoryEvent::new("f", 10, d));
    }
    assert_eq!(r.locks["a"], f1);
    for d in lock_events(Some(&f1), None, Some(9), Alive) {
        r.apply(&HistoryEvent::new("f", 20, d));
    }
    assert!(r.locks.is_empty());
}

#[test]
fn an_end_names_the_acquisition_and_carries_the_note() {
    let a1 = held("a", 1, 1, 1_000);
    let note = ReleaseNote {
        kind: Kind::AutoReleased,
        actor: "unlocker@r1".into(),
        reason: "past auto_unlock_at".into(),
    };
    let mut d = lock_events(Some(&a1), None, Some(7), Holder::Alive).remove(0);
    note.credit(&mut d);
    assert_eq!((d.lock.as_deref(), d.fence, d.revision), (Some("a"), Some(1), Some(7)));
    assert_eq!(
        (d.actor.as_deref(), d.detail.as_str()),
        (Some("unlocker@r1"), "past auto_unlock_at")
    );
    assert_eq!(
        (d.session.as_deref(), d.service.as_deref()),
        (Some("s-1"), Some("billing"))
    );
    assert_eq!(d.record, None);
}

#[test]
fn ids_depend_on_what_the_store_said_not_on_who_saw_it_when() {
    let a1 = held("a", 1, 1, 1_000);
    let acquired = || lock_events(None, Some(&a1), None, Holder::Alive).remove(0);
    let x = HistoryEvent::new("prod", 100, acquired());
    let y = HistoryEvent::new("prod", 999, acquired());
    assert_eq!(x.id, y.id, "the same acquisition seen at two times");
    assert_eq!(x.id.len(), 32);
    assert_ne!(x.id, HistoryEvent::new("staging", 100, acquired()).id, "another fleet");
    // A restart's snapshot shows the same acquisition at a later revision.
    let later = lock_events(None, Some(&held("a", 1, 9, 200_000)), None, Holder::Alive).remove(0);
    assert_eq!(
        HistoryEvent::new("prod", 5, later).id,
        x.id,
        "one acquisition, one event"
    );
    // An end is keyed by the acquisition: a replica that saw the delete and one
    // that found it gone in a snapshot (another revision) record one event.
    let end = |rev| HistoryEvent::new("prod", 5, lock_events(Some(&a1), None, rev, Holder::Alive).remove(0));
    assert_eq!(end(Some(7)).id, end(Some(12)).id);
    assert_eq!(end(Some(7)).id, end(None).id);
    assert_ne!(end(Some(7)).id, x.id);
    // Two heartbeats of one acquisition are two events.
    let e1 = lock_events(Some(&a1), Some(&held("a", 1, 2, 61_000)), None, Holder::Alive).remove(0);
    let e2 = lock_events(Some(&a1), Some(&held("a", 1, 3, 121_000)), None, Holder::Alive).remove(0);
    assert_ne!(HistoryEvent::new("prod", 1, e1).id, HistoryEvent::new("prod", 1, e2).id);
}

#[test]
fn replay_rebuilds_the_table_whatever_order_replicas_recorded_ends_in() {
    let ev = |at, before: Option<&LockEntry>, after: Option<&LockEntry>| {
        lock_events(before, after, None, Holder::Alive)
            .into_iter()
            .map(move |d| HistoryEvent::new("f", at, d))
            .collect::<Vec<_>>()
    };
    let a1 = held("a", 1, 1, 1_000);
    let a2 = held("a", 2, 3, 1_000);
    let b1 = held("b", 1, 2, 1_000);
    let mut log = Vec::new();
    log.extend(ev(10, None, Some(&a1)));
    log.extend(ev(11, None, Some(&b1)));
    log.extend(ev(20, Some(&a1), Some(&a2))); // released a1, acquired a2
    log.extend(ev(30, Some(&b1), None));
    let at = |t: Millis, log: &[HistoryEvent]| {
        let mut r = Replay::default();
        for e in log.iter().filter(|e| e.at <= t) {
            r.apply(e);
        }
        r.locks.values().map(|e| (e.name.clone(), e.fence)).collect::<Vec<_>>()
    };
    let cases: Vec<(Millis, Vec<(&str, i64)>)> = vec![
        (5, vec![]),
        (10, vec![("a", 1)]),
        (15, vec![("a", 1), ("b", 1)]),
        (25, vec![("a", 2), ("b", 1)]),
        (35, vec![("a", 2)]),
    ];
    for (t, want) in &cases {
        let want: Vec<(String, i64)> = want.iter().map(|(n, f)| (n.to_string(), *f)).collect();
        assert_eq!(at(*t, &log), want, "at {t}");
    }
    // An end recorded before its acquisition (another replica was faster) still wins.
    let mut reordered = log.clone();
    let end_b = reordered.remove(4);
    reordered.insert(0, end_b);
    let mut r = Replay::default();
    for e in &reordered {
        r.apply(e);
    }
    assert_eq!(r.locks.keys().collect::<Vec<_>>(), ["a"]);
    assert_eq!(r.locks["a"].fence, 2);
    assert_eq!(r.locks["a"].body, a2.body, "rows rebuilt with their records");
}

#[test]
fn a_checkpoint_round_trips_and_replay_continues_from_it() {
    let mut r = Replay::default();
    let a1 = held("a", 1, 1, 1_000);
    for d in lock_events(None, Some(&a1), None, Holder::Alive) {
        r.apply(&HistoryEvent::new("f", 1, d));
    }
    let w = Waiter {
        lock: "a".into(),
        session: "s-2".into(),
    };
    r.apply(&HistoryEvent::new("f", 2, wait_event(&w, true, Some(1))));
    let json = serde_json::to_string(&r.table("f", 2, None, 2)).unwrap();
    let t: TableAt = serde_json::from_str(&json).unwrap();
    assert_eq!((t.locks.len(), t.waiters.len()), (1, 1));
    let mut again = Replay::from_table(t);
    again.apply(&HistoryEvent::new("f", 3, wait_event(&w, false, Some(1))));
    for d in lock_events(Some(&a1), None, None, Holder::Alive) {
        again.apply(&HistoryEvent::new("f", 4, d));
    }
    assert!(again.locks.is_empty() && again.waiters.is_empty());
}

#[test]
fn times_are_absolute_or_relative_to_now() {
    let now = 1_000_000_000;
    let cases: Vec<(&str, Option<Millis>)> = vec![
        ("now", Some(now)),
        ("now-15m", Some(now - 900_000)),
        ("-1h", Some(now - 3_600_000)),
        ("-1h30m", Some(now - 5_400_000)),
        ("-2d", Some(now - 172_800_000)),
        ("-90s", Some(now - 90_000)),
        ("123", Some(123)),
        // Unix ms before 1970: outside the accepted range.
        ("-123", None),
        (
            "2026-11-23T02:17:00Z",
            crate::time::parse_instant("2026-11-23T02:17:00Z"),
        ),
        ("-15x", None),
        ("-1h30", None),
        ("yesterday", None),
    ];
    for (text, want) in cases {
        assert_eq!(parse_when(text, now).ok(), want, "{text}");
    }
}

#[test]
fn times_outside_the_accepted_range_are_refused_saying_the_range() {
    // Issue 23: `to=9223372036854775807` and `from=-9223372036854775808` reached
    // the timeline's arithmetic and overflowed it.
    let now = 1_795_407_613_000;
    for text in [
        "9223372036854775807",
        "-9223372036854775808",
        "-1",
        "253402300800000",
        "now-9999999999999999999d",
        "-106751991167d",
        "-3000000d",
    ] {
        let why = parse_when(text, now).unwrap_err();
        assert!(why.contains(crate::time::RANGE_HELP), "{text}: {why}");
    }
    assert_eq!(parse_when("0", now), Ok(crate::time::EARLIEST));
    assert_eq!(parse_when("253402300799999", now), Ok(crate::time::LATEST));
    assert_eq!(parse_when("9999-12-31T23:59:59.999Z", now), Ok(crate::time::LATEST));
    // Relative to a clock outside the range (a wrong clock, never a panic).
    assert!(parse_when("-1h", i64::MIN).is_err());
    assert!(parse_when("now", i64::MAX).is_err());
    let why = HistoryQuery::from_query("F", [("from", "0"), ("to", "9223372036854775807")], now).unwrap_err();
    assert!(why.starts_with("to=\"9223372036854775807\": "), "{why}");
    assert!(why.contains(crate::time::RANGE_HELP), "{why}");
}

#[test]
fn queries_read_their_filters_and_refuse_what_they_cannot() {
    let q = HistoryQuery::from_query(
        "prod",
        [
            ("from", "-1h"),
            ("to", "now"),
            ("lock", "billing/*"),
            ("kind", "acquired, force_released"),
            ("limit", "999999"),
            ("session", ""),
        ],
        10_000_000,
    )
    .unwrap();
    assert_eq!((q.from, q.to), (Some(10_000_000 - 3_600_000), Some(10_000_000)));
    assert_eq!(q.lock_filter(), Some(("billing/", true)));
    assert_eq!(q.kinds, vec![Kind::Acquired, Kind::ForceReleased]);
    assert_eq!((q.limit, q.session), (Some(MAX_HISTORY_ROWS), None));
    for bad in [("from", "noon"), ("kind", "stolen"), ("limit", "x")] {
        assert!(HistoryQuery::from_query("prod", [bad], 0).is_err(), "{bad:?}");
    }
    assert!(HistoryQuery::from_query("prod", [("from", "2000"), ("to", "1000")], 0).is_err());
    for k in Kind::ALL {
        assert_eq!(Kind::parse(k.as_str()), Some(k));
    }
}
