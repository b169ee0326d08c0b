//! The tops' pass ([`crate::live::views::top`]'s `pass`), made a slice a turn:
//! the changes between slices, tops that join a pass under way, and a top asked
//! deeper while its pass runs, each checked against windows recomputed from
//! scratch.

use super::*;

/// A sim whose tops' pass reads 2 locks a thread a turn (and walks none),
/// stepped until it holds at least `locks` locks.
fn sliced_sim(seed: u64, locks: usize) -> Sim {
    let mut sim = Sim::new(seed);
    sim.views = Views {
        pass: crate::live::views::top::Pass { run: None, slice: 2 },
        walk_limit: 0,
        ..Views::with_top_from(0)
    };
    for _ in 0..150 {
        sim.step();
    }
    while sim.state.len() < locks {
        sim.step();
    }
    sim
}

/// docs/architecture.md: "The pass is made in slices of 32,768 locks per
/// thread, one a turn (16 turns for 1,000,000 locks), so it never holds the
/// hub for more than a slice: between slices the hub applies the store's
/// events and sends frames. A lock already read that changes meanwhile is
/// counted again at once, and taken as it is then when the pass ends."
/// With slices of 2 locks a thread (and no walks: every top is passed), a
/// pass takes several turns; locks change between slices; views whose top is
/// filled get their frames while a pass is under way; and every view whose top
/// is filled holds what a full re-sort gives, at every turn.
#[test]
fn the_pass_is_made_a_slice_a_turn_and_follows_the_changes_between_slices() {
    assert_eq!(PASS_SLICE, 32_768, "the figure the docs quote");
    let (mut changed_between_slices, mut framed_during_a_pass) = (0, 0);
    for seed in 0..12u64 {
        // More locks than a slice reads.
        let mut sim = sliced_sim(seed, 10);
        let locks = sim.state.len();
        let tops = Sim::specs()
            .into_iter()
            .filter(|s| s.offset + s.limit as u64 <= TOP_ROWS);
        let mut browsers = sim.browsers(tops);
        let mut first_pass_turns = 0;
        let mut first_pass = true;
        for turn in 0..40 {
            let at = format!("seed {seed}, turn {turn}");
            sim.views.mark_dirty(&sim.state, sim.t());
            let under_way = sim.views.pass.run.is_some();
            if first_pass {
                first_pass_turns += 1;
                first_pass = under_way;
                if under_way {
                    assert_eq!(sim.views.pass_due_at(), Some(0), "{at}: the pass goes on at once");
                }
            }
            for (id, f) in sim.views.due_frames(&sim.state, sim.t()) {
                let (_, b) = browsers.iter_mut().find(|(_, b)| b.id == id).unwrap();
                b.window.apply(f).unwrap();
                sim.views.ack(id, b.window.seq);
                framed_during_a_pass += usize::from(under_way);
            }
            for (spec, b) in browsers.iter().filter(|(_, b)| sim.views.is_ready(b.id)) {
                let (total, offset, names) = sim.brute(spec);
                assert_eq!(b.window.order(), names.as_slice(), "{at}, {spec:?}: order");
                assert_eq!((b.window.total, b.window.offset), (total, offset), "{at}, {spec:?}");
            }
            sim.step();
            sim.views.advance(&sim.state, sim.now);
            if let Some(run) = &sim.views.pass.run {
                changed_between_slices += run.changed_len();
            }
        }
        // 10 locks or more, 2 + 2 read a turn (the sim's events may take
        // several locks at once meanwhile).
        assert!(
            first_pass_turns > 1,
            "seed {seed}: {locks} locks read 2 + 2 a turn took {first_pass_turns} turn"
        );
    }
    assert!(changed_between_slices > 0, "locks read changed before the pass ended");
    assert!(framed_during_a_pass > 0, "frames went out while a pass was under way");
}

/// docs/architecture.md: "A top made while a pass is under way joins it: it
/// reads from the pass's cursor to the end of the fleet, then from the start
/// up to where it joined, so a burst of new views needs one pass, and a view
/// made during it waits for one lap over the fleet at most." With slices of 2
/// locks a thread (no walks), four groups of views made one turn apart while
/// the first group's pass runs: with no lock changing, all are filled by that
/// one pass, each within a lap's turns of its subscribe; with locks changing
/// between slices, every view whose top is filled holds what a full re-sort
/// gives at every turn.
#[test]
fn tops_made_while_a_pass_runs_join_it() {
    let mut second_laps = 0;
    for seed in 0..6u64 {
        for changes in [false, true] {
            let at = |turn| format!("seed {seed}, changes {changes}, turn {turn}");
            // Several turns a lap: the later groups join a lap under way.
            let mut sim = sliced_sim(seed, 16);
            let lap_turns = sim.state.len().div_ceil(4);
            let tops: Vec<ViewSpec> = (Sim::specs().into_iter())
                .filter(|s| s.offset + s.limit as u64 <= TOP_ROWS)
                .collect();
            let mut browsers: Vec<(ViewSpec, Browser)> = Vec::new();
            let mut made_at: HashMap<SubId, usize> = HashMap::new();
            for turn in 0..3 * lap_turns + 4 {
                if turn < 4 {
                    let group = tops.iter().skip(turn).step_by(4).cloned();
                    for b in sim.browsers(group) {
                        made_at.insert(b.1.id, turn);
                        browsers.push(b);
                    }
                }
                sim.views.mark_dirty(&sim.state, sim.t());
                if let Some(run) = &sim.views.pass.run {
                    second_laps += usize::from(run.laps() > 1);
                }
                for (id, f) in sim.views.due_frames(&sim.state, sim.t()) {
                    let (_, b) = browsers.iter_mut().find(|(_, b)| b.id == id).unwrap();
                    let waited = turn - made_at[&id];
                    if b.window.seq == 0 && !changes {
                        assert!(
                            waited <= lap_turns,
                            "{}: framed {waited} turns after its subscribe",
                            at(turn)
                        );
                    }
                    b.window.apply(f).unwrap();
                    sim.views.ack(id, b.window.seq);
                }
                for (spec, b) in browsers.iter().filter(|(_, b)| sim.views.is_ready(b.id)) {
                    let (total, offset, names) = sim.brute(spec);
                    assert_eq!(b.window.order(), names.as_slice(), "{}, {spec:?}: order", at(turn));
                    assert_eq!(
                        (b.window.total, b.window.offset),
                        (total, offset),
                        "{}, {spec:?}",
                        at(turn)
                    );
                }
                if changes {
                    sim.step();
                    sim.views.advance(&sim.state, sim.now);
                }
            }
            assert!(browsers.iter().all(|(_, b)| b.window.seq > 0), "{}: all framed", at(0));
            if !changes {
                assert_eq!(sim.views.top_passes, 1, "seed {seed}: one pass for the burst");
            }
        }
    }
    assert!(second_laps > 0, "tops that joined read on into the pass's next lap");
}

/// docs/architecture.md: "A top asked deeper while its pass runs takes that
/// pass's rows if they hold what its viewers now need, and joins it again
/// only if not." A view by fence on 4 rows (a top of 8) and, a turn into
/// the pass, one on the next 4 rows of the same order: both are framed when
/// the pass's one lap ends, with what a full re-sort gives.
#[test]
fn a_top_asked_a_little_deeper_while_its_pass_runs_takes_that_pass() {
    let mut sim = sliced_sim(1, 16);
    let lap_turns = sim.state.len().div_ceil(4);
    let by_fence = |offset| ViewSpec {
        sort: Sort {
            key: SortKey::Fence,
            reverse: false,
        },
        offset,
        limit: 4,
        ..ViewSpec::default()
    };
    let mut browsers = sim.browsers([by_fence(0)]);
    for turn in 0..=lap_turns {
        if turn == 1 {
            assert!(sim.views.pass.run.is_some(), "the pass is under way");
            browsers.extend(sim.browsers([by_fence(4)]));
        }
        sim.views.mark_dirty(&sim.state, sim.t());
        for (id, f) in sim.views.due_frames(&sim.state, sim.t()) {
            let (_, b) = browsers.iter_mut().find(|(_, b)| b.id == id).unwrap();
            b.window.apply(f).unwrap();
            sim.views.ack(id, b.window.seq);
        }
    }
    for (spec, b) in &browsers {
        assert!(b.window.seq > 0, "{spec:?}: framed within the lap ({lap_turns} turns)");
        let (total, offset, names) = sim.brute(spec);
        assert_eq!(b.window.order(), names.as_slice(), "{spec:?}");
        assert_eq!((b.window.total, b.window.offset), (total, offset), "{spec:?}");
    }
    assert_eq!(sim.views.top_passes, 1);
}
