//! Selection views ([`crate::live::views::select`]): filtered views served from
//! their sort key's shared order, checked against windows recomputed from
//! scratch after every change.

use super::*;

/// docs/architecture.md: "Its window is read by scanning that order for rows
/// the filter takes, its total is a count kept per filter as locks change, and
/// the scan is repeated only when a lock the filter takes moved at or before
/// the last key the previous scan read."
/// Every browser on a selection view, acknowledging every frame, holds after
/// each change exactly what a full re-sort gives: order, total, offset and the
/// rows' contents (a change within a window's scan must be noticed, one past
/// it may be skipped).
#[test]
fn selections_follow_every_change_as_a_full_resort_would() {
    for seed in 0..10u64 {
        let mut sim = Sim::new(seed);
        sim.views = Views::with_select_from(0, SCAN_LIMIT);
        for _ in 0..100 {
            sim.step();
        }
        let specs: Vec<ViewSpec> = Sim::specs()
            .into_iter()
            .filter(|s| s.filter != Filter::default())
            .enumerate()
            .filter(|(i, _)| *i as u64 % 5 == seed % 5)
            .map(|(_, s)| s)
            .collect();
        let mut browsers = sim.browsers(specs);
        let selections = browsers
            .iter()
            .filter(|(_, b)| sim.views.subs[&b.id].sel.is_some())
            .count();
        assert!(selections * 3 >= browsers.len() * 2, "seed {seed}: most are selections");
        for step in 0..300 {
            sim.step();
            sim.views.advance(&sim.state, sim.now);
            sim.deliver_and_check(&mut browsers, &format!("seed {seed}, step {step}"));
        }
        for spec in Sim::specs() {
            if let Some(w) = sim.views.window_names(&spec) {
                assert_eq!(w, sim.brute(&spec), "seed {seed}: {spec:?}");
            }
        }
        // The last viewer of a filter takes its count along.
        for (_, b) in browsers {
            sim.views.unsubscribe(b.id);
        }
        assert!(sim.views.filters.is_empty());
        assert_eq!(sim.views.indexes.len(), 1, "only the default view's index stays");
    }
}

/// docs/architecture.md: "A deeper window of a rarer filter, and a list API
/// page (a cursor), keep an index of their own."
#[test]
fn a_deep_window_of_a_rare_filter_gets_its_own_index() {
    let mut sim = Sim::new(3);
    sim.views = Views::with_select_from(0, SCAN_LIMIT);
    for _ in 0..200 {
        sim.step();
    }
    let rare = ViewSpec {
        filter: Filter {
            contains: Some("shard-0".into()),
            ..Filter::default()
        },
        offset: (SCAN_BUDGET as u64) * 2,
        ..ViewSpec::default()
    };
    let id = sim.views.subscribe(1, rare.clone(), sim.t());
    assert!(sim.views.subs[&id].sel.is_none());
    assert!(sim.views.indexes.contains_key(&IndexSpec::of(&rare)));
    assert!(sim.views.filters.is_empty(), "no count kept for it");
    let near = ViewSpec { offset: 0, ..rare };
    let id = sim.views.subscribe(1, near.clone(), sim.t());
    assert!(sim.views.subs[&id].sel.is_some());
    assert_eq!(sim.views.window_names(&near), Some(sim.brute(&near)));
    // A list API page after a cursor seeks the cursor's key in an index.
    let page = ViewSpec {
        filter: Filter {
            service: Some("billing".into()),
            ..Filter::default()
        },
        ..ViewSpec::default()
    };
    let id = sim
        .views
        .subscribe_after(0, page.clone(), Some((0, 0, Arc::from("a"))), sim.t());
    assert!(sim.views.subs[&id].sel.is_none());
    assert!(sim.views.indexes.contains_key(&IndexSpec::of(&page)));
}

/// docs/architecture.md: "a selection whose scan visits more than 80,000 keys
/// (its filter's locks bunched far along the order) is given an index of its
/// own" (the limit is set low here); its browser keeps the right window
/// across the switch.
#[test]
fn a_selection_whose_scan_overflows_gets_its_own_index() {
    let mut sim = Sim::new(4);
    sim.views = Views::with_select_from(0, 10);
    for _ in 0..200 {
        sim.step();
    }
    let spec = ViewSpec {
        filter: Filter {
            prefix: Some("search/".into()),
            ..Filter::default()
        },
        sort: Sort {
            key: SortKey::Fence,
            reverse: false,
        },
        limit: 5,
        ..ViewSpec::default()
    };
    let id = sim.views.subscribe(1, spec.clone(), sim.t());
    assert!(sim.views.subs[&id].sel.is_some());
    let mut b = Browser {
        id,
        window: Window::default(),
    };
    for _ in 0..100 {
        sim.step();
        sim.views.advance(&sim.state, sim.now);
        sim.views.mark_dirty(&sim.state, sim.t());
        b.take(&mut sim, true);
    }
    assert!(sim.views.subs[&id].sel.is_none(), "demoted");
    assert!(sim.views.filters.is_empty());
    assert!(sim.views.indexes.contains_key(&IndexSpec::of(&spec)));
    let (total, offset, names) = sim.brute(&spec);
    assert_eq!(b.window.order(), names.as_slice());
    assert_eq!((b.window.total, b.window.offset), (total, offset));
}
