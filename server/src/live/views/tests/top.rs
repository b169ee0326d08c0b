//! Top views ([`crate::live::views::top`]): windows near the top of their order
//! served from the first rows only, checked against windows recomputed from
//! scratch after every change, and answered without any index build.

use super::*;

/// docs/architecture.md: "a window near the top of its order (offset + limit
/// at most 1,000 rows; not the default view, whose index always exists) keeps
/// only the first rows of that order, its viewers' depth rounded up to a power
/// of two, twice over"; "a lock the
/// filter takes that lands before the last row held is inserted, one that
/// leaves is removed, and when fewer rows than its viewers need are left the
/// pass is repeated."
/// Every browser on a top view, acknowledging every frame, holds after each
/// change exactly what a full re-sort gives (order, total, offset, rows), and no
/// top keeps more than twice the rows its viewers need.
#[test]
fn tops_follow_every_change_as_a_full_resort_would() {
    let mut refills = 0;
    for seed in 0..10u64 {
        let mut sim = Sim::new(seed);
        sim.views = Views::with_top_from(0);
        for _ in 0..100 {
            sim.step();
        }
        let specs = Sim::specs().into_iter().enumerate();
        let mut browsers = sim.browsers(specs.filter(|(i, _)| *i as u64 % 2 == seed % 2).map(|(_, s)| s));
        let tops = browsers
            .iter()
            .filter(|(_, b)| sim.views.subs[&b.id].top.is_some())
            .count();
        assert!(
            tops * 2 >= browsers.len(),
            "seed {seed}: most are tops ({tops} of {})",
            browsers.len()
        );
        for step in 0..300 {
            sim.step();
            sim.views.advance(&sim.state, sim.now);
            refills += sim.views.tops.values().filter(|t| t.stale).count();
            sim.deliver_and_check(&mut browsers, &format!("seed {seed}, step {step}"));
            for top in sim.views.tops.values() {
                assert!(
                    top.len() <= 2 * top.want(),
                    "seed {seed}: a top keeps at most twice its depth"
                );
            }
        }
        // The last viewer of a top takes it, and its filter's count, along.
        for (_, b) in browsers {
            sim.views.unsubscribe(b.id);
        }
        assert!(sim.views.tops.is_empty());
        assert!(sim.views.filters.is_empty());
        assert_eq!(sim.views.indexes.len(), 1, "only the default view's index stays");
    }
    assert!(refills > 0, "some top ran short and was filled again");
}

/// docs/architecture.md: "one pass for all the tops made or run short in a
/// turn (...), so a new view's first frame never waits for a sort of the
/// fleet". Over a fleet large enough that any new index waits for a build
/// off the hub task, a new filtered view sorted by age (and an unfiltered one,
/// and a page render) is answered in the same turn, and no index is queued;
/// the views new in one turn share one pass over the fleet.
#[test]
fn a_new_view_near_the_top_is_answered_without_an_index_build() {
    let mut sim = Sim::new(7);
    sim.views = Views {
        off_task_build_from: 0,
        ..Views::with_top_from(0)
    };
    for _ in 0..150 {
        sim.step();
    }
    let by_age = ViewSpec {
        filter: Filter {
            service: Some("billing".into()),
            ..Filter::default()
        },
        sort: Sort {
            key: SortKey::Age,
            reverse: true,
        },
        offset: 2,
        limit: 4,
    };
    let unfiltered = ViewSpec {
        sort: Sort {
            key: SortKey::Fence,
            reverse: false,
        },
        ..ViewSpec::default()
    };
    let mut browsers: Vec<(ViewSpec, Browser)> = [by_age.clone(), unfiltered]
        .into_iter()
        .map(|spec| {
            let id = sim.views.subscribe(1, spec.clone(), sim.t());
            (
                spec,
                Browser {
                    id,
                    window: Window::default(),
                },
            )
        })
        .collect();
    sim.views.mark_dirty(&sim.state, sim.t());
    let frames = sim.views.due_frames(&sim.state, sim.t());
    assert_eq!(frames.len(), 2, "both first frames in the same turn");
    assert_eq!(sim.views.top_passes, 1, "both tops filled by one pass over the fleet");
    for (id, f) in frames {
        let (_, b) = browsers.iter_mut().find(|(_, b)| b.id == id).unwrap();
        b.window.apply(f).unwrap();
    }
    for (spec, b) in &browsers {
        let (total, offset, names) = sim.brute(spec);
        assert_eq!(b.window.order(), names.as_slice(), "{spec:?}");
        assert_eq!((b.window.total, b.window.offset), (total, offset), "{spec:?}");
    }
    let page = ViewSpec {
        filter: Filter {
            state: Some(RowState::Healthy),
            ..Filter::default()
        },
        ..by_age
    };
    let frame = sim.views.render(&sim.state, &page, sim.t()).expect("rendered at once");
    let (total, offset, names) = sim.brute(&page);
    assert_eq!((frame.total, frame.offset, frame.order), (total, offset, Some(names)));
    assert!(!sim.views.has_queued(), "no index build was queued");
    assert_eq!(sim.views.indexes.len(), 1, "only the default view's index exists");
    // "offset + limit at most 1,000 rows": the last window a top serves, and the next.
    let at = |offset| ViewSpec {
        offset,
        limit: 5,
        ..page.clone()
    };
    let last = sim.views.subscribe(1, at(TOP_ROWS - 5), sim.t());
    let past = sim.views.subscribe(1, at(TOP_ROWS - 4), sim.t());
    assert!(sim.views.subs[&last].top.is_some() && sim.views.subs[&past].top.is_none());
}

/// Specs of `Sim::specs` served by a top whose order an existing order gives
/// and whose filter is counted without a pass.
fn walkable(spec: &ViewSpec) -> bool {
    let f = &spec.filter;
    let one = [f.state.is_some(), f.service.is_some(), f.prefix.is_some()];
    let counted = f.host.is_none() && f.contains.is_none() && one.iter().filter(|x| **x).count() <= 1;
    let walked = [SortKey::Name, SortKey::Severity, SortKey::Age, SortKey::Waiters];
    counted
        && walked.contains(&spec.sort.key)
        && spec.offset + spec.limit as u64 <= TOP_ROWS
        && IndexSpec::of(spec) != IndexSpec::default_view()
}

/// docs/architecture.md: "A top whose order already exists is walked instead,
/// with no pass: by name the table itself, by severity the default view's
/// index, by age that index's run per state merged, by waiters the locks
/// waited for then the others by name". Such tops, new or run short, are
/// filled without a single pass over the fleet, and hold what a full re-sort
/// gives after every change.
#[test]
fn tops_an_existing_order_serves_are_walked_without_a_pass() {
    for seed in 0..10u64 {
        let mut sim = Sim::new(seed);
        sim.views = Views::with_top_from(0);
        for _ in 0..150 {
            sim.step();
        }
        let specs: Vec<ViewSpec> = Sim::specs().into_iter().filter(walkable).collect();
        let mut browsers = sim.browsers(specs);
        assert!(browsers.iter().all(|(_, b)| sim.views.subs[&b.id].top.is_some()));
        for step in 0..200 {
            sim.step();
            sim.views.advance(&sim.state, sim.now);
            sim.deliver_and_check(&mut browsers, &format!("seed {seed}, step {step}"));
        }
        assert_eq!(sim.views.top_passes, 0, "seed {seed}: no pass over the fleet");
    }
}

/// docs/architecture.md: "the walk reads the order from its end until the top
/// is full, and is abandoned for the pass past 20,000 locks read". With a
/// limit of 2 locks read, every walk is abandoned: the tops are filled by one
/// pass for all, and still hold what a full re-sort gives.
#[test]
fn a_walk_past_its_limit_leaves_the_top_to_the_pass() {
    assert_eq!(WALK_LIMIT, 20_000, "the figure the docs quote");
    let mut sim = Sim::new(5);
    sim.views = Views {
        walk_limit: 2,
        ..Views::with_top_from(0)
    };
    for _ in 0..150 {
        sim.step();
    }
    let specs: Vec<ViewSpec> = Sim::specs().into_iter().filter(walkable).collect();
    let mut browsers = sim.browsers(specs);
    sim.deliver_and_check(&mut browsers, "first frames");
    assert_eq!(sim.views.top_passes, 1, "one pass for every abandoned walk");
    assert!(sim.views.tops.values().all(|t| !t.stale));
}

/// docs/architecture.md: "Those tops' first frames go out in the turn they
/// were made; the pass for the others comes once no view took a top for 25 ms
/// (at most 200 ms after it was first owed), after those frames." A view by
/// name and one by fence made at once: the first is answered before any pass;
/// views taking tops push the pass back, but not past 200 ms.
#[test]
fn walked_tops_are_answered_before_the_pass_the_others_wait_for() {
    assert_eq!((PASS_QUIET_MS, PASS_WAIT_MS), (25, 200), "the figures the docs quote");
    let mut sim = Sim::new(3);
    sim.views = Views::with_top_from(0);
    for _ in 0..150 {
        sim.step();
    }
    let by = |key, offset| ViewSpec {
        sort: Sort { key, reverse: true },
        offset,
        limit: 4,
        ..ViewSpec::default()
    };
    let mut browsers = sim.browsers([by(SortKey::Name, 1), by(SortKey::Fence, 1)]);
    let turn = |sim: &mut Sim, browsers: &mut [(ViewSpec, Browser)]| {
        let frames = sim.views.due_frames(&sim.state, sim.t());
        let mut keys = Vec::new();
        for (id, f) in frames {
            let (spec, b) = browsers.iter_mut().find(|(_, b)| b.id == id).unwrap();
            b.window.apply(f).unwrap();
            let (total, offset, names) = sim.brute(spec);
            let window = (b.window.order(), b.window.total, b.window.offset);
            assert_eq!(window, (names.as_slice(), total, offset));
            keys.push(spec.sort.key);
        }
        keys
    };
    let t0 = sim.t().mono;
    sim.views.mark_dirty_before_pass(&sim.state, sim.t());
    assert_eq!(
        turn(&mut sim, &mut browsers),
        [SortKey::Name],
        "the walked view, at once"
    );
    assert_eq!(sim.views.top_passes, 0, "the pass is owed, not made");
    assert_eq!(sim.views.pass_due_at(), Some(t0 + 25));
    // Another view 20 ms later (of the same burst): the pass waits for quiet...
    sim.now += 20;
    browsers.extend(sim.browsers([by(SortKey::Fence, 2)]));
    sim.views.mark_dirty_before_pass(&sim.state, sim.t());
    assert_eq!(turn(&mut sim, &mut browsers), Vec::new(), "the fence views still wait");
    assert_eq!(sim.views.pass_due_at(), Some(t0 + 45));
    // ...but not past 200 ms after it was first owed.
    sim.now += 170;
    browsers.extend(sim.browsers([by(SortKey::Name, 2)]));
    assert_eq!(sim.views.pass_due_at(), Some(t0 + 200));
    sim.views.mark_dirty(&sim.state, sim.t());
    let mut keys = turn(&mut sim, &mut browsers);
    keys.sort_by_key(|k| *k as u8);
    assert_eq!(keys, [SortKey::Name, SortKey::Fence, SortKey::Fence]);
    assert_eq!((sim.views.pass_due_at(), sim.views.top_passes), (None, 1));
}
