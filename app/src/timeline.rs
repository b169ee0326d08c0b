//! One lock's timeline on the history page: a horizontal time axis (in the
//! display zone, named at its left) over the query's range, a bar per
//! acquisition (acquired → its end, or the range's end if still held), the
//! waits as thin bars below, and labelled markers for force-releases,
//! auto-releases and blacklistings; a window where the fleet's history is
//! incomplete (a recorded gap) is a dashed band labelled "gap", its words in
//! its title.
//!
//! Hand-written SVG: no chart crate draws Gantt-style intervals (the contention
//! charts, which are series, will use one). [`lanes`] turns events into what is
//! drawn, as plain data tested natively; [`Timeline`] only places it. Every bar
//! and marker carries its meaning as text (a label, and a `<title>` a pointer or
//! a screen reader finds), never as colour alone.

use std::collections::HashMap;

use leptos::prelude::*;
use lockscope_model::history::{Gap, HistoryEvent, Kind};
use lockscope_model::time::{datetime, hms, human_duration, tick_label, zone_label, Millis};

use crate::rows::short;

/// Wait bars overlap when several sessions wait at once: each gets a row, up to this.
const MAX_WAIT_ROWS: usize = 6;

/// Ticks an axis draws at most, whatever its range (issue 23: a range up to
/// `i64::MAX` once made the tick loop wrap around and allocate without end).
pub const MAX_TICKS: usize = 8;

/// An interval: an acquisition or a wait.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Span {
    pub start: Millis,
    pub end: Millis,
    /// Its start is not among the events (before the range, or never seen).
    pub start_unseen: bool,
    /// Still going at the end of the range.
    pub still: bool,
    /// What ended it (an acquisition's end event).
    pub ended: Option<Kind>,
    pub fence: Option<i64>,
    pub session: Option<String>,
    pub owner: Option<String>,
    /// A wait's row (0 for acquisitions).
    pub row: usize,
}

impl Span {
    /// Short text on the bar: fence and session.
    pub fn label(&self) -> String {
        let session = self.session.as_deref().map(short).unwrap_or_default();
        match self.fence {
            Some(f) => format!("fence {f} · {session}"),
            None => session,
        }
    }

    /// The whole story, for the bar's title.
    pub fn title(&self, what: &str) -> String {
        let who = match (&self.session, &self.owner) {
            (Some(s), Some(o)) => format!("session {s} (owner {o})"),
            (Some(s), None) => format!("session {s}"),
            _ => "unknown holder".to_string(),
        };
        let fence = self.fence.map(|f| format!(", fence {f}")).unwrap_or_default();
        let since = if self.start_unseen { "since before " } else { "" };
        let end = match (self.still, self.ended) {
            (true, _) => "still at the end of the range".to_string(),
            (false, Some(k)) => k.as_str().to_string(),
            (false, None) => "end not recorded".to_string(),
        };
        format!(
            "{what} by {who}{fence}: {since}{} to {} ({}), {end}",
            hms(self.start),
            hms(self.end),
            human_duration(self.end.saturating_sub(self.start))
        )
    }
}

/// A moment worth a marker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mark {
    pub at: Millis,
    pub kind: Kind,
    pub title: String,
}

impl Mark {
    pub fn label(&self) -> &'static str {
        match self.kind {
            Kind::ForceReleased => "force-released",
            Kind::AutoReleased => "auto-released",
            Kind::Blacklisted => "blacklisted",
            k => k.as_str(),
        }
    }
}

/// What a timeline draws.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Lanes {
    pub holds: Vec<Span>,
    pub waits: Vec<Span>,
    pub wait_rows: usize,
    pub marks: Vec<Mark>,
}

/// The intervals and markers of one lock's `events` (oldest first) over `from..to`
/// (an end before the start is taken as the start). At most one hold, one
/// wait and one mark per event, and `MAX_WAIT_ROWS` wait rows: what it draws is
/// bounded by the events the history query returned (the page asks for at
/// most `MAX_HISTORY_ROWS` of the lock and as many blacklistings).
pub fn lanes(events: &[HistoryEvent], from: Millis, to: Millis) -> Lanes {
    let to = to.max(from);
    let mut out = Lanes::default();
    let mut open: Option<Span> = None;
    let mut last_end = from;
    let mut waiting: HashMap<String, Millis> = HashMap::new();
    let span = |e: &HistoryEvent, start: Millis, start_unseen: bool| Span {
        start,
        end: start,
        start_unseen,
        still: false,
        ended: None,
        fence: e.fence,
        session: e.session.clone(),
        owner: e.owner.clone(),
        row: 0,
    };
    let close = |mut s: Span, at: Millis, ended: Option<Kind>| {
        s.end = at;
        s.ended = ended;
        s
    };
    for e in events {
        let at = e.at.clamp(from, to);
        match e.kind {
            Kind::Acquired | Kind::Extended | Kind::Malformed => {
                if open.as_ref().is_some_and(|o| o.fence == e.fence) {
                    continue;
                }
                if let Some(o) = open.take() {
                    out.holds.push(close(o, at, None));
                    last_end = at;
                }
                open = Some(match e.kind {
                    Kind::Acquired => span(e, at, false),
                    _ => span(e, last_end, true),
                });
            }
            k if k.ends_hold() => {
                match open.take() {
                    Some(o) if o.fence == e.fence => out.holds.push(close(o, at, Some(k))),
                    other => {
                        if let Some(o) = other {
                            out.holds.push(close(o, at, None));
                        }
                        out.holds.push(close(span(e, last_end, true), at, Some(k)));
                    }
                }
                last_end = at;
                if matches!(k, Kind::ForceReleased | Kind::AutoReleased) {
                    out.marks.push(mark(e));
                }
            }
            Kind::Blacklisted => out.marks.push(mark(e)),
            Kind::WaitStarted => {
                if let Some(s) = &e.session {
                    waiting.entry(s.clone()).or_insert(at);
                }
            }
            Kind::WaitStopped => {
                let Some(s) = &e.session else { continue };
                let (start, unseen) = waiting.remove(s).map_or((from, true), |t| (t, false));
                let mut w = span(e, start, unseen);
                w.fence = None;
                out.waits.push(close(w, at, None));
            }
            _ => {}
        }
    }
    if let Some(mut o) = open {
        o.end = to;
        o.still = true;
        out.holds.push(o);
    }
    let mut still: Vec<_> = waiting.into_iter().collect();
    still.sort();
    for (session, start) in still {
        out.waits.push(Span {
            start,
            end: to,
            start_unseen: false,
            still: true,
            ended: None,
            fence: None,
            session: Some(session),
            owner: None,
            row: 0,
        });
    }
    out.waits.sort_by_key(|w| (w.start, w.end));
    // Each wait in the first row free by its start.
    let mut row_ends: Vec<Millis> = Vec::new();
    for w in &mut out.waits {
        w.row = match row_ends.iter().position(|end| *end <= w.start) {
            Some(r) => r,
            None if row_ends.len() < MAX_WAIT_ROWS => {
                row_ends.push(w.end);
                row_ends.len() - 1
            }
            None => MAX_WAIT_ROWS - 1,
        };
        row_ends[w.row] = row_ends[w.row].max(w.end);
    }
    out.wait_rows = row_ends.len();
    out
}

fn mark(e: &HistoryEvent) -> Mark {
    let by = e.actor.as_deref().map(|a| format!(" by {a}")).unwrap_or_default();
    let session = e
        .session
        .as_deref()
        .map(|s| format!(" (session {s})"))
        .unwrap_or_default();
    let why = if e.detail.is_empty() {
        String::new()
    } else {
        format!(": {}", e.detail)
    };
    Mark {
        at: e.at,
        kind: e.kind,
        title: format!("{} at {}{by}{session}{why}", e.kind.as_str(), datetime(e.at)),
    }
}

/// Axis ticks over `from..to`: about six, on round UTC instants, at most
/// [`MAX_TICKS`], and the step between them. Any two instants (computed in
/// `i128`: no `i64` overflows, whatever the range; an empty one is a point).
pub fn ticks(from: Millis, to: Millis) -> (Vec<Millis>, i64) {
    const STEPS: [i64; 16] = [
        1_000,
        5_000,
        10_000,
        30_000,
        60_000,
        300_000,
        600_000,
        900_000,
        1_800_000,
        3_600_000,
        10_800_000,
        21_600_000,
        43_200_000,
        86_400_000,
        604_800_000,
        2_592_000_000,
    ];
    const DAY: i128 = 86_400_000;
    let (from, to) = (from as i128, (to as i128).max(from as i128));
    let span = (to - from).max(1);
    // Past the longest step, whole days, as few as keep the ticks under eight.
    let step = STEPS
        .into_iter()
        .map(i128::from)
        .find(|s| span / s <= 7)
        .unwrap_or_else(|| (span + 6) / 7 / DAY * DAY + DAY);
    let first = from.div_euclid(step) * step + if from.rem_euclid(step) == 0 { 0 } else { step };
    let ticks = (0..MAX_TICKS as i128)
        .map(|i| first + i * step)
        .take_while(|t| *t <= to)
        // In `from..=to`, so an `i64`.
        .map(|t| t as Millis)
        .collect();
    (ticks, i64::try_from(step).unwrap_or(i64::MAX))
}

// Geometry, in the SVG's own units (it scales to the page's width).
const W: f64 = 1000.0;
const LEFT: f64 = 62.0;
const RIGHT: f64 = 12.0;
const HOLD_Y: f64 = 30.0;
const HOLD_H: f64 = 24.0;
const WAIT_Y: f64 = 66.0;
const WAIT_ROW: f64 = 10.0;
const WAIT_H: f64 = 6.0;
/// Width of one character of the bar labels (12px sans-serif), to tell whether a label fits.
const CHAR_W: f64 = 6.6;

fn px(v: f64) -> String {
    format!("{v:.1}")
}

/// The timeline of `lock` from `events` over `from..to`, with the fleet's
/// history `gaps` in it.
#[component]
pub fn Timeline(
    lock: String,
    events: Vec<HistoryEvent>,
    from: Millis,
    to: Millis,
    #[prop(optional)] gaps: Vec<Gap>,
) -> impl IntoView {
    let to = to.max(from.saturating_add(1));
    let lanes = lanes(&events, from, to);
    // In f64: a span of any two instants, no `i64` overflow.
    let x = move |t: Millis| {
        LEFT + (t.clamp(from, to) as f64 - from as f64) / (to as f64 - from as f64).max(1.0) * (W - LEFT - RIGHT)
    };
    let marks_y = WAIT_Y + lanes.wait_rows.max(1) as f64 * WAIT_ROW + 10.0;
    let height = marks_y + 2.0 * 14.0 + 6.0;
    let (ticks, step) = ticks(from, to);
    // The ticks' zone, beside them ("UTC+1→UTC+2" over a daylight-saving change).
    let zone = match (zone_label(from), zone_label(to)) {
        (a, b) if a == b => a,
        (a, b) => format!("{a}→{b}"),
    };
    let axis = ticks
        .into_iter()
        .map(|t| {
            view! {
                <line class="tick" x1=px(x(t)) x2=px(x(t)) y1="18" y2=px(height - 4.0)/>
                <text class="tick-label" x=px(x(t)) y="12" text-anchor="middle">{tick_label(t, step)}</text>
            }
        })
        .collect_view();
    let holds = lanes
        .holds
        .iter()
        .map(|s| {
            let (x0, x1) = (x(s.start), x(s.end));
            let width = (x1 - x0).max(2.0);
            let label = s.label();
            let fits = (label.chars().count() as f64) * CHAR_W + 8.0 <= width;
            let ended = s.ended.map_or(if s.still { "held" } else { "unknown" }, Kind::as_str);
            view! {
                <g class="hold" data-testid="timeline-hold" data-ended=ended>
                    <title>{s.title("held")}</title>
                    <rect x=px(x0) y=px(HOLD_Y) width=px(width) height=px(HOLD_H) rx="2"/>
                    {fits.then(|| view! { <text x=px(x0 + 4.0) y=px(HOLD_Y + 16.0)>{label}</text> })}
                </g>
            }
        })
        .collect_view();
    let waits = lanes
        .waits
        .iter()
        .map(|w| {
            let (x0, x1) = (x(w.start), x(w.end));
            let y = WAIT_Y + w.row as f64 * WAIT_ROW;
            view! {
                <g class="wait" data-testid="timeline-wait">
                    <title>{w.title("waited")}</title>
                    <rect x=px(x0) y=px(y) width=px((x1 - x0).max(2.0)) height=px(WAIT_H)/>
                </g>
            }
        })
        .collect_view();
    let marks = lanes
        .marks
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let mx = x(m.at);
            // Labels alternate between two lines, and turn left near the right edge.
            let ly = marks_y + 10.0 + (i % 2) as f64 * 14.0;
            let anchor = if mx > W - 140.0 { "end" } else { "start" };
            view! {
                <g class="mark" data-testid="timeline-mark" data-kind=m.kind.as_str()>
                    <title>{m.title.clone()}</title>
                    <line x1=px(mx) x2=px(mx) y1=px(HOLD_Y - 4.0) y2=px(ly - 9.0)/>
                    <path d=format!("M{} {}l-4 -7h8z", px(mx), px(HOLD_Y - 2.0))/>
                    <text x=px(mx) y=px(ly) text-anchor=anchor>{m.label()}</text>
                </g>
            }
        })
        .collect_view();
    // Behind the bars: the record is incomplete there, whatever they show.
    let gap_bands = gaps
        .iter()
        .filter(|g| g.overlaps(from, to))
        .map(|g| {
            let (x0, x1) = (x(g.from), x(g.to));
            view! {
                <g class="gap" data-testid="timeline-gap">
                    <title>{format!("history incomplete: {}", g.text())}</title>
                    <rect x=px(x0) y="18" width=px((x1 - x0).max(2.0)) height=px(height - 22.0)/>
                    <text x=px(x0 + 2.0) y=px(height - 6.0)>"gap"</text>
                </g>
            }
        })
        .collect_view();
    let gap_count = gaps.iter().filter(|g| g.overlaps(from, to)).count();
    let summary = format!(
        "Timeline of {lock} from {} to {}: {} acquisitions, {} waits, {} markers{}",
        datetime(from),
        datetime(to),
        lanes.holds.len(),
        lanes.waits.len(),
        lanes.marks.len(),
        match gap_count {
            0 => String::new(),
            n => format!(", {n} gap{} in the history", if n == 1 { "" } else { "s" }),
        }
    );
    let label = summary.clone();
    // It scrolls sideways on a narrow screen: a stop for the keyboard's arrows.
    view! {
        <div class="wide" tabindex="0" role="region" aria-label="timeline (scrolls sideways)">
            <svg class="timeline" data-testid="timeline" viewBox=format!("0 0 {W} {}", px(height))
                role="img" aria-label=label preserveAspectRatio="xMinYMin meet">
                <title>{summary}</title>
                {axis}
                {gap_bands}
                <text class="lane" x="0" y="12" data-testid="timeline-zone">{zone}</text>
                <text class="lane" x="0" y=px(HOLD_Y + 16.0)>"held"</text>
                <text class="lane" x="0" y=px(WAIT_Y + 6.0)>"waits"</text>
                <text class="lane" x="0" y=px(marks_y + 10.0)>"events"</text>
                {holds}
                {waits}
                {marks}
            </svg>
        </div>
    }
}

#[cfg(test)]
mod tests;
