//! Windows by name ([`crate::live::views::names`]): unfiltered by-name views
//! read from the table with a cursor, checked against windows recomputed from
//! scratch after every change, answered with no index, and read by stepping
//! from the cursor rather than from an end of the order.

use super::*;

fn by_name(reverse: bool, offset: u64, limit: u32) -> ViewSpec {
    ViewSpec {
        sort: Sort {
            key: SortKey::Name,
            reverse,
        },
        offset,
        limit,
        ..ViewSpec::default()
    }
}

/// docs/architecture.md: "an unfiltered view sorted by name (either way), at
/// any offset, has no index of its own: the table is the name order."
/// Every browser on such a view, acknowledging every frame, holds after each
/// change (locks coming, going, changing, resets keeping half) exactly what a
/// full re-sort gives; browsers paging to another offset too.
#[test]
fn windows_by_name_follow_every_change_as_a_full_resort_would() {
    for seed in 0..10u64 {
        let mut sim = Sim::new(seed);
        sim.views = Views::with_names_from(0);
        for _ in 0..100 {
            sim.step();
        }
        let mut specs = Vec::new();
        for reverse in [false, true] {
            for (offset, limit) in [(0, 5), (3, 4), (9, 7), (14, 3), (1000, 5)] {
                specs.push(by_name(reverse, offset, limit));
            }
        }
        let mut browsers = sim.browsers(specs);
        assert_eq!(
            sim.views.names.len(),
            browsers.len(),
            "seed {seed}: all read from the table"
        );
        assert_eq!(sim.views.indexes.len(), 1, "seed {seed}: only the default view's index");
        for step in 0..300 {
            sim.step();
            sim.views.advance(&sim.state, sim.now);
            if step % 40 == 39 {
                // A browser pages: the same subscriber, another offset.
                let i = sim.rng.usize(0..browsers.len());
                let (spec, b) = &mut browsers[i];
                spec.offset = sim.rng.u64(0..20);
                sim.views.set_view(b.id, 1, spec.clone(), sim.t());
            }
            sim.deliver_and_check(&mut browsers, &format!("seed {seed}, step {step}"));
        }
        for (_, b) in browsers {
            sim.views.unsubscribe(b.id);
        }
        assert!(
            sim.views.names.is_empty(),
            "seed {seed}: dropped with their subscribers"
        );
    }
}

/// A sim fleet of `n` locks `n00000`, `n00001`, … (every other number, so
/// that locks can come between them), windows by name read from the table, and
/// new indexes left to builds off the task (a view that needed one would wait).
fn fleet(n: usize) -> Sim {
    let mut sim = Sim::new(3);
    sim.views = Views {
        names_from: 0,
        top_from: usize::MAX,
        off_task_build_from: 0,
        ..Views::new()
    };
    let locks = (0..n)
        .map(|i| LockEntry {
            name: format!("n{:05}", 2 * i),
            fence: 1,
            revision: 1,
            body: LockBody::Held(sim.record(sim.now)),
        })
        .collect();
    let sessions = Some(sim.state.sessions().sessions.values().cloned().collect());
    sim.apply(FleetEvent::Reset(Snapshot {
        revision: 1,
        locks,
        sessions,
        ..Snapshot::default()
    }));
    sim
}

/// docs/architecture.md: "an unfiltered view sorted by name (either way), at
/// any offset, has no index of its own". Over a fleet whose new indexes are
/// built off the task, a page render of a deep by-name view is answered at once
/// (it waited for an index build before), and nothing is queued.
#[test]
fn a_deep_view_by_name_is_rendered_at_once_with_no_index() {
    let mut sim = fleet(5_000);
    for reverse in [false, true] {
        let spec = by_name(reverse, 2_500, 50);
        let frame = sim.views.render(&sim.state, &spec, sim.t()).expect("rendered at once");
        let (total, offset, names) = sim.brute(&spec);
        assert_eq!((frame.total, frame.offset, frame.order), (total, offset, Some(names)));
        assert!(!sim.views.has_queued(), "no index build was queued");
        assert_eq!(sim.views.indexes.len(), 1, "only the default view's index exists");
    }
}

/// docs/architecture.md: "a lock that comes or goes before that name moves the
/// count by one, so the next read steps from there, a few locks, not from an
/// end of the order", and "a page's websocket starts where its server render's
/// read ended".
#[test]
fn reads_step_from_the_cursor_not_from_an_end() {
    let mut sim = fleet(5_000);
    let spec = by_name(false, 2_500, 50);
    sim.views.render(&sim.state, &spec, sim.t()).expect("rendered at once");
    let mut browsers = sim.browsers([spec.clone()]);
    let id = browsers[0].1.id;
    sim.deliver_and_check(&mut browsers, "first frame");
    assert_eq!(
        sim.views.names[&id].stepped, 0,
        "the websocket starts at the render's cursor"
    );
    // Ten locks come before the window and three go.
    for i in 0..10 {
        let name = format!("n{:05}", 2 * i + 1);
        let body = LockBody::Held(sim.record(sim.now));
        sim.apply(FleetEvent::Upsert(LockEntry {
            name,
            fence: 2,
            revision: 2,
            body,
        }));
    }
    for i in [3, 400, 2_000] {
        let name = format!("n{:05}", 2 * i);
        sim.apply(FleetEvent::Remove { name, revision: 3 });
    }
    sim.deliver_and_check(&mut browsers, "after the changes");
    assert!(sim.views.names[&id].stepped <= 10, "{}", sim.views.names[&id].stepped);
    // Paging one page down steps one page.
    let next = ViewSpec { offset: 2_550, ..spec };
    sim.views.set_view(id, 1, next.clone(), sim.t());
    browsers[0].0 = next;
    sim.deliver_and_check(&mut browsers, "a page down");
    assert_eq!(sim.views.names[&id].stepped, 50);
    // A change after the window moves nothing: no frame.
    sim.apply(FleetEvent::Remove {
        name: "n09000".into(),
        revision: 4,
    });
    sim.views.mark_dirty(&sim.state, sim.t());
    let frames = sim.views.due_frames(&sim.state, sim.t());
    assert_eq!(frames.len(), 1, "the total moved");
    assert!(frames[0].1.order.is_none() && frames[0].1.rows.is_empty());
}
