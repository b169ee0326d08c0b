//! Views: what one browser looks at, and the window of rows it holds.
//!
//! A fleet may hold a million locks; a browser never receives them all. It asks
//! for a [`ViewSpec`] (filter, sort, a window of rows) and the server sends that
//! window as [`WindowFrame`]s, each carrying the *current* state of whatever
//! changed in the window since the previous frame (coalesced: never a backlog),
//! plus the fleet's [`Aggregates`]. The browser applies frames with
//! [`Window::apply`]; the server keeps, per subscriber, the names and row
//! versions it sent, so every frame is the difference between that record and
//! the window as it stands.
//!
//! Ordering is pure and lives here too ([`sort_key`], [`RowState`]), so the hub's
//! index and any test that recounts agree by construction.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::fleet::{Counts, LockEntry};
use crate::session::Holder;
use crate::time::Millis;

/// Most rows a window may hold.
pub const MAX_WINDOW: u32 = 500;
/// Rows in a window when the client does not say: the page's first window,
/// which its document carries twice (rows, and the data they hydrate from).
/// About a screen and a half of rows (36 px each): every row more is parsed,
/// laid out and hydrated before the page can go live (docs/performance.md:
/// navigation → live 338 ms median at 40 rows against 529 at 100). Once live,
/// the page asks for the window its scroller needs ([`MAX_WINDOW`] at most).
pub const DEFAULT_WINDOW: u32 = 40;
/// Services listed in [`Aggregates::services`] (the largest first).
pub const TOP_SERVICES: usize = 20;

/// What a view orders by. Each key has the order an on-call engineer wants
/// first; [`Sort::reverse`] flips it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SortKey {
    /// Most urgent state first, then oldest first: stuck locks on top, and short
    /// healthy holds coming and going only ever touch the bottom of the table.
    #[default]
    Severity,
    Name,
    /// Oldest first.
    Age,
    /// Soonest `auto_unlock_at` first.
    Expiry,
    /// Most waiters first.
    Waiters,
    /// Highest fencing token first.
    Fence,
}

impl SortKey {
    pub const ALL: [SortKey; 6] = [
        SortKey::Severity,
        SortKey::Name,
        SortKey::Age,
        SortKey::Expiry,
        SortKey::Waiters,
        SortKey::Fence,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SortKey::Severity => "severity",
            SortKey::Name => "name",
            SortKey::Age => "age",
            SortKey::Expiry => "expiry",
            SortKey::Waiters => "waiters",
            SortKey::Fence => "fence",
        }
    }

    pub fn parse(s: &str) -> Option<SortKey> {
        SortKey::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Sort {
    pub key: SortKey,
    #[serde(default)]
    pub reverse: bool,
}

/// The position of a lock in a view's order: ascending `(a, b, name)`. A reversed
/// view reads the same order from the end.
pub type SortPos = (i64, i64);

/// What a lock's position depends on, besides its name, state and waiters: kept
/// by the hub per lock so that it can find the lock's old place in an order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SortFields {
    /// `None` for a malformed or foreign entry, which has no times (a foreign
    /// row's write time is not when the lock was acquired).
    pub acquired_at: Option<Millis>,
    pub auto_unlock_at: Option<Millis>,
    pub fence: i64,
}

impl SortFields {
    pub fn of(entry: &LockEntry) -> SortFields {
        let rec = entry.record();
        SortFields {
            acquired_at: rec.map(|r| r.acquired_at),
            auto_unlock_at: rec.map(|r| r.auto_unlock_at),
            fence: entry.fence,
        }
    }
}

impl SortKey {
    /// Whether [`sort_key`] reads the lock's state or waiters under this key;
    /// under the others it reads the lock's [`SortFields`] alone, which its
    /// entry gives.
    pub fn reads_state_or_waiters(self) -> bool {
        matches!(self, SortKey::Severity | SortKey::Waiters)
    }
}

/// `(a, b)` of a lock under `key`; the name breaks ties. Malformed and foreign
/// entries, which have no times, sort after every record on time keys.
pub fn sort_key(key: SortKey, f: &SortFields, state: RowState, waiters: u32) -> SortPos {
    match key {
        SortKey::Severity => (state as i64, f.acquired_at.unwrap_or(i64::MAX)),
        SortKey::Name => (0, 0),
        SortKey::Age => (f.acquired_at.unwrap_or(i64::MAX), 0),
        SortKey::Expiry => (f.auto_unlock_at.unwrap_or(i64::MAX), 0),
        SortKey::Waiters => (-(waiters as i64), 0),
        SortKey::Fence => (-f.fence, 0),
    }
}

/// Which locks a view shows. Every field narrows; `None`/empty means any.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Filter {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<RowState>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Lock names starting with this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// Lock names containing this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contains: Option<String>,
}

/// Longest filter text accepted.
pub const MAX_FILTER_TEXT: usize = 512;

impl Filter {
    pub fn matches(&self, entry: &LockEntry, state: RowState) -> bool {
        let rec = entry.record();
        self.matches_parts(&entry.name, state, rec.map(|r| &*r.service), rec.map(|r| &*r.host))
    }

    /// [`Filter::matches`] on the parts it reads (`service` and `host` are `None`
    /// for a malformed entry, which has neither), for callers that keep those
    /// parts apart from the entry.
    pub fn matches_parts(&self, name: &str, state: RowState, service: Option<&str>, host: Option<&str>) -> bool {
        if self.state.is_some_and(|s| s != state) {
            return false;
        }
        if self.prefix.as_deref().is_some_and(|p| !name.starts_with(p)) {
            return false;
        }
        if self.contains.as_deref().is_some_and(|c| !name.contains(c)) {
            return false;
        }
        // Malformed entries have no service or host to match.
        self.service.as_deref().is_none_or(|s| service == Some(s))
            && self.host.as_deref().is_none_or(|h| host == Some(h))
    }

    /// Empty strings mean "any"; over-long text is refused with a reason.
    pub fn normalized(mut self) -> Result<Filter, String> {
        for (what, field) in [
            ("service", &mut self.service),
            ("host", &mut self.host),
            ("prefix", &mut self.prefix),
            ("contains", &mut self.contains),
        ] {
            if field.as_deref() == Some("") {
                *field = None;
            }
            if field.as_ref().is_some_and(|f| f.len() > MAX_FILTER_TEXT) {
                return Err(format!("{what} filter longer than {MAX_FILTER_TEXT} bytes"));
            }
        }
        Ok(self)
    }

    pub fn is_empty(&self) -> bool {
        *self == Filter::default()
    }
}

/// One browser's view: which rows, in which order, and which of them.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ViewSpec {
    #[serde(default)]
    pub filter: Filter,
    #[serde(default)]
    pub sort: Sort,
    /// First row of the window, counted in view order.
    #[serde(default)]
    pub offset: u64,
    #[serde(default = "default_limit")]
    pub limit: u32,
}

fn default_limit() -> u32 {
    DEFAULT_WINDOW
}

impl Default for ViewSpec {
    fn default() -> Self {
        ViewSpec {
            filter: Filter::default(),
            sort: Sort::default(),
            offset: 0,
            limit: DEFAULT_WINDOW,
        }
    }
}

impl ViewSpec {
    /// The spec as the server will serve it, or why it cannot.
    pub fn normalized(self) -> Result<ViewSpec, String> {
        if self.limit == 0 || self.limit > MAX_WINDOW {
            return Err(format!("window of {} rows: ask for 1 to {MAX_WINDOW}", self.limit));
        }
        Ok(ViewSpec {
            filter: self.filter.normalized()?,
            ..self
        })
    }

    /// Reads the view from URL query pairs (`state`, `service`, `host`, `prefix`,
    /// `q`, `sort`, `rev`, `offset`, `limit`); unknown keys are ignored, bad values
    /// are an error naming the key.
    pub fn from_query<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<ViewSpec, String> {
        let mut v = ViewSpec::default();
        for (k, val) in pairs {
            let text = || (!val.is_empty()).then(|| val.to_string());
            match k {
                "state" if val.is_empty() => {}
                "state" => v.filter.state = Some(RowState::parse(val).ok_or(format!("state={val}: not a state"))?),
                "service" => v.filter.service = text(),
                "host" => v.filter.host = text(),
                "prefix" => v.filter.prefix = text(),
                "q" => v.filter.contains = text(),
                "sort" if val.is_empty() => {}
                "sort" => v.sort.key = SortKey::parse(val).ok_or(format!("sort={val}: not a sort key"))?,
                "rev" => v.sort.reverse = matches!(val, "1" | "true"),
                "offset" if val.is_empty() => {}
                "offset" => v.offset = val.parse().map_err(|_| format!("offset={val}: not a row number"))?,
                "limit" if val.is_empty() => {}
                "limit" => v.limit = val.parse().map_err(|_| format!("limit={val}: not a number"))?,
                _ => {}
            }
        }
        v.normalized()
    }

    /// The URL query for this view (defaults left out), without `fleet`.
    pub fn to_query(&self) -> Vec<(&'static str, String)> {
        let mut q = Vec::new();
        let f = &self.filter;
        if let Some(s) = f.state {
            q.push(("state", s.as_str().to_string()));
        }
        for (k, v) in [
            ("service", &f.service),
            ("host", &f.host),
            ("prefix", &f.prefix),
            ("q", &f.contains),
        ] {
            if let Some(v) = v {
                q.push((k, v.clone()));
            }
        }
        if self.sort.key != SortKey::Severity {
            q.push(("sort", self.sort.key.as_str().to_string()));
        }
        if self.sort.reverse {
            q.push(("rev", "1".to_string()));
        }
        if self.offset > 0 {
            q.push(("offset", self.offset.to_string()));
        }
        if self.limit != DEFAULT_WINDOW {
            q.push(("limit", self.limit.to_string()));
        }
        q
    }
}

/// A lock as a window shows it: the entry, what is known of its holder, and
/// who waits for it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WindowRow {
    pub entry: LockEntry,
    #[serde(default)]
    pub holder: Holder,
    /// On a wait-for cycle: its holder waits, through others, for its waiters.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deadlock: bool,
    /// Sessions waiting for this lock, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waiters: Vec<String>,
}

impl WindowRow {
    /// The row's state at `now`.
    pub fn state(&self, now: Millis) -> RowState {
        RowState::of(&self.entry, self.holder, now)
    }
}

/// A fleet's headline numbers: per state, per service.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Aggregates {
    #[serde(flatten)]
    pub counts: Counts,
    /// Locks per service, largest first (then by name), at most [`TOP_SERVICES`].
    #[serde(default)]
    pub services: Vec<(String, u64)>,
    /// Distinct services holding locks (may exceed `services.len()`).
    #[serde(default)]
    pub service_count: u64,
}

impl Aggregates {
    pub fn healthy(&self) -> u64 {
        self.counts.of(RowState::Healthy)
    }

    pub fn count(&self, state: RowState) -> u64 {
        self.counts.of(state)
    }

    /// Rows needing someone's attention.
    pub fn attention(&self) -> u64 {
        self.counts.attention()
    }
}

/// One update of a subscriber's window. Absent means unchanged.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowFrame {
    /// Numbers this subscriber's frames (1, 2, …); the browser acknowledges it.
    pub seq: u64,
    /// The [`ClientMsg::View`](crate::wire::ClientMsg) request this frame answers.
    pub view_id: u32,
    pub server_time: Millis,
    /// How long the oldest change this frame carries waited on the server before
    /// it was sent (held back for a slow reader, or by the frame interval).
    pub waited_ms: u64,
    /// The receiver starts from nothing (a new connection): drop every row held.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub full: bool,
    /// Rows matching the view's filter (the height of the scrollbar).
    pub total: u64,
    /// Position of the window's first row in view order (clamped to `total`).
    pub offset: u64,
    /// Names in window order, when the order or membership changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order: Option<Vec<String>>,
    /// Rows new to the window or changed since the previous frame.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rows: Vec<WindowRow>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggregates: Option<Aggregates>,
}

/// What a frame changed, for the renderer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WindowChanges {
    /// The order (or membership) changed.
    pub order: bool,
    /// Rows whose content changed and stay in the window.
    pub rows: Vec<String>,
    /// Rows that left the window.
    pub dropped: Vec<String>,
    pub aggregates: bool,
}

/// The rows one subscriber holds, in window order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Window {
    pub view_id: u32,
    pub seq: u64,
    pub total: u64,
    pub offset: u64,
    order: Vec<String>,
    rows: HashMap<String, WindowRow>,
    aggregates: Aggregates,
}

impl Window {
    /// Applies a frame. A frame that leaves a row in the order without its data
    /// is an error (the sender's record of this window is not ours).
    pub fn apply(&mut self, frame: WindowFrame) -> Result<WindowChanges, String> {
        let mut ch = WindowChanges::default();
        if frame.full {
            ch.dropped = self.rows.keys().cloned().collect();
            self.rows.clear();
            self.order.clear();
            ch.order = true;
        }
        self.seq = frame.seq;
        self.view_id = frame.view_id;
        self.total = frame.total;
        self.offset = frame.offset;
        if let Some(order) = frame.order {
            if order != self.order {
                ch.order = true;
                let keep: std::collections::HashSet<&str> = order.iter().map(String::as_str).collect();
                let gone: Vec<String> = self
                    .rows
                    .keys()
                    .filter(|n| !keep.contains(n.as_str()))
                    .cloned()
                    .collect();
                for n in gone {
                    self.rows.remove(&n);
                    ch.dropped.push(n);
                }
                self.order = order;
            }
        }
        for row in frame.rows {
            ch.rows.push(row.entry.name.clone());
            self.rows.insert(row.entry.name.clone(), row);
        }
        if let Some(missing) = self.order.iter().find(|n| !self.rows.contains_key(*n)) {
            return Err(format!("frame {} left row {missing:?} without data", frame.seq));
        }
        if self.rows.len() != self.order.len() {
            return Err(format!("frame {} sent rows outside the window", frame.seq));
        }
        if let Some(a) = frame.aggregates {
            ch.aggregates = a != self.aggregates;
            self.aggregates = a;
        }
        ch.dropped.sort();
        ch.dropped.dedup();
        ch.dropped.retain(|n| !self.rows.contains_key(n));
        Ok(ch)
    }

    /// Names in window order.
    pub fn order(&self) -> &[String] {
        &self.order
    }

    pub fn row(&self, name: &str) -> Option<&WindowRow> {
        self.rows.get(name)
    }

    /// Rows in window order.
    pub fn rows(&self) -> impl Iterator<Item = &WindowRow> {
        self.order.iter().filter_map(|n| self.rows.get(n))
    }

    pub fn aggregates(&self) -> &Aggregates {
        &self.aggregates
    }

    pub fn len(&self) -> usize {
        self.order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }
}

pub use crate::fleet::RowState;

#[cfg(test)]
mod tests;
