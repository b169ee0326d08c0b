//! The subscribers' side of the views: who looks at what ([`Sub`]), and the
//! frames each is sent — the difference between what it holds and its window
//! now, paced by its acknowledgements and the frame interval (one-off page
//! renders: [`super::render`]).

use super::*;

/// One subscriber's view and what it holds.
pub(super) struct Sub {
    pub(super) view_id: u32,
    pub(super) spec: ViewSpec,
    pub(super) index: IndexSpec,
    /// Frames sent; the last one acknowledged.
    pub(super) seq: u64,
    pub(super) acked: u64,
    /// Pacing times below are on the monotonic clock.
    pub(super) last_sent: Option<Millis>,
    /// The index generation and aggregates generation the last frame reflected.
    pub(super) index_gen: u64,
    pub(super) aggregates_gen: u64,
    pub(super) aggregates_sent_at: Option<Millis>,
    /// When the first change not yet sent happened (server clock).
    pub(super) dirty_since: Option<Millis>,
    /// Nothing is due before this (aggregates held back by their rate limit).
    pub(super) not_before: Millis,
    /// What the subscriber holds: names in window order, and each one's
    /// version in the same place (0: not sent, its meta was gone).
    pub(super) order: Vec<Arc<str>>,
    pub(super) versions: Vec<u64>,
    pub(super) total: u64,
    pub(super) offset: u64,
    /// Nothing sent yet on this connection.
    pub(super) fresh: bool,
    /// A page render's ([`Views::render`]): its one frame is taken by
    /// [`Views::render_sub`], never sent by [`Views::due_frames`].
    pub(super) one_off: bool,
    /// A list API page's cursor: the window starts after this key
    /// ([`window_of`]); `None` for every other subscriber.
    pub(super) after: Option<Key>,
    /// `Some` for a selection view: `index` is its sort key's shared order.
    pub(super) sel: Option<select::Selection>,
    /// `Some` for a top view ([`super::top`]): `index` is then the default
    /// view's (always there), and not read.
    pub(super) top: Option<top::TopSpec>,
}

/// What serves a subscriber: the index it holds, and its selection, top or
/// window by name if it has one ([`Views::attach_any`]).
type Serving = (
    IndexSpec,
    Option<select::Selection>,
    Option<top::TopSpec>,
    Option<names::NameWindow>,
);

impl Views {
    /// Adds a subscriber looking at `spec`; its first frame is due at once.
    pub fn subscribe(&mut self, view_id: u32, spec: ViewSpec, now: Now) -> SubId {
        self.subscribe_after(view_id, spec, None, now)
    }

    /// [`Views::subscribe`], the window starting after `after` (a list API cursor).
    pub(super) fn subscribe_after(&mut self, view_id: u32, spec: ViewSpec, after: Option<Key>, now: Now) -> SubId {
        let id = self.next_sub;
        self.next_sub += 1;
        // A cursor seeks a key in the view's own index.
        let (index, sel, top, names) = match after {
            None => self.attach_any(&spec),
            Some(_) => (self.attach(&spec), None, None, None),
        };
        if top.is_some() {
            self.top_taken_at = now.mono;
        }
        if let Some(w) = names {
            self.names.insert(id, w);
        }
        self.subs.insert(
            id,
            Sub {
                view_id,
                spec,
                index,
                seq: 0,
                acked: 0,
                last_sent: None,
                index_gen: 0,
                aggregates_gen: 0,
                aggregates_sent_at: None,
                dirty_since: Some(now.mono),
                not_before: 0,
                order: Vec::new(),
                versions: Vec::new(),
                total: 0,
                offset: 0,
                fresh: true,
                one_off: false,
                after,
                sel,
                top,
            },
        );
        // The page's socket has its render's order now.
        if self.subs[&id].after.is_none() {
            let spec = self.subs[&id].spec.clone();
            self.let_go_of_render(|s| s.spec == spec);
        }
        id
    }

    /// Points a subscriber at another view; what it holds stays, so the next frame
    /// carries only rows it does not have.
    pub fn set_view(&mut self, id: SubId, view_id: u32, spec: ViewSpec, now: Now) {
        let Some((old, old_sel)) = self.subs.get(&id).map(|s| (s.index.clone(), s.sel.is_some())) else {
            return;
        };
        let (index, sel, top, names) = self.attach_any(&spec);
        if top.is_some() {
            self.top_taken_at = now.mono;
        }
        // This socket has a held render's order now (see `subscribe_after`).
        self.let_go_of_render(|s| s.spec == spec);
        // Paging a window by name steps its cursor a page, not from an end.
        match (names, self.names.get_mut(&id)) {
            (Some(_), Some(w)) => w.touched = true,
            (Some(w), None) => drop(self.names.insert(id, w)),
            (None, _) => self.drop_name_window(id),
        }
        self.detach(&old);
        let sub = self.subs.get_mut(&id).expect("checked above");
        let old_filter = std::mem::replace(&mut sub.spec, spec).filter;
        sub.view_id = view_id;
        sub.index = index;
        sub.sel = sel;
        let old_top = std::mem::replace(&mut sub.top, top);
        if old_sel {
            self.uncount_filter(&old_filter);
        }
        if let Some(old_top) = old_top {
            self.detach_top(&old_top);
        }
        let sub = self.subs.get_mut(&id).expect("checked above");
        sub.index_gen = 0; // whatever the generation, the window must be rebuilt
        sub.dirty_since.get_or_insert(now.mono);
    }

    pub fn unsubscribe(&mut self, id: SubId) {
        if let Some(sub) = self.subs.remove(&id) {
            self.drop_name_window(id);
            self.detach(&sub.index);
            if sub.sel.is_some() {
                self.uncount_filter(&sub.spec.filter);
            }
            if let Some(top) = &sub.top {
                self.detach_top(top);
            }
        }
    }

    /// What serves `spec` (no cursor), one more user of it: a top near the top
    /// of a large fleet's order, else the table for an unfiltered view by name,
    /// else a selection over its key's shared order, else an index of its own;
    /// the index the subscriber holds.
    fn attach_any(&mut self, spec: &ViewSpec) -> Serving {
        if self.tops_serve(spec) {
            let top = self.attach_top(spec);
            return (self.attach(&ViewSpec::default()), None, Some(top), None);
        }
        if self.names_serve(spec) {
            // Its index is the default view's (always there), and not read.
            let window = self.name_window(spec);
            return (self.attach(&ViewSpec::default()), None, None, Some(window));
        }
        match self.select(spec) {
            Some(sel) => (self.attach(&Views::shared(spec)), Some(sel), None, None),
            None => (self.attach(spec), None, None, None),
        }
    }

    /// Whether `sub`'s window can be read now (its index built, its top filled).
    pub(super) fn sub_ready(&self, sub: &Sub) -> bool {
        self.index_ready(&sub.index) && sub.top.as_ref().is_none_or(|t| self.top_ready(t))
    }

    /// Records that the subscriber has applied every frame up to `seq`.
    pub fn ack(&mut self, id: SubId, seq: u64) {
        if let Some(sub) = self.subs.get_mut(&id) {
            sub.acked = sub.acked.max(seq.min(sub.seq));
        }
    }

    /// Frames sent to `id` and not yet acknowledged.
    pub fn in_flight(&self, id: SubId) -> u64 {
        self.subs.get(&id).map_or(0, |s| s.seq - s.acked)
    }

    pub fn subscribers(&self) -> usize {
        self.subs.len()
    }

    /// Notes, for every subscriber whose window or aggregates may have changed,
    /// since when it has had something unsent. Call after a batch of changes.
    pub fn mark_dirty(&mut self, state: &FleetState, now: Now) {
        self.mark(state, now, true);
    }

    /// [`Views::mark_dirty`], except that new, deeper or depleted tops that no
    /// existing order serves are left for the pass over the fleet of a later
    /// [`Views::mark_dirty`] ([`Views::pass_due_at`]): the frames of the views
    /// that need no pass go out first, not after it.
    pub fn mark_dirty_before_pass(&mut self, state: &FleetState, now: Now) {
        self.mark(state, now, false);
    }

    /// When (monotonic) the pass that tops wait for is due: once no subscriber
    /// took a top for [`PASS_QUIET_MS`], at most [`PASS_WAIT_MS`] after it was
    /// first owed; a pass under way goes on at once (`Some(0)`: a slice a
    /// turn); `None`: no top waits.
    pub fn pass_due_at(&self) -> Option<Millis> {
        if self.pass.run.is_some() {
            return Some(0);
        }
        let since = self.pass_owed?;
        Some((self.top_taken_at + PASS_QUIET_MS).min(since + PASS_WAIT_MS))
    }

    fn mark(&mut self, state: &FleetState, now: Now, pass: bool) {
        self.let_go_of_old_renders(now.mono);
        self.refresh_aggregates();
        // New, deeper or depleted tops: walked, or in one pass for all.
        let owed = self.fill_tops(state, pass);
        self.pass_owed = owed.then(|| self.pass_owed.unwrap_or(now.mono));
        for (id, sub) in self.subs.iter_mut() {
            let count = |f| self.filters.get(f).map_or(0, |c| c.count);
            let rows_changed = match &sub.sel {
                None if self.names.contains_key(id) => self.names[id].touched,
                None if sub.top.is_some() => {
                    let top = sub.top.as_ref().and_then(|t| self.tops.get(t));
                    top.map_or(0, |t| t.generation) != sub.index_gen || count(&sub.spec.filter) != sub.total
                }
                None => self.indexes.get(&sub.index).map_or(0, |i| i.generation) != sub.index_gen,
                // Its window, or its total.
                Some(sel) => sel.touched || self.filters.get(&sub.spec.filter).map_or(0, |c| c.count) != sub.total,
            };
            if rows_changed {
                // Rows may have changed: due now, even if aggregates owed
                // alone were being held back by their rate limit.
                sub.not_before = 0;
                sub.dirty_since.get_or_insert(now.mono);
            } else if self.aggregates_gen != sub.aggregates_gen {
                sub.dirty_since.get_or_insert(now.mono);
            }
        }
    }

    /// When (monotonic) the earliest subscriber may next be sent a frame (`None`: nobody has
    /// anything to send, or everybody with something has too many frames unacked).
    pub fn next_send(&self) -> Option<Millis> {
        self.subs
            .values()
            .filter(|s| self.sub_ready(s))
            .filter_map(Sub::ready_at)
            .min()
    }

    /// Builds the frames due at `now`: for each subscriber with unsent changes,
    /// fewer than [`MAX_IN_FLIGHT`] frames unacknowledged, and, while one is
    /// unacknowledged, none sent within [`MIN_FRAME_INTERVAL_MS`].
    pub fn due_frames(&mut self, state: &FleetState, now: Now) -> Vec<(SubId, WindowFrame)> {
        let due: Vec<SubId> = self
            .subs
            .iter()
            .filter(|(_, s)| s.ready_at().is_some_and(|at| at <= now.mono) && self.sub_ready(s))
            .map(|(id, _)| *id)
            .collect();
        let frames = due
            .into_iter()
            .filter_map(|id| self.frame(state, id, now).map(|f| (id, f)))
            .collect();
        self.demote_selections();
        frames
    }

    /// Recounts the published aggregates if anything they count changed; their
    /// generation moves only if they differ.
    fn refresh_aggregates(&mut self) {
        if std::mem::take(&mut self.aggregates_touched) {
            let fresh = self.aggregates();
            if fresh != self.published {
                self.published = fresh;
                self.aggregates_gen += 1;
            }
        }
    }

    /// The frame that brings subscriber `id` up to date, if anything changed for it.
    pub fn frame(&mut self, state: &FleetState, id: SubId, now: Now) -> Option<WindowFrame> {
        self.refresh_aggregates();
        let (wall, now) = (now.wall, now.mono);
        let aggregates_gen = self.aggregates_gen;
        let send_aggregates = {
            let sub = self.subs.get(&id)?;
            sub.aggregates_gen != aggregates_gen
                && sub.aggregates_sent_at.is_none_or(|at| now - at >= AGGREGATES_EVERY_MS)
        };
        let aggregates = send_aggregates.then(|| self.published.clone());
        let sub = self.subs.get_mut(&id)?;
        let index = self.indexes.get(&sub.index).filter(|i| i.unbuilt.is_none())?;
        let total = self.filters.get(&sub.spec.filter).map_or(0, |c| c.count);
        let (window, generation) = match (&sub.top, sub.sel.as_mut()) {
            _ if self.names.contains_key(&id) => {
                let w = self.names.get_mut(&id).expect("checked");
                (w.window(state, &sub.spec, &self.meta), index.generation)
            }
            (Some(top), _) => {
                let top = self.tops.get(top).filter(|t| !t.stale)?;
                (top.window(&sub.spec, total), top.generation)
            }
            (None, None) => (window_of(index, &sub.spec, sub.after.as_ref()), index.generation),
            (None, Some(sel)) => {
                let held = (!sub.fresh).then_some((sub.order.as_slice(), sub.offset));
                let window = sel.window(index, &sub.spec, total, &self.meta, held, self.scan_limit);
                (window, index.generation)
            }
        };
        let dirty_since = sub.dirty_since.take().unwrap_or(now);
        sub.index_gen = generation;
        if aggregates.is_some() {
            sub.aggregates_gen = aggregates_gen;
            sub.aggregates_sent_at = Some(now);
        } else if sub.aggregates_gen != aggregates_gen {
            // Held back by the rate limit: still owed, but not before it allows.
            sub.dirty_since = Some(dirty_since);
            sub.not_before = sub.aggregates_sent_at.unwrap_or(now) + AGGREGATES_EVERY_MS;
        }
        let order_changed = !same_names(&window.names, &sub.order);
        // Each row's version now (0: no meta), looked up once; what the
        // subscriber holds is read in place while the order stands, and by
        // name only when it moved.
        let versions: Vec<u64> = (window.names.iter())
            .map(|n| self.meta.get(n).map_or(0, |m| m.version))
            .collect();
        let held_by_name: Option<HashMap<&str, u64>> = (order_changed && !sub.order.is_empty()).then(|| {
            (sub.order.iter().map(|n| &**n))
                .zip(sub.versions.iter().copied())
                .collect()
        });
        let mut rows = Vec::new();
        for (i, (name, &version)) in window.names.iter().zip(&versions).enumerate() {
            let held = match &held_by_name {
                Some(held) => held.get(&**name).copied(),
                None => sub.versions.get(i).copied(),
            };
            if version != 0 && held != Some(version) {
                // Every indexed lock is in the table (both follow the same changes).
                let Some(entry) = state.get(name) else {
                    debug_assert!(false, "{name} is indexed but not in the table");
                    continue;
                };
                rows.push(WindowRow {
                    entry: entry.clone(),
                    holder: state.holder(entry),
                    deadlock: state.deadlocks().locks.contains(&**name),
                    waiters: state.waiters_of(name).map(str::to_string).collect(),
                });
            }
        }
        let moved = window.total != sub.total || window.offset != sub.offset;
        if !sub.fresh && !order_changed && rows.is_empty() && !moved && aggregates.is_none() {
            return None;
        }
        sub.versions = versions;
        let order = (order_changed || sub.fresh).then(|| window.names.iter().map(|n| n.to_string()).collect());
        sub.order = window.names;
        sub.total = window.total;
        sub.offset = window.offset;
        sub.seq += 1;
        sub.last_sent = Some(now);
        if sub.aggregates_gen == aggregates_gen {
            // Nothing owed is held back (aggregates held back keep their time).
            sub.not_before = 0;
        }
        let full = std::mem::take(&mut sub.fresh);
        Some(WindowFrame {
            seq: sub.seq,
            view_id: sub.view_id,
            server_time: wall,
            waited_ms: (now - dirty_since).max(0) as u64,
            full,
            total: window.total,
            offset: window.offset,
            order,
            rows,
            aggregates,
        })
    }

    /// The names of `spec`'s window, in order (for tests and recounts); `None`
    /// if nobody looks at it or its index is being built, and for a window by
    /// name read from the table (its subscriber's frames carry it).
    pub fn window_names(&self, spec: &ViewSpec) -> Option<(u64, u64, Vec<String>)> {
        let w = match self.indexes.get(&IndexSpec::of(spec)).filter(|i| i.unbuilt.is_none()) {
            Some(index) => window_of(index, spec, None),
            None => match self.top_names(spec) {
                Some(w) => w,
                None => self.selection_names(spec)?,
            },
        };
        Some((w.total, w.offset, w.names.iter().map(|n| n.to_string()).collect()))
    }
}

/// Whether two windows hold the same names in the same order: most names are
/// the same shared string, told by its address before its bytes.
fn same_names(a: &[Arc<str>], b: &[Arc<str>]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| Arc::ptr_eq(x, y) || x == y)
}

impl Sub {
    /// When this subscriber may be sent its next frame, if it has anything unsent
    /// and room for another frame in flight. Pacing is adaptive: a subscriber
    /// that has acknowledged every frame is idle and gets the change at once;
    /// only while a frame is unacknowledged are changes coalesced, into at most
    /// one frame per [`MIN_FRAME_INTERVAL_MS`] (and none past [`MAX_IN_FLIGHT`]).
    pub(super) fn ready_at(&self) -> Option<Millis> {
        if self.one_off {
            return None;
        }
        let since = self.dirty_since?;
        let in_flight = self.seq - self.acked;
        if in_flight >= MAX_IN_FLIGHT {
            return None;
        }
        let earliest = match (in_flight, self.last_sent) {
            (1.., Some(t)) => t + MIN_FRAME_INTERVAL_MS as i64,
            _ => since,
        };
        Some(since.max(earliest).max(self.not_before))
    }
}
