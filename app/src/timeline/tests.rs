use super::*;

fn ev(at: Millis, kind: Kind, fence: Option<i64>, session: &str) -> HistoryEvent {
    HistoryEvent {
        id: String::new(),
        fleet: "f".into(),
        at,
        kind,
        lock: Some("l".into()),
        session: Some(session.into()),
        owner: None,
        fence,
        revision: None,
        service: None,
        host: None,
        actor: Some("alice".into()),
        detail: "stuck".into(),
        record: None,
    }
}

#[test]
fn acquisitions_become_bars_ended_by_their_own_end() {
    let events = [
        ev(100, Kind::Extended, Some(1), "a"),
        ev(200, Kind::Released, Some(1), "a"),
        ev(300, Kind::Acquired, Some(2), "b"),
        ev(350, Kind::WaitStarted, None, "c"),
        ev(360, Kind::WaitStarted, None, "d"),
        ev(400, Kind::ForceReleased, Some(2), "b"),
        ev(410, Kind::WaitStopped, None, "c"),
        ev(420, Kind::Acquired, Some(3), "c"),
    ];
    let l = lanes(&events, 0, 1000);
    let holds: Vec<_> = l
        .holds
        .iter()
        .map(|s| (s.start, s.end, s.fence, s.start_unseen, s.still, s.ended))
        .collect();
    assert_eq!(
        holds,
        [
            (0, 200, Some(1), true, false, Some(Kind::Released)),
            (300, 400, Some(2), false, false, Some(Kind::ForceReleased)),
            (420, 1000, Some(3), false, true, None),
        ]
    );
    let waits: Vec<_> = l.waits.iter().map(|w| (w.start, w.end, w.still, w.row)).collect();
    assert_eq!(
        waits,
        [(350, 410, false, 0), (360, 1000, true, 1)],
        "overlapping waits get rows"
    );
    assert_eq!(l.wait_rows, 2);
    assert_eq!(l.marks.len(), 1);
    assert_eq!(l.marks[0].label(), "force-released");
    assert!(l.marks[0].title.contains("by alice") && l.marks[0].title.ends_with(": stuck"));
    assert_eq!(l.holds[1].label(), "fence 2 · b");
    assert!(l.holds[2].title("held").contains("still at the end of the range"));
}

#[test]
fn an_end_without_its_start_began_before_the_range() {
    let l = lanes(&[ev(50, Kind::AutoReleased, Some(7), "a")], 10, 100);
    assert_eq!(l.holds.len(), 1);
    assert_eq!(
        (l.holds[0].start, l.holds[0].end, l.holds[0].start_unseen),
        (10, 50, true)
    );
    assert_eq!(l.marks[0].kind, Kind::AutoReleased);
}

#[test]
fn ticks_fall_on_round_instants() {
    let (t, step) = ticks(1_000_030_000, 1_000_030_000 + 15 * 60_000);
    assert_eq!(step, 300_000);
    assert!(t.iter().all(|t| t % step == 0));
    assert_eq!(t.len(), 3);
    assert_eq!(ticks(0, 3_600_000).1, 600_000);
}
