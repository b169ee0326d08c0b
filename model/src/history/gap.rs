//! Where the history is incomplete. A [`Gap`] is a window whose events were
//! lost (the history's database refused them, its queue was full) or never
//! watched; it is recorded in the history itself as a [`Kind::Gap`] event once
//! writing works again, so a review long after still sees where the record has
//! a hole. [`NotRecording`] is the history failing now: the pages say so until
//! it recovers.

use serde::{Deserialize, Serialize};

use super::{Draft, HistoryEvent, Kind};
use crate::time::{absolute_and_relative, datetime, Millis};

/// A window of a fleet's history with events missing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gap {
    /// The window's first and last instants (unix ms, the recording server's clock).
    pub from: Millis,
    pub to: Millis,
    /// Events lost in it, when they were counted (`None`: not watched, so
    /// how many is unknown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost: Option<u64>,
    /// Why, in words (the database's error, a restart).
    pub why: String,
}

impl Gap {
    /// What the pages say: "3 events lost between … and …: why".
    pub fn text(&self) -> String {
        let window = format!("between {} and {}", datetime(self.from), datetime(self.to));
        match self.lost {
            Some(n) => format!("{n} event{} lost {window}: {}", plural(n), self.why),
            None => format!("events not recorded {window} (how many is unknown): {}", self.why),
        }
    }

    /// The gap as `fleet`'s history event, at the window's start (its id comes
    /// from its text, so recording it twice adds it once).
    pub fn event(&self, fleet: &str) -> HistoryEvent {
        let draft = Draft {
            kind: Some(Kind::Gap),
            detail: self.text(),
            record: Some(serde_json::to_string(self).expect("gaps serialise")),
            ..Draft::default()
        };
        HistoryEvent::new(fleet, self.from, draft)
    }

    /// The gap a `gap` event records (`None`: another kind, or a record this
    /// build cannot read).
    pub fn of(event: &HistoryEvent) -> Option<Gap> {
        (event.kind == Kind::Gap)
            .then(|| serde_json::from_str(event.record.as_deref()?).ok())
            .flatten()
    }

    /// Whether any of it lies in `from..=to`.
    pub fn overlaps(&self, from: Millis, to: Millis) -> bool {
        self.from <= to && self.to >= from
    }
}

/// The history's writer cannot write now: since when, and how many of the
/// fleet's events it has lost since.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NotRecording {
    pub since: Millis,
    pub lost: u64,
}

impl NotRecording {
    /// "history not recording since 2026-11-26 11:00:00 UTC (3m 07s ago) — 12 events lost".
    pub fn text(&self, now: Millis) -> String {
        format!(
            "history not recording since {} — {} event{} lost",
            absolute_and_relative(self.since, now),
            self.lost,
            plural(self.lost)
        )
    }
}

fn plural(n: u64) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gap_says_its_window_and_count_and_survives_the_history() {
        let gap = Gap {
            from: 1_795_407_613_000, // 2026-11-23T04:20:13Z
            to: 1_795_407_673_000,
            lost: Some(12),
            why: "the database refused writes".into(),
        };
        assert_eq!(
            gap.text(),
            "12 events lost between 2026-11-23 04:20:13 UTC and 2026-11-23 04:21:13 UTC: the database refused writes"
        );
        let e = gap.event("f");
        assert_eq!((e.kind, e.at, e.lock.as_deref()), (Kind::Gap, gap.from, None));
        assert_eq!(Gap::of(&e), Some(gap.clone()));
        assert_eq!(e.id, gap.event("f").id, "the same gap twice is one event");
        let unknown = Gap { lost: None, ..gap };
        assert!(unknown.text().contains("how many is unknown"), "{}", unknown.text());
        assert!(unknown.overlaps(unknown.to, unknown.to + 1) && !unknown.overlaps(0, unknown.from - 1));
    }

    #[test]
    fn not_recording_says_since_when_absolutely_and_relatively() {
        let n = NotRecording {
            since: 1_795_407_613_000,
            lost: 1,
        };
        assert_eq!(
            n.text(1_795_407_613_000 + 187_000),
            "history not recording since 2026-11-23 04:20:13 UTC (3m 07s ago) — 1 event lost"
        );
    }
}
