//! How the table's keyed list goes from one window order to the next without
//! moving rows it keeps.
//!
//! Leptos's keyed list (`For`, tachys 0.2's `keyed.rs`) decides whether a kept
//! row must move in the document by comparing, index by index, its shift with
//! the rows added and removed *so far*; with several rows added in one change,
//! the row just after each later insertion is judged moved and re-inserted,
//! which makes the browser style, lay out and paint it again like a new row
//! (at 1,000 rows entering and leaving a second, about 130 such moves a second
//! beside 200 rows built). Its rule is exact for a change that only removes rows,
//! or only adds one. So the table shows a new order as a few such steps, each
//! applied by the keyed list before the next ([`steps`]); all of them run in
//! the same task, before the browser renders, so only the last is ever painted.

use std::collections::HashSet;

/// Orders that take the keyed list from `from` to `to`, each one either only
/// removing rows from the one before it, or reordering kept rows (only when the
/// new order moves them relative to each other), or adding one row; the last is
/// `to`. Past `max_added` rows added, or when no row is kept, the rest is one
/// step (a wholly new window moves nothing anyway).
pub fn steps(from: &[String], to: &[String], max_added: usize) -> Vec<Vec<String>> {
    let to_names: HashSet<&str> = to.iter().map(String::as_str).collect();
    let from_names: HashSet<&str> = from.iter().map(String::as_str).collect();
    let kept: Vec<String> = from.iter().filter(|n| to_names.contains(n.as_str())).cloned().collect();
    if kept.is_empty() || from == to {
        return if from == to { vec![] } else { vec![to.to_vec()] };
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
    let added: Vec<&str> = to
        .iter()
        .map(String::as_str)
        .filter(|n| !from_names.contains(n))
        .collect();
    for (i, name) in added.iter().enumerate() {
        if i + 1 >= max_added {
            break;
        }
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
    /// applies exactly (the removals, then one row added at a time ...): 0 moves."
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
        // Past max_added rows added, the rest is one step.
        let s = steps(&names("a"), &names("a b c d e"), 3);
        assert_eq!(s, vec![names("a b"), names("a b c"), names("a b c d e")]);
    }
}
