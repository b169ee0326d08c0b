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
    sim.views.mark_dirty(sim.t());
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
