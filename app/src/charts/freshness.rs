//! How fresh the data on screen is, and what the page says about it. The
//! server's render is a snapshot; in the browser the page asks again every
//! [`ChartWindow::refresh_ms`](lockscope_model::charts::ChartWindow::refresh_ms)
//! and says, in words, when it last succeeded and why it is not live.

use lockscope_model::time::{hms, human_duration, Millis};

/// Past this many refresh intervals without new data the page is not live.
pub const STALE_AFTER_INTERVALS: i64 = 3;

/// What the browser knows of its last fetches.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Freshness {
    /// The browser's clock when the data on screen arrived (`None`: the
    /// server's render, before or without JavaScript).
    pub received_at: Option<Millis>,
    /// Why the last fetch failed (`None`: it succeeded, or none ran yet).
    pub error: Option<String>,
}

/// The state (`static`, `live`, `stale`) and its sentence. `updated` is the
/// data's own instant (the window's end, server clock); `now` the browser's.
pub fn status(updated: Millis, f: &Freshness, now: Millis, refresh_ms: i64) -> (&'static str, String) {
    let Some(at) = f.received_at else {
        return (
            "static",
            format!("data of {}; updating it needs JavaScript (or reload)", hms(updated)),
        );
    };
    let age = (now - at).max(0);
    let last = format!("{} ({} ago)", hms(updated), human_duration(age));
    match &f.error {
        Some(why) => ("stale", format!("not live: last update {last} — {why}")),
        None if age > STALE_AFTER_INTERVALS * refresh_ms => (
            "stale",
            format!(
                "not live: last update {last} — no answer for {} (asked every {})",
                human_duration(age),
                human_duration(refresh_ms)
            ),
        ),
        None => ("live", format!("updated {last}")),
    }
}
