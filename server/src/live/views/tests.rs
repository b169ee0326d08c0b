use lockscope_model::record::RECORD_VERSION;
use lockscope_model::view::{Filter, Sort, Window};
use lockscope_model::{BlacklistEntry, FleetEvent, LockBody, LockEntry, LockRecord, SessionEntry, Snapshot, Waiter};

use super::*;

mod frames;
mod names;
mod pass;
mod select;
mod sim;
mod top;

use sim::Sim;

#[test]
fn windows_match_a_full_resort_under_inserts_removals_and_resorts() {
    for seed in 0..20 {
        let mut sim = Sim::new(seed);
        let specs = Sim::specs();
        // Every index exists from the start (subscribed) or is built midway.
        let half = specs.len() / 2;
        for spec in &specs[..half] {
            sim.views.subscribe(1, spec.clone(), sim.t());
        }
        for step in 0..400 {
            sim.step();
            if step == 200 {
                for spec in &specs[half..] {
                    sim.views.subscribe(1, spec.clone(), sim.t());
                }
            }
            if step % 25 == 0 || step == 399 {
                for spec in specs.iter().take(if step < 200 { half } else { specs.len() }) {
                    assert_eq!(
                        sim.views.window_names(spec).unwrap(),
                        sim.brute(spec),
                        "seed {seed}, step {step}, {spec:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn indexes_built_off_the_task_catch_up_with_what_changed_meanwhile() {
    for seed in 0..20 {
        let mut sim = Sim::new(seed);
        sim.views = Views::with_off_task_build_from(0);
        for _ in 0..150 {
            sim.step();
        }
        let specs: Vec<ViewSpec> = Sim::specs()
            .into_iter()
            .filter(|s| IndexSpec::of(s) != IndexSpec::default_view())
            .collect();
        let ids: Vec<SubId> = specs
            .iter()
            .map(|s| sim.views.subscribe(1, s.clone(), sim.t()))
            .collect();
        // One index is dropped and made again while its first build waits: that
        // build must not be installed over the second one's changes.
        let again = IndexSpec::of(&specs[0]);
        // Their keys are collected only when each build's turn comes.
        for _ in 0..20 {
            sim.step();
        }
        let first: Vec<Build> = std::iter::from_fn(|| sim.views.next_build(&sim.state)).collect();
        let mut ids = ids;
        for (spec, id) in specs.iter().zip(&mut ids) {
            if IndexSpec::of(spec) == again {
                sim.views.unsubscribe(*id);
            }
        }
        for _ in 0..50 {
            sim.step();
        }
        for (spec, id) in specs.iter().zip(&mut ids) {
            if IndexSpec::of(spec) == again {
                *id = sim.views.subscribe(1, spec.clone(), sim.t());
            }
        }
        for _ in 0..150 {
            sim.step();
        }
        // Nothing of a view is sent before its index is complete.
        assert!(ids.iter().all(|id| !sim.views.is_ready(*id)));
        assert!(sim.views.due_frames(&sim.state, sim.t()).is_empty(), "seed {seed}");
        let stale: Vec<Built> = first.into_iter().map(Build::run).collect();
        let fresh: Vec<Built> = std::iter::from_fn(|| sim.views.next_build(&sim.state))
            .map(Build::run)
            .collect();
        assert_eq!(fresh.len(), 1, "only the index made again is built again");
        for built in stale.into_iter().chain(fresh) {
            sim.views.install(built);
        }
        for spec in &specs {
            assert_eq!(
                sim.views.window_names(spec),
                Some(sim.brute(spec)),
                "seed {seed}, {spec:?}"
            );
        }
        // And they follow later events as any index does.
        for _ in 0..100 {
            sim.step();
        }
        for spec in &specs {
            assert_eq!(
                sim.views.window_names(spec),
                Some(sim.brute(spec)),
                "seed {seed}, {spec:?}"
            );
        }
        assert_eq!(sim.views.due_frames(&sim.state, sim.t()).len(), ids.len());
    }
}

#[test]
fn queued_indexes_are_collected_one_per_call() {
    let mut sim = Sim::new(7);
    sim.views = Views::with_off_task_build_from(5);
    for _ in 0..150 {
        sim.step();
    }
    assert!(sim.state.len() >= 5, "a fleet large enough to queue builds");
    // Three views of one lock each: queued (the fleet is "large"), then small
    // enough to sort on the hub task when their turn comes.
    let names: Vec<String> = sim.state.locks().take(3).map(|e| e.name.clone()).collect();
    let ids: Vec<SubId> = names
        .iter()
        .map(|n| {
            let filter = Filter {
                prefix: Some(n.clone()),
                ..Filter::default()
            };
            let spec = ViewSpec {
                filter,
                ..ViewSpec::default()
            };
            sim.views.subscribe(1, spec, sim.t())
        })
        .collect();
    let ready = |v: &Views| ids.iter().filter(|id| v.is_ready(**id)).count();
    assert_eq!(ready(&sim.views), 0);
    for turn in 1..=3 {
        assert!(sim.views.has_queued());
        assert!(sim.views.next_build(&sim.state).is_none(), "sorted in place");
        assert_eq!(ready(&sim.views), turn, "one index per call");
    }
    assert!(!sim.views.has_queued());
}

#[test]
fn aggregates_equal_a_full_recount() {
    for seed in 0..20 {
        let mut sim = Sim::new(seed);
        for step in 0..500 {
            sim.step();
            if step % 10 == 0 {
                sim.views.advance(&sim.state, sim.now);
                assert_eq!(sim.views.aggregates(), sim.recount(), "seed {seed}, step {step}");
            }
        }
    }
}

#[test]
fn the_oldest_lock_equals_a_full_scan() {
    for seed in 0..20 {
        let mut sim = Sim::new(seed);
        assert_eq!(sim.views.oldest_acquired_at(), None);
        for step in 0..500 {
            sim.step();
            if step % 10 == 0 {
                sim.views.advance(&sim.state, sim.now);
                let scan = sim
                    .state
                    .locks()
                    .filter_map(|e| e.record())
                    .map(|r| r.acquired_at)
                    .min();
                assert_eq!(sim.views.oldest_acquired_at(), scan, "seed {seed}, step {step}");
            }
        }
    }
}

/// A browser that applies what it is sent, and acknowledges when it likes.
struct Browser {
    id: SubId,
    window: Window,
}

impl Browser {
    fn take(&mut self, sim: &mut Sim, ack: bool) -> usize {
        let frames = sim.views.due_frames(&sim.state, sim.t());
        let mut n = 0;
        for (id, f) in frames {
            if id == self.id {
                assert!(
                    sim.views.in_flight(id) <= MAX_IN_FLIGHT,
                    "never more than {MAX_IN_FLIGHT} frames unacknowledged"
                );
                self.window.apply(f).unwrap();
                n += 1;
            }
        }
        if ack {
            sim.views.ack(self.id, self.window.seq);
        }
        n
    }
}

#[test]
fn indexes_are_shared_and_dropped_with_their_last_viewer() {
    let mut sim = Sim::new(1);
    let billing = ViewSpec {
        filter: Filter {
            service: Some("billing".into()),
            ..Filter::default()
        },
        ..ViewSpec::default()
    };
    let a = sim.views.subscribe(1, billing.clone(), sim.t());
    let b = sim.views.subscribe(
        1,
        ViewSpec {
            offset: 50,
            ..billing.clone()
        },
        sim.t(),
    );
    assert_eq!(sim.views.indexes.len(), 2, "default + billing");
    sim.views.unsubscribe(a);
    assert!(sim.views.window_names(&billing).is_some());
    sim.views.unsubscribe(b);
    assert!(sim.views.window_names(&billing).is_none());
    assert!(
        sim.views.window_names(&ViewSpec::default()).is_some(),
        "the default view stays"
    );
    let page = sim.views.render(&sim.state, &billing, sim.t()).unwrap();
    assert!(page.full && page.aggregates.is_some());
    assert_eq!(
        sim.views.indexes.len(),
        2,
        "the render's index is kept for the page's socket"
    );
    sim.views.mark_dirty(
        &sim.state,
        Now {
            mono: sim.now + RENDER_HOLD_MS,
            ..sim.t()
        },
    );
    assert_eq!(
        sim.views.indexes.len(),
        1,
        "a page render leaves nothing behind once its time is up"
    );
}

/// docs/architecture.md: "A page render keeps the order its view needed (an
/// index, a selection's shared order, a top) for the page's socket, which asks
/// for the same view moments later: until a socket takes that view, or for 5 s,
/// at most 4 renders per fleet at once (the oldest let go first), so a new view
/// costs one sort or pass over the fleet, not one for the render and one for
/// the socket. Only an order that ending the render would drop is kept: not one
/// another viewer holds (the unlocker's view, a socket already on it), nor a list
/// API page's". And docs/security.md's limits: "4 renders per fleet, each until a
/// socket takes the same view or 5 s", "the oldest is let go of".
#[test]
fn a_page_renders_order_is_kept_for_its_socket() {
    assert_eq!((RENDER_HOLD_MS, RENDER_HOLDS), (5_000, 4), "the figures the docs quote");
    let mut sim = Sim::new(3);
    sim.views = Views {
        walk_limit: 0,
        ..Views::with_top_from(0)
    };
    for _ in 0..150 {
        sim.step();
    }
    let by_fence = |reverse| ViewSpec {
        sort: Sort {
            key: SortKey::Fence,
            reverse,
        },
        limit: 5,
        ..ViewSpec::default()
    };
    // A render is answered once its top is filled (by a pass: nothing is walked).
    let render = |sim: &mut Sim, spec: &ViewSpec| {
        if let Err(id) = sim.views.render(&sim.state, spec, sim.t()) {
            while !sim.views.is_ready(id) {
                sim.views.mark_dirty(&sim.state, sim.t());
            }
            sim.views.render_sub(&sim.state, id, sim.t());
        }
    };
    render(&mut sim, &by_fence(true));
    assert_eq!(sim.views.top_passes, 1);
    // The page's socket asks for the same view a moment later: its first frame
    // is due at once, with no second pass, and the render is let go of.
    sim.now += 300;
    let mut browsers = sim.browsers([by_fence(true)]);
    assert!(
        sim.views.is_ready(browsers[0].1.id),
        "the socket's view is ready at once"
    );
    sim.deliver_and_check(&mut browsers, "the socket's first frame");
    assert_eq!(sim.views.top_passes, 1, "one pass for the render and its socket");
    assert!(sim.views.held_renders.is_empty(), "the socket took the render's view");
    // Nothing is kept where ending the render drops nothing (an order a socket or the
    // unlocker holds), nor for a list API page (no socket follows it).
    render(&mut sim, &by_fence(true));
    let cursor: ListCursor = (0, 0, String::new());
    let list = sim
        .views
        .render_after(&sim.state, &by_fence(false), Some(&cursor), sim.t());
    assert!(list.is_ok() && sim.views.held_renders.is_empty(), "nothing held");

    // At most RENDER_HOLDS renders are kept, the oldest let go first; none past its time.
    // (Each its own top: a filter and a direction.)
    let views: Vec<ViewSpec> = (0..=RENDER_HOLDS)
        .map(|i| ViewSpec {
            filter: Filter {
                service: Some(sim::SERVICES[i % sim::SERVICES.len()].into()),
                ..Filter::default()
            },
            ..by_fence(i >= sim::SERVICES.len())
        })
        .collect();
    for spec in &views {
        render(&mut sim, spec);
    }
    let held = |sim: &Sim| -> Vec<ViewSpec> {
        (sim.views.held_renders.iter())
            .map(|(_, id)| sim.views.subs[id].spec.clone())
            .collect()
    };
    assert_eq!(held(&sim), views[1..], "the oldest was let go of");
    sim.now += RENDER_HOLD_MS - 1;
    sim.views.mark_dirty(&sim.state, sim.t());
    assert_eq!(held(&sim).len(), RENDER_HOLDS, "kept for 5 s");
    sim.now += 1;
    sim.views.mark_dirty(&sim.state, sim.t());
    assert!(held(&sim).is_empty(), "and let go of after");
    assert_eq!(
        (sim.views.tops.len(), sim.views.subs.len()),
        (1, 1),
        "nothing left but the socket's"
    );
}

#[test]
fn row_changes_are_not_held_back_by_the_aggregates_rate_limit() {
    let mut sim = Sim::new(7);
    let rec = sim.record(sim.now - 10_000);
    let entry = |name: &str, rev: i64, rec: &LockRecord| LockEntry {
        name: name.into(),
        fence: rev,
        revision: rev,
        body: LockBody::Held(rec.clone()),
    };
    sim.apply(FleetEvent::Upsert(entry("a", 1, &rec)));
    let spec = ViewSpec {
        sort: Sort {
            key: SortKey::Name,
            reverse: false,
        },
        filter: Filter {
            prefix: Some("a".into()),
            ..Filter::default()
        },
        ..ViewSpec::default()
    };
    let id = sim.views.subscribe(1, spec, sim.t());
    let first = sim.views.frame(&sim.state, id, sim.t()).expect("first frame");
    assert!(first.aggregates.is_some());
    sim.views.ack(id, first.seq);

    // 30 ms later a lock outside the view changes the counts: the
    // aggregates are owed, but their rate limit holds them back.
    sim.now += 30;
    sim.apply(FleetEvent::Upsert(entry("b", 2, &rec)));
    sim.views.mark_dirty(&sim.state, sim.t());
    assert_eq!(
        sim.views.due_frames(&sim.state, sim.t()),
        vec![],
        "nothing but aggregates, too soon"
    );

    // 10 ms later the row on screen changes: due at once, not when aggregates are.
    sim.now += 10;
    let mut changed = rec.clone();
    changed.purpose = "rewritten".into();
    sim.apply(FleetEvent::Upsert(entry("a", 3, &changed)));
    sim.views.mark_dirty(&sim.state, sim.t());
    assert_eq!(
        sim.views.next_send(),
        Some(sim.now - 10),
        "the row is due since it changed"
    );
    let frames = sim.views.due_frames(&sim.state, sim.t());
    let [(_, frame)] = frames.as_slice() else {
        panic!("one frame for the changed row: {frames:?}")
    };
    assert_eq!(frame.rows.len(), 1);
    assert_eq!(frame.rows[0].entry.record().unwrap().purpose, "rewritten");
    assert!(frame.aggregates.is_none(), "aggregates keep their own pace");
    sim.views.ack(id, frame.seq);

    // A rewrite changes no count: once the limit allows, the aggregates owed for
    // "b" go out, and a further rewrite owes none.
    sim.now += 300;
    sim.views.mark_dirty(&sim.state, sim.t());
    let frames = sim.views.due_frames(&sim.state, sim.t());
    assert!(matches!(frames.as_slice(), [(_, f)] if f.aggregates.as_ref().is_some_and(|a| a.counts.held == 2)));
    sim.views.ack(id, frames[0].1.seq);
    sim.now += 300;
    changed.purpose = "again".into();
    sim.apply(FleetEvent::Upsert(entry("a", 4, &changed)));
    sim.views.mark_dirty(&sim.state, sim.t());
    let frames = sim.views.due_frames(&sim.state, sim.t());
    assert!(matches!(frames.as_slice(), [(_, f)] if f.aggregates.is_none() && f.rows.len() == 1));
}
