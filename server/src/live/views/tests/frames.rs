//! Frames and acknowledgements: what a browser that applies what it is sent
//! ends up holding, how frames are paced and coalesced, and what a view change
//! sends.

use super::*;

#[test]
fn coalescing_never_loses_the_final_state_of_a_row() {
    for seed in 0..30 {
        let mut sim = Sim::new(seed);
        let spec = ViewSpec {
            limit: 8,
            offset: (seed % 3) * 4,
            sort: Sort {
                key: SortKey::ALL[seed as usize % SortKey::ALL.len()],
                reverse: seed % 2 == 1,
            },
            ..ViewSpec::default()
        };
        let id = sim.views.subscribe(1, spec.clone(), sim.t());
        let mut b = Browser {
            id,
            window: Window::default(),
        };
        for _ in 0..600 {
            sim.step();
            sim.views.mark_dirty(&sim.state, sim.t());
            // Time passes at random; the browser reads and acknowledges at random.
            sim.now += sim.rng.i64(0..30);
            sim.views.advance(&sim.state, sim.now);
            let ack = sim.rng.u8(0..4) == 0;
            b.take(&mut sim, ack);
        }
        // Quiet: everything owed arrives.
        for _ in 0..10 {
            sim.now += 300;
            sim.views.advance(&sim.state, sim.now);
            sim.views.mark_dirty(&sim.state, sim.t());
            b.take(&mut sim, true);
        }
        let (total, offset, names) = sim.brute(&spec);
        assert_eq!(b.window.order(), names.as_slice(), "seed {seed}: order");
        assert_eq!((b.window.total, b.window.offset), (total, offset), "seed {seed}");
        for row in b.window.rows() {
            assert_eq!(
                Some(&row.entry),
                sim.state.get(&row.entry.name),
                "seed {seed}: {}",
                row.entry.name
            );
            let waiters: Vec<&str> = sim.state.waiters_of(&row.entry.name).collect();
            assert_eq!(row.waiters, waiters, "seed {seed}: waiters of {}", row.entry.name);
        }
        assert_eq!(
            b.window.aggregates(),
            &sim.views.aggregates(),
            "seed {seed}: aggregates"
        );
    }
}

#[test]
fn a_subscriber_that_stops_acknowledging_gets_nothing_more_then_only_the_present() {
    let mut sim = Sim::new(7);
    let id = sim.views.subscribe(1, ViewSpec::default(), sim.t());
    let mut b = Browser {
        id,
        window: Window::default(),
    };
    let mut sent = 0;
    for _ in 0..2_000 {
        sim.step();
        sim.views.mark_dirty(&sim.state, sim.t());
        sim.now += 5;
        sent += b.take(&mut sim, false);
    }
    assert_eq!(
        sent as u64, MAX_IN_FLIGHT,
        "held back after {MAX_IN_FLIGHT} unacknowledged frames"
    );
    assert_eq!(sim.views.next_send(), None, "nothing is scheduled for it");
    // It catches up: one frame with the present, not the 2,000 events it missed.
    sim.views.ack(id, b.window.seq);
    sim.now += 100;
    let frames = sim.views.due_frames(&sim.state, sim.t());
    assert_eq!(frames.len(), 1);
    let late = &frames[0].1;
    assert!(late.waited_ms > 1_000, "the frame says how late it is");
    b.window.apply(frames[0].1.clone()).unwrap();
    assert_eq!(b.window.order(), sim.brute(&ViewSpec::default()).2.as_slice());
}

/// docs/architecture.md: "A subscriber gets a frame when it has something
/// unsent, fewer than 2 unacknowledged frames, and, while one is
/// unacknowledged, none in the last 25 ms."
#[test]
fn frames_are_paced_only_while_one_is_unacknowledged_and_quiet_fleets_send_nothing() {
    let mut sim = Sim::new(3);
    let id = sim.views.subscribe(1, ViewSpec::default(), sim.t());
    let first = sim.views.due_frames(&sim.state, sim.t());
    assert_eq!(first.len(), 1);
    assert!(first[0].1.full, "the first frame replaces whatever the browser had");
    // Unacknowledged: the next change waits out the interval.
    let change = |sim: &mut Sim| {
        let before = sim.views.window_names(&ViewSpec::default());
        while sim.views.window_names(&ViewSpec::default()) == before {
            sim.step();
        }
        sim.views.mark_dirty(&sim.state, sim.t());
    };
    change(&mut sim);
    let at = sim.views.next_send().expect("a change is due");
    assert_eq!(
        at,
        first[0].1.server_time + MIN_FRAME_INTERVAL_MS as i64,
        "while a frame is unacknowledged, not within the interval"
    );
    sim.now = at;
    let second = sim.views.due_frames(&sim.state, sim.t());
    assert_eq!(second.len(), 1);
    sim.views.ack(id, second[0].1.seq);
    // Aggregates held back by their rate limit go out when it allows.
    sim.now += AGGREGATES_EVERY_MS;
    for (_, f) in sim.views.due_frames(&sim.state, sim.t()) {
        sim.views.ack(id, f.seq);
    }
    assert_eq!(sim.views.next_send(), None, "nothing changed, nothing due");
    // Idle (everything acknowledged): a change 1 ms after the last frame goes at once.
    sim.now += 1;
    change(&mut sim);
    assert_eq!(
        sim.views.next_send(),
        Some(sim.now),
        "an idle subscriber is sent a change at once, not after the interval"
    );
    assert_eq!(sim.views.due_frames(&sim.state, sim.t()).len(), 1);
}

#[test]
fn short_holds_at_the_bottom_do_not_move_the_top_of_the_default_view() {
    let mut sim = Sim::new(11);
    let now = sim.now;
    // Ten stuck locks, then churn of fresh short holds.
    for i in 0..10 {
        let mut rec = sim.record(now - 500_000 - i * 1_000);
        rec.auto_unlock_at = now - 1;
        sim.rev += 1;
        sim.apply(FleetEvent::Upsert(LockEntry {
            name: format!("stuck-{i}"),
            fence: sim.rev,
            revision: sim.rev,
            body: LockBody::Held(rec),
        }));
    }
    let top = ViewSpec {
        limit: 10,
        ..ViewSpec::default()
    };
    let id = sim.views.subscribe(1, top.clone(), sim.t());
    let mut b = Browser {
        id,
        window: Window::default(),
    };
    b.take(&mut sim, true);
    let before = b.window.order().to_vec();
    for i in 0..200 {
        sim.rev += 1;
        sim.now += 30;
        let rec = sim.record(sim.now);
        let name = format!("short-{}", i % 7);
        sim.apply(FleetEvent::Upsert(LockEntry {
            name: name.clone(),
            fence: sim.rev,
            revision: sim.rev,
            body: LockBody::Held(rec),
        }));
        if i % 2 == 1 {
            sim.rev += 1;
            sim.apply(FleetEvent::Remove {
                name,
                revision: sim.rev,
            });
        }
        sim.views.mark_dirty(&sim.state, sim.t());
        b.take(&mut sim, true);
        assert_eq!(b.window.order(), before.as_slice(), "the stuck locks stay put");
    }
    assert!(before.iter().all(|n| n.starts_with("stuck-")));
}

#[test]
fn a_view_change_sends_only_rows_the_browser_lacks() {
    let mut sim = Sim::new(5);
    for _ in 0..300 {
        sim.step();
    }
    let spec = |offset| ViewSpec {
        sort: Sort {
            key: SortKey::Name,
            reverse: false,
        },
        offset,
        limit: 6,
        ..ViewSpec::default()
    };
    assert!(sim.state.len() >= 9, "enough locks to scroll");
    let id = sim.views.subscribe(1, spec(0), sim.t());
    let mut b = Browser {
        id,
        window: Window::default(),
    };
    b.take(&mut sim, true);
    sim.views.set_view(id, 2, spec(3), sim.t());
    sim.now += 100;
    let frames = sim.views.due_frames(&sim.state, sim.t());
    let f = &frames[0].1;
    assert_eq!(f.view_id, 2);
    assert_eq!(f.rows.len(), 3, "rows 3..6 were already there; 6..9 are new");
    b.window.apply(f.clone()).unwrap();
    assert_eq!(b.window.order(), sim.brute(&spec(3)).2.as_slice());
}
