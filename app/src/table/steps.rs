//! How the table's keyed list goes from one window order to the next without
//! moving rows it keeps.
//!
//! Leptos's keyed list (`For`, tachys 0.2's `keyed.rs`) decides whether a kept
//! row must move in the document by comparing, index by index, its shift with
//! the rows added and removed *so far*; with several rows added in one change,
//! the row just after each later insertion is judged moved and re-inserted,
//! which makes the browser style, lay out and paint it again like a new row
//! (at 1,000 rows entering and leaving a second, 216–381 such moves a second
//! beside 211–400 rows built; docs/performance.md). Its rule is exact for a change that only removes rows,
//! or only adds one. So the table shows a new order as a few such steps, each
//! applied by the keyed list before the next ([`steps`]); all of them run in
//! the same task, before the browser renders, so only the last is ever painted.

use std::collections::HashSet;

use leptos::prelude::*;

use crate::live::LiveView;

/// The keyed list's own copy of the window order: in the browser it follows
/// `live.order` in [`steps`], so that rows kept are never moved.
pub(super) fn shown_order(live: LiveView) -> RwSignal<Vec<String>> {
    let shown = RwSignal::new(live.order.get_untracked());
    #[cfg(feature = "hydrate")]
    {
        let latest = StoredValue::new(0u64);
        Effect::new(move |_| {
            let to = live.order.get();
            let steps = shown.with_untracked(|from| steps(from, &to, MAX_STEPS));
            let Some(this) = latest.try_update_value(|n| {
                *n += 1;
                *n
            }) else {
                return;
            };
            leptos::task::spawn_local(async move {
                for step in steps {
                    // A newer order supersedes this one from where it got to.
                    if latest.try_get_value() != Some(this) || shown.try_set(step).is_some() {
                        return;
                    }
                    // The keyed list, woken by the step, applies it before this goes on.
                    leptos::task::tick().await;
                }
            });
        });
    }
    shown
}

/// Rows added one step each at most (then the rest at once): a step costs the
/// keyed list a pass over the window's names, far less than a row moved.
#[cfg(feature = "hydrate")]
const MAX_STEPS: usize = 100;

/// Orders that take the keyed list from `from` to `to`, each one either only
/// removing rows from the one before it, or reordering kept rows (only when the
/// new order moves them relative to each other), or adding rows that shift no
/// kept row (one placed among the kept rows, or all those after the last kept
/// one); the last is `to`. Past `max_added` rows added among the kept ones,
/// the rest come in one step, whose moves are then the keyed list's own; a
/// wholly new window is one step (it keeps nothing to move). Names are unique
/// in a window, as the server's orders are.
#[cfg_attr(not(any(feature = "hydrate", test)), allow(dead_code))] // the server renders one order
pub fn steps(from: &[String], to: &[String], max_added: usize) -> Vec<Vec<String>> {
    if from == to {
        return Vec::new();
    }
    let to_names: HashSet<&str> = to.iter().map(String::as_str).collect();
    let from_names: HashSet<&str> = from.iter().map(String::as_str).collect();
    debug_assert!(
        to_names.len() == to.len() && from_names.len() == from.len(),
        "a window names each lock once"
    );
    let kept: Vec<String> = from.iter().filter(|n| to_names.contains(n.as_str())).cloned().collect();
    if kept.is_empty() {
        return vec![to.to_vec()];
    }
    let mut out = Vec::new();
    if kept.len() != from.len() {
        out.push(kept.clone());
    }
    let mut shown: HashSet<&str> = kept.iter().map(String::as_str).collect();
    let reordered: Vec<String> = to.iter().filter(|n| shown.contains(n.as_str())).cloned().collect();
    if reordered != kept {
        out.push(reordered);
    }
    // Rows after the last kept one shift no kept row: they come with the last step.
    let last_kept = to.iter().rposition(|n| shown.contains(n.as_str())).unwrap_or(0);
    let among: Vec<&str> = to[..last_kept]
        .iter()
        .map(String::as_str)
        .filter(|n| !from_names.contains(n))
        .collect();
    for name in among.into_iter().take(max_added) {
        shown.insert(name);
        out.push(to.iter().filter(|n| shown.contains(n.as_str())).cloned().collect());
    }
    if out.last().map(Vec::as_slice) != Some(to) {
        out.push(to.to_vec());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kept rows tachys 0.2's keyed diff (`keyed.rs`, `fn diff`) re-inserts in the
    /// document going from `from` to `to`: its rule, restated.
    fn moved_in_dom(from: &[String], to: &[String]) -> usize {
        if from.is_empty() || to.is_empty() {
            return 0;
        }
        let (mut added, mut removed, mut moved) = (0i32, 0i32, 0);
        for i in 0..from.len().max(to.len()) {
            let (f, t) = (from.get(i), to.get(i));
            if f == t {
                continue;
            }
            if f.is_some_and(|f| !to.contains(f)) {
                removed += 1;
            }
            if t.is_some_and(|t| !from.contains(t)) {
                added += 1;
            }
            if let Some(j) = f.and_then(|f| to.iter().position(|t| t == f)) {
                if j as i32 - i as i32 != added - removed {
                    moved += 1;
                }
            }
        }
        moved
    }

    fn names(s: &str) -> Vec<String> {
        s.split(' ').filter(|n| !n.is_empty()).map(String::from).collect()
    }

    /// docs/performance.md: "The table now reaches each new order in steps its diff
    /// applies exactly (the removals, then one row added at a time among the kept
    /// rows, ...): 0 moves."
    #[test]
    fn rows_entering_and_leaving_move_no_kept_row() {
        // Sorted by name: rows taken and released all over the window at once.
        let from = names("a c d f g i k m");
        let to = names("b c e f h i j k l m n");
        assert!(
            moved_in_dom(&from, &to) > 0,
            "in one step the keyed list moves kept rows"
        );
        let steps = steps(&from, &to, 100);
        assert_eq!(steps.last(), Some(&to));
        let mut prev = from.clone();
        for step in &steps {
            assert_eq!(moved_in_dom(&prev, step), 0, "{prev:?} -> {step:?} moves no row");
            prev = step.clone();
        }
        // One step removing a, d, g; then one per row added (b e h j l n).
        assert_eq!(steps.len(), 1 + 6);
    }

    #[test]
    fn a_reorder_a_new_window_and_no_change() {
        let (from, to) = (names("a b c"), names("c a b d"));
        let s = steps(&from, &to, 100);
        assert_eq!(
            s,
            vec![names("c a b"), to.clone()],
            "the reorder is one step (its moves are real)"
        );
        assert_eq!(steps(&from, &names("x y"), 100), vec![names("x y")]);
        assert!(steps(&from, &from, 100).is_empty());
        // Rows after the last kept one come together: they shift no kept row.
        assert_eq!(steps(&names("a"), &names("a b c d e"), 100), vec![names("a b c d e")]);
        // Past max_added rows added among the kept ones, the rest is one step.
        let s = steps(&names("e"), &names("a b c d e"), 3);
        assert_eq!(
            s,
            vec![names("a e"), names("a b e"), names("a b c e"), names("a b c d e")]
        );
    }

    /// Every pair of windows of up to four of five names: the steps end at the
    /// new window, and none but a reorder of the kept rows moves a row.
    #[test]
    fn every_small_change_moves_only_what_it_reorders() {
        let all = ["a", "b", "c", "d", "e"];
        let mut windows: Vec<Vec<String>> = vec![vec![]];
        for _ in 0..4 {
            let longer: Vec<Vec<String>> = windows
                .iter()
                .flat_map(|w| {
                    all.iter()
                        .filter(|n| !w.iter().any(|x| x == *n))
                        .map(|n| {
                            let mut w = w.clone();
                            w.push(n.to_string());
                            w
                        })
                        .collect::<Vec<_>>()
                })
                .collect();
            windows.extend(longer.into_iter().filter(|w| !windows.contains(w)).collect::<Vec<_>>());
        }
        assert_eq!(windows.len(), 1 + 5 + 20 + 60 + 120);
        for from in &windows {
            for to in &windows {
                let s = steps(from, to, 100);
                assert_eq!(s.is_empty(), from == to, "{from:?} -> {to:?}");
                let mut prev = from.clone();
                for step in &s {
                    let same_rows = step.len() == prev.len() && step.iter().all(|n| prev.contains(n));
                    if !same_rows {
                        assert_eq!(moved_in_dom(&prev, step), 0, "{from:?} -> {to:?}: {prev:?} -> {step:?}");
                    }
                    prev = step.clone();
                }
                assert_eq!(&prev, to, "{from:?} -> {to:?} ends at the new window");
            }
        }
    }
}
