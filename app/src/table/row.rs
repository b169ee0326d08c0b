//! One row of the lock table, and how it is built: the `<tr>` is a Leptos
//! element (its attributes follow the row), its eight cells are one string of
//! HTML set at once ([`RowCells`], the row's `inner_html`).
//!
//! A row is built whenever a lock enters the window: at 1,000 locks taken and
//! released a second that is several hundred rows a second, and building one
//! cell, attribute and text at a time cost the page about 30 DOM calls and 25
//! strings copied out of wasm per row (docs/performance.md). The cells as one
//! string are one call, parsed by the browser; the markup is the same as
//! before (`render_tests/lock_rows.rs` pins it, and the browser hydrates the
//! server's rows without touching them). When the row runs again with the
//! clock (once a second), only the two countdown cells change: they are
//! updated in place, the other cells' nodes are kept.
//!
//! Every text and attribute value is escaped ([`escape`]): lock names,
//! purposes and holders come from the store.

use std::fmt::Write as _;

use leptos::prelude::*;
use leptos::tachys::html::element::{InnerHtmlAttribute, InnerHtmlValue};
use leptos::tachys::renderer::types::Element;
use leptos::tachys::renderer::Rndr;
use lockscope_model::view::{RowState, WindowRow};
use lockscope_model::LockBody;

use crate::links::{encode, lock_href};
use crate::live::LiveView;
use crate::rows::{countdowns, row_text, state_icon, Countdowns};

use super::Frozen;

/// One lock. Re-renders when its own row signal changes, and once a second with
/// the clock (its state and countdowns read it): the `<tr>`'s attributes are set
/// where they differ, and its cells as [`RowCells`] says. Its link is fixed when
/// it is built (the page's fleet does not change under it).
#[component]
pub(super) fn LockRow(name: String) -> impl IntoView {
    let live = expect_context::<LiveView>();
    let Some(row) = live.row(&name) else {
        return view! { <tr></tr> }.into_any();
    };
    let link = match use_context::<Frozen>() {
        Some(f) => format!("{}{}", f.lock_href_prefix, encode(&name)),
        None => lock_href(&live.fleet.get_untracked(), &name),
    };
    (move || {
        let now = live.now.get();
        row.with(|r| {
            let s = r.state(now);
            let cells = RowCells::new(r, s, &name, &link, countdowns(r, now));
            view! {
                <tr role="row" data-testid="lock-row" data-lock=name.clone() class=s.as_str() data-state=s.as_str()></tr>
            }
            .into_inner()
            .inner_html(cells)
        })
    })
    .into_any()
}

/// A row's eight cells as HTML: those that change only with the row (and its
/// state), and the two countdowns that follow the clock, kept apart so that a
/// tick updates those two cells alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowCells {
    /// The state, lock, holder and purpose cells.
    head: String,
    clock: Countdowns,
    /// The waiters and fence cells.
    tail: String,
}

/// The countdown cells' places among the row's cells.
const HELD_FOR_CELL: u32 = 4;

impl RowCells {
    pub fn new(r: &WindowRow, s: RowState, name: &str, link: &str, clock: Countdowns) -> RowCells {
        let t = row_text(r);
        let mut head = String::with_capacity(640);
        head.push_str(r#"<td role="cell" data-testid="state" title=""#);
        escape(s.reason(), &mut head);
        head.push_str(r#"" class="st"><span aria-hidden="true" class="icon">"#);
        head.push_str(state_icon(s));
        head.push_str("</span>");
        head.push_str(s.as_str());
        head.push_str(r#"</td><td role="cell" title=""#);
        escape(name, &mut head);
        head.push_str(r#"" class="name"><a href=""#);
        escape(link, &mut head);
        head.push_str(r#"" data-testid="lock-link">"#);
        text(name, &mut head);
        head.push_str("</a>");
        // (`<!>`: where the flag goes when there is none, as the server's renderer marks it.)
        head.push_str(if r.deadlock {
            r#"<span title="on a wait-for cycle" class="deadlock-flag"> ⟲</span>"#
        } else {
            "<!>"
        });
        head.push_str(r#"</td><td role="cell" title=""#);
        escape(&t.holder_title, &mut head);
        head.push_str(r#"" class="holder"><span class="where">"#);
        text(&t.holder, &mut head);
        head.push_str(r#"</span> <span class="session">"#);
        text(&t.session, &mut head);
        head.push_str(r#"</span></td><td role="cell" title=""#);
        escape(&t.purpose, &mut head);
        // A malformed record's purpose text says so.
        head.push_str(if matches!(r.entry.body, LockBody::Malformed { .. }) {
            r#"" class="purpose malformed">"#
        } else {
            r#"" class="purpose">"#
        });
        text(&t.purpose, &mut head);
        head.push_str("</td>");
        let mut tail = String::with_capacity(160);
        tail.push_str(r#"<td role="cell" data-testid="waiters" title=""#);
        escape(&t.waiters_title, &mut tail);
        tail.push_str(r#"" class="waiters">"#);
        text(&t.waiters, &mut tail);
        // The full token in the title too: a long one (a Redis lock's is derived
        // from its token, up to 19 digits) is cut short by the column's ellipsis.
        let _ = write!(
            tail,
            r#"</td><td role="cell" data-testid="fence" title="fencing token {0}" class="fence">{0}</td>"#,
            r.entry.fence
        );
        RowCells { head, clock, tail }
    }

    /// The cells' HTML.
    pub fn html(&self) -> String {
        let c = &self.clock;
        let mut out = String::with_capacity(self.head.len() + self.tail.len() + 320);
        out.push_str(&self.head);
        for (testid, title, class, value) in [
            ("held-for", &c.held_title, "age", &c.held_for),
            ("expires-in", &c.expires_title, "expires", &c.expires_in),
        ] {
            let _ = write!(out, r#"<td role="cell" data-testid="{testid}" title=""#);
            escape(title, &mut out);
            let _ = write!(out, r#"" class="{class}">"#);
            text(value, &mut out);
            out.push_str("</td>");
        }
        out.push_str(&self.tail);
        out
    }

    /// Brings the cells in `el` from `old` to `self`: the countdown cells alone
    /// when nothing else changed, all of them otherwise.
    fn update(&self, el: &Element, old: &RowCells) {
        if self == old {
            return;
        }
        if self.head != old.head || self.tail != old.tail {
            return Rndr::set_inner_html(el, &self.html());
        }
        let mut cell = el.first_element_child();
        for _ in 0..HELD_FOR_CELL {
            cell = cell.and_then(|c| c.next_element_sibling());
        }
        let (Some(held), Some(expires)) = (cell.clone(), cell.and_then(|c| c.next_element_sibling())) else {
            // Not the cells this built (nothing else edits them): build them again.
            return Rndr::set_inner_html(el, &self.html());
        };
        let (new, old) = (&self.clock, &old.clock);
        for (cell, title, value, old_title, old_value) in [
            (&held, &new.held_title, &new.held_for, &old.held_title, &old.held_for),
            (
                &expires,
                &new.expires_title,
                &new.expires_in,
                &old.expires_title,
                &old.expires_in,
            ),
        ] {
            if title != old_title {
                Rndr::set_attribute(cell, "title", title);
            }
            if value != old_value {
                // As the server renders an empty text: one space.
                cell.set_text_content(Some(if value.is_empty() { " " } else { value }));
            }
        }
    }
}

impl InnerHtmlValue for RowCells {
    type AsyncOutput = Self;
    type State = (Element, RowCells);
    type Cloneable = Self;
    type CloneableOwned = Self;

    fn html_len(&self) -> usize {
        self.head.len() + self.tail.len() + 320
    }

    fn to_html(self, buf: &mut String) {
        buf.push_str(&self.html());
    }

    fn to_template(_buf: &mut String) {}

    fn hydrate<const FROM_SERVER: bool>(self, el: &Element) -> Self::State {
        if !FROM_SERVER {
            Rndr::set_inner_html(el, &self.html());
        }
        (el.clone(), self)
    }

    fn build(self, el: &Element) -> Self::State {
        Rndr::set_inner_html(el, &self.html());
        (el.clone(), self)
    }

    fn rebuild(self, state: &mut Self::State) {
        self.update(&state.0, &state.1);
        state.1 = self;
    }

    fn into_cloneable(self) -> Self {
        self
    }

    fn into_cloneable_owned(self) -> Self {
        self
    }

    fn dry_resolve(&mut self) {}

    async fn resolve(self) -> Self {
        self
    }
}

/// Appends `s` escaped for HTML text or a double-quoted attribute value (every
/// value here is double-quoted): `&`, `<`, `>` and `"` as character references,
/// so that nothing from the store can end a value or start markup.
pub fn escape(s: &str, out: &mut String) {
    let mut rest = s;
    while let Some(i) = rest.find(['&', '<', '>', '"']) {
        out.push_str(&rest[..i]);
        out.push_str(match rest.as_bytes()[i] {
            b'&' => "&amp;",
            b'<' => "&lt;",
            b'>' => "&gt;",
            _ => "&quot;",
        });
        rest = &rest[i + 1..];
    }
    out.push_str(rest);
}

/// A cell's text, escaped; an empty one is one space, as the server renders it
/// (the text node is there to be updated).
fn text(s: &str, out: &mut String) {
    if s.is_empty() {
        out.push(' ');
    } else {
        escape(s, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The module's rule: "When the row runs again with the clock (once a
    /// second), only the two countdown cells change: they are updated in place,
    /// the other cells' nodes are kept." A tick that does not change the state
    /// leaves the head and tail alone (so `update` sets two cells, not the
    /// row's HTML); one that crosses the alert time changes the state cell, and
    /// the whole row is set again.
    #[test]
    fn a_clock_tick_changes_the_countdown_cells_alone() {
        let r = crate::rows::tests::held();
        let at = |now| RowCells::new(&r, r.state(now), "a", "/lock?name=a", countdowns(&r, now));
        let (a, b) = (at(10_000), at(11_000));
        assert_ne!(a, b);
        assert_eq!((&a.head, &a.tail), (&b.head, &b.tail), "only the countdowns differ");
        assert!(a.html().contains(">10s</td>") && b.html().contains(">11s</td>"));
        let overdue = at(61_000);
        assert_ne!(overdue.head, b.head, "the state cell follows the clock too");
    }

    #[test]
    fn nothing_from_the_store_ends_a_value_or_starts_markup() {
        let mut out = String::new();
        escape(r#"a"b'c<d>e&f"#, &mut out);
        assert_eq!(out, "a&quot;b'c&lt;d&gt;e&amp;f");
        let mut out = String::new();
        escape("plain ⟲ text", &mut out);
        assert_eq!(out, "plain ⟲ text");
    }
}
