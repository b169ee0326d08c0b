//! One-off windows: a server-rendered page's first frame, and a list API page
//! (after a cursor), each made by a subscriber that is never sent frames
//! ([`Sub::one_off`](super::frames::Sub)); and the order a page render needed,
//! kept for the page's socket.

use super::*;

/// A page render whose view needed an order of its own (an index, a selection's
/// shared order, a top) keeps it this long for the page's socket, which asks for
/// the same view a few hundred milliseconds later: without it the order is
/// dropped with the render and made again, a second sort or pass over the
/// fleet. Let go of sooner when a socket takes the same view.
pub const RENDER_HOLD_MS: Millis = 5_000;

/// ...and at most this many renders per fleet at once, the oldest let go first:
/// each may keep an index of the whole fleet (docs/security.md, limits).
pub const RENDER_HOLDS: usize = 4;

impl Views {
    /// A one-off window of `spec` (for a server-rendered page): the first frame a
    /// new subscriber would get, or, while its index is being built, the
    /// subscriber to pass to [`Views::render_sub`] once [`Views::is_ready`].
    pub fn render(&mut self, state: &FleetState, spec: &ViewSpec, now: Now) -> Result<WindowFrame, SubId> {
        self.render_after(state, spec, None, now)
    }

    /// [`Views::render`] of the rows after `after` (a list API cursor,
    /// [`ListCursor`]) in the view's order.
    pub fn render_after(
        &mut self,
        state: &FleetState,
        spec: &ViewSpec,
        after: Option<&ListCursor>,
        now: Now,
    ) -> Result<WindowFrame, SubId> {
        let after = after.map(|c| (c.0, c.1, Arc::from(c.2.as_str())));
        let id = self.subscribe_after(0, spec.clone(), after, now);
        let sub = self.subs.get_mut(&id).expect("just made");
        sub.one_off = true;
        // A new top is filled now: a page render need not wait a turn.
        self.fill_tops(state, true);
        self.pass_owed = None;
        match self.is_ready(id) {
            true => Ok(self.render_sub(state, id, now)),
            false => Err(id),
        }
    }

    /// The first frame of a subscriber made by [`Views::render`], which it ends
    /// (keeping its view's order a while for the page's socket: [`RENDER_HOLD_MS`]).
    pub fn render_sub(&mut self, state: &FleetState, id: SubId, now: Now) -> WindowFrame {
        let mut frame = self
            .frame(state, id, now)
            .expect("a fresh subscriber with its index built always gets a frame");
        self.hold_render(id, now);
        frame.aggregates.get_or_insert_with(|| self.aggregates());
        frame
    }

    /// Keeps the order a page render `id` needed for the page's socket
    /// ([`RENDER_HOLD_MS`]), if ending the render would drop it; else ends it.
    fn hold_render(&mut self, id: SubId, now: Now) {
        let Some(sub) = self.subs.get(&id) else { return };
        // Nothing to keep: a window by name (its cursor is kept anyway), a list
        // API page (no socket follows it), an order someone else holds too (the
        // unlocker's view, a socket already on it), a selection whose scan
        // overflowed (a socket gets an index of its own).
        let only_user = |index: &IndexSpec| self.indexes.get(index).is_some_and(|i| i.subscribers == 1);
        let would_drop = match (&sub.top, &sub.sel) {
            (Some(top), _) => self.tops.get(top).is_some_and(|t| t.users == 1),
            (None, Some(sel)) => {
                !sel.overflowed
                    && (only_user(&sub.index) || self.filters.get(&sub.spec.filter).is_some_and(|c| c.users == 1))
            }
            (None, None) => sub.index != IndexSpec::default_view() && only_user(&sub.index),
        };
        if !would_drop || sub.after.is_some() || self.names.contains_key(&id) {
            return self.unsubscribe(id);
        }
        self.held_renders.push_back((now.mono + RENDER_HOLD_MS, id));
        while self.held_renders.len() > RENDER_HOLDS {
            let (_, oldest) = self.held_renders.pop_front().expect("more than the bound");
            self.unsubscribe(oldest);
        }
    }

    /// Ends the first held render that `matches`.
    pub(super) fn let_go_of_render(&mut self, matches: impl Fn(&Sub) -> bool) {
        let found = (self.held_renders.iter()).position(|(_, id)| self.subs.get(id).is_some_and(&matches));
        if let Some((_, id)) = found.and_then(|i| self.held_renders.remove(i)) {
            self.unsubscribe(id);
        }
    }

    /// Ends the held renders whose time is up at `mono`.
    pub(super) fn let_go_of_old_renders(&mut self, mono: Millis) {
        while self.held_renders.front().is_some_and(|(until, _)| *until <= mono) {
            let (_, id) = self.held_renders.pop_front().expect("checked");
            self.unsubscribe(id);
        }
    }
}
