use super::*;
use crate::fleet::LockBody;
use crate::record::sample;

fn held(name: &str, acquired_at: i64) -> LockEntry {
    let mut r = sample("o");
    r.acquired_at = acquired_at;
    r.alert_at = acquired_at + 60_000;
    r.auto_unlock_at = acquired_at + 120_000;
    LockEntry {
        name: name.into(),
        fence: acquired_at,
        revision: acquired_at,
        body: LockBody::Held(r),
    }
}

fn row(name: &str, rev: i64) -> WindowRow {
    WindowRow {
        entry: held(name, rev),
        holder: Holder::Alive,
        deadlock: false,
        waiters: vec![],
    }
}

fn frame(seq: u64, order: Option<&[&str]>, rows: Vec<WindowRow>) -> WindowFrame {
    WindowFrame {
        seq,
        view_id: 1,
        server_time: 0,
        waited_ms: 0,
        full: false,
        total: 10,
        offset: 0,
        order: order.map(|o| o.iter().map(|s| s.to_string()).collect()),
        rows,
        aggregates: None,
    }
}

#[test]
fn severity_puts_stuck_locks_first_then_the_oldest() {
    let now = 1_000_000;
    let fresh = held("fresh", now - 1_000);
    let older = held("older", now - 2_000);
    let overdue = held("overdue", now - 70_000);
    let expired = held("expired", now - 130_000);
    let bad = LockEntry::from_stored("bad".into(), 1, 1, b"{");
    let mut all = [&fresh, &overdue, &bad, &older, &expired];
    all.sort_by_key(|e| {
        (
            sort_key(
                SortKey::Severity,
                &SortFields::of(e),
                RowState::of(e, Holder::Unknown, now),
                0,
            ),
            e.name.clone(),
        )
    });
    let names: Vec<&str> = all.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["expired", "overdue", "bad", "older", "fresh"]);
}

#[test]
fn state_changes_at_its_deadlines_and_says_when() {
    let e = held("a", 0);
    assert_eq!(RowState::next_change(&e, 0), Some(60_000));
    assert_eq!(RowState::of(&e, Holder::Unknown, 59_999), RowState::Healthy);
    assert_eq!(RowState::of(&e, Holder::Unknown, 60_000), RowState::Overdue);
    assert_eq!(RowState::next_change(&e, 60_000), Some(120_000));
    assert_eq!(RowState::of(&e, Holder::Unknown, 120_000), RowState::Expired);
    assert_eq!(RowState::next_change(&e, 120_000), None);
}

#[test]
fn filters_narrow() {
    let e = held("billing/invoices", 0);
    let f = |json: &str| -> Filter { serde_json::from_str(json).unwrap() };
    assert!(f("{}").matches(&e, RowState::Healthy));
    assert!(f(r#"{"service":"billing","prefix":"billing/"}"#).matches(&e, RowState::Healthy));
    assert!(f(r#"{"contains":"voice"}"#).matches(&e, RowState::Healthy));
    assert!(!f(r#"{"contains":"x"}"#).matches(&e, RowState::Healthy));
    assert!(!f(r#"{"service":"search"}"#).matches(&e, RowState::Healthy));
    assert!(!f(r#"{"host":"elsewhere"}"#).matches(&e, RowState::Healthy));
    assert!(!f(r#"{"state":"expired"}"#).matches(&e, RowState::Healthy));
    let bad = LockEntry::from_stored("billing/x".into(), 1, 1, b"{");
    assert!(!f(r#"{"service":"billing"}"#).matches(&bad, RowState::Malformed));
    assert!(f(r#"{"state":"malformed"}"#).matches(&bad, RowState::Malformed));
    // A foreign lock: filtered by its state; it has no service or host to match.
    let foreign = LockEntry::foreign("billing/y".into(), 1, 1, Some("s".into()), None);
    assert!(f(r#"{"state":"foreign"}"#).matches(&foreign, RowState::Foreign));
    assert!(!f(r#"{"state":"healthy"}"#).matches(&foreign, RowState::Foreign));
    assert!(!f(r#"{"service":"billing"}"#).matches(&foreign, RowState::Foreign));
    assert!(f(r#"{"prefix":"billing/"}"#).matches(&foreign, RowState::Foreign));
    assert_eq!(
        ViewSpec::from_query([("state", "foreign")]).unwrap().filter.state,
        Some(RowState::Foreign)
    );
    for s in RowState::ALL {
        assert_eq!(RowState::parse(s.as_str()), Some(s), "{s:?}");
    }
}

#[test]
fn views_round_trip_through_the_url() {
    let v = ViewSpec::from_query([
        ("state", "overdue"),
        ("service", "billing"),
        ("q", "inv"),
        ("sort", "age"),
        ("rev", "1"),
        ("offset", "200"),
        ("fleet", "ignored here"),
    ])
    .unwrap();
    assert_eq!(v.filter.state, Some(RowState::Overdue));
    assert_eq!(v.filter.contains.as_deref(), Some("inv"));
    assert_eq!(
        v.sort,
        Sort {
            key: SortKey::Age,
            reverse: true
        }
    );
    assert_eq!(v.offset, 200);
    let q = v.to_query();
    let back = ViewSpec::from_query(q.iter().map(|(k, v)| (*k, v.as_str()))).unwrap();
    assert_eq!(back, v);
    assert!(
        ViewSpec::default().to_query().is_empty(),
        "the default view is the bare URL"
    );
    assert!(ViewSpec::from_query([("sort", "colour")])
        .unwrap_err()
        .contains("sort=colour"));
    assert!(ViewSpec::from_query([("offset", "-1")]).unwrap_err().contains("offset"));
    assert!(ViewSpec::from_query([("limit", "0")]).is_err());
    assert_eq!(
        ViewSpec::from_query([("service", ""), ("state", "")]).unwrap(),
        ViewSpec::default(),
        "an empty form field means any"
    );
}

#[test]
fn window_applies_changes_and_drops_rows_that_leave() {
    let mut w = Window::default();
    let ch = w
        .apply(WindowFrame {
            full: true,
            ..frame(1, Some(&["a", "b"]), vec![row("a", 1), row("b", 2)])
        })
        .unwrap();
    assert!(ch.order);
    assert_eq!(w.order(), ["a", "b"]);
    // b changes in place: one row, no order change.
    let ch = w.apply(frame(2, None, vec![row("b", 3)])).unwrap();
    assert_eq!(
        ch,
        WindowChanges {
            rows: vec!["b".into()],
            ..Default::default()
        }
    );
    assert_eq!(w.row("b").unwrap().entry.revision, 3);
    // c enters at the top, b leaves: only c's data travels.
    let ch = w.apply(frame(3, Some(&["c", "a"]), vec![row("c", 4)])).unwrap();
    assert!(ch.order);
    assert_eq!(ch.dropped, vec!["b".to_string()]);
    assert_eq!(w.rows().map(|r| r.entry.name.as_str()).collect::<Vec<_>>(), ["c", "a"]);
    // A sender that forgot a row's data is caught, not shown as an empty row.
    assert!(w
        .apply(frame(4, Some(&["c", "a", "z"]), vec![]))
        .unwrap_err()
        .contains("\"z\""));
}

#[test]
fn a_full_frame_replaces_everything() {
    let mut w = Window::default();
    w.apply(WindowFrame {
        full: true,
        ..frame(1, Some(&["a"]), vec![row("a", 1)])
    })
    .unwrap();
    let ch = w
        .apply(WindowFrame {
            full: true,
            ..frame(1, Some(&["b"]), vec![row("b", 1)])
        })
        .unwrap();
    assert_eq!(ch.dropped, vec!["a".to_string()]);
    assert_eq!(w.order(), ["b"]);
}

/// `SortKey::reads_state_or_waiters`: "under the others it reads the lock's
/// `SortFields` alone".
#[test]
fn only_severity_and_waiters_read_the_state_or_the_waiters() {
    let f = SortFields::of(&held("a", 5));
    for key in SortKey::ALL {
        let varied: Vec<SortPos> = (RowState::ALL.iter())
            .flat_map(|s| [0, 3].map(|w| sort_key(key, &f, *s, w)))
            .collect();
        let depends = varied.iter().any(|p| *p != varied[0]);
        assert_eq!(depends, key.reads_state_or_waiters(), "{key:?}");
    }
}
