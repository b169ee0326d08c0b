//! The incident-review page's data (`/history`): a query of the lock history
//! ([`crate::history`]) as the server ran it, the filter as the person typed it,
//! and, when the URL names an instant, the lock table at that instant (time
//! travel) with what changed since the start of the range ([`diff_tables`]).
//! Not live: [`Review::read_at`] says when it was read.

use serde::{Deserialize, Serialize};

use crate::fleet::{LockBody, LockEntry};
use crate::history::{Gap, HistoryEvent, HistoryQuery, NotRecording, TableAt};
use crate::time::Millis;
use crate::view::WindowFrame;

/// The range a review covers when the URL names no `from`.
pub const DEFAULT_FROM: &str = "-1h";

/// Locks each list of a [`TableDiff`] names at most (the counts are whole).
pub const DIFF_ROWS: usize = 200;

/// The filter as typed (empty: unset), so the form shows `-15m` rather than the
/// instant it meant when the page was read.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReviewForm {
    pub from: String,
    pub to: String,
    pub lock: String,
    pub session: String,
    pub service: String,
    pub actor: String,
    /// One kind, or several separated by commas.
    pub kind: String,
    pub limit: String,
    /// The instant of the time-travel table.
    pub at: String,
}

impl ReviewForm {
    /// From the URL's query pairs; `from` defaults to [`DEFAULT_FROM`].
    pub fn from_query<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> ReviewForm {
        let mut f = ReviewForm::default();
        for (k, v) in pairs {
            let v = v.trim().to_string();
            match k {
                "from" => f.from = v,
                "to" => f.to = v,
                "lock" => f.lock = v,
                "session" => f.session = v,
                "service" => f.service = v,
                "actor" => f.actor = v,
                "kind" => f.kind = v,
                "limit" => f.limit = v,
                "at" => f.at = v,
                _ => {}
            }
        }
        if f.from.is_empty() {
            f.from = DEFAULT_FROM.into();
        }
        f
    }

    /// The history query's pairs (everything but `at`).
    pub fn query_pairs(&self) -> Vec<(&'static str, &str)> {
        [
            ("from", &self.from),
            ("to", &self.to),
            ("lock", &self.lock),
            ("session", &self.session),
            ("service", &self.service),
            ("actor", &self.actor),
            ("kind", &self.kind),
            ("limit", &self.limit),
        ]
        .into_iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| (k, v.as_str()))
        .collect()
    }
}

/// What `/history` shows.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Review {
    pub form: ReviewForm,
    /// The query that ran: its times resolved against [`Review::read_at`].
    pub query: HistoryQuery,
    /// Why the URL's filter could not be used (the defaults ran instead).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The matching events, oldest first, at most the query's limit; without
    /// their `record` (the exports carry it).
    pub events: Vec<HistoryEvent>,
    /// When the filter names one lock exactly: every event of that lock in the
    /// range whatever the other filters, plus the blacklisting of its sessions
    /// (the timeline's input), oldest first, without records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline: Option<Vec<HistoryEvent>>,
    /// The table at `?at=`, when the URL names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub travel: Option<Travel>,
    /// When the server ran the query (its clock).
    pub read_at: Millis,
    /// Events this server could not write to the history (the page says so:
    /// the history has gaps).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost: Option<Loss>,
    /// The history is failing to write now (the page says so, with the
    /// fleet's events lost since, until it recovers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_recording: Option<NotRecording>,
    /// The windows in the range where the history is incomplete, as its `gap`
    /// events record them, oldest first (the page names each).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gaps: Vec<Gap>,
}

/// Events the history's writer lost since this server started: `events` of
/// them, the first at `since`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Loss {
    pub events: u64,
    pub since: Millis,
}

impl Loss {
    /// What the review page says.
    pub fn text(&self) -> String {
        let s = if self.events == 1 { "" } else { "s" };
        format!(
            "{} event{s} could not be written to the history since {} (its queue was full or the database failed): the history has gaps.",
            self.events,
            crate::time::rfc3339(self.since)
        )
    }
}

impl Review {
    /// The range the page covers: the query's, an open end being `read_at` and
    /// an open start an hour before the end. Whatever the query and the clock
    /// hold (a query is parsed within [`crate::time::EARLIEST`]`..=`[`crate::time::LATEST`],
    /// but a review is also deserialised), never overflows: `from <= to`.
    pub fn range(&self) -> (Millis, Millis) {
        let to = self.query.to.unwrap_or(self.read_at);
        let from = self.query.from.unwrap_or_else(|| to.saturating_sub(3_600_000)).min(to);
        (from, to)
    }

    /// The lock the filter names exactly (not a prefix), if it does.
    pub fn exact_lock(&self) -> Option<&str> {
        match self.query.lock_filter() {
            Some((name, false)) => Some(name),
            _ => None,
        }
    }
}

/// The lock table at an instant, rebuilt from history.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Travel {
    pub at: Millis,
    /// The table as the live page's first frame, its clock at `at` (`None`:
    /// see `error`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frame: Option<WindowFrame>,
    /// The checkpoint the table started from (`None`: the start of history).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<Millis>,
    /// Events replayed after the checkpoint.
    pub replayed: u64,
    /// Why there is no table (before the history kept, no history read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What changed between the start of the range and `at`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff: Option<TableDiff>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff_error: Option<String>,
}

/// One lock's holding as a diff shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holding {
    pub fence: i64,
    /// `service@host:pid`, or that the record could not be read, or that a
    /// foreign schema does not say.
    pub holder: String,
    pub session: String,
}

impl Holding {
    fn of(e: &LockEntry) -> Holding {
        match &e.body {
            LockBody::Held(r) => Holding {
                fence: e.fence,
                holder: r.holder(),
                session: r.session.to_string(),
            },
            LockBody::Malformed { .. } => Holding {
                fence: e.fence,
                holder: "unreadable record".into(),
                session: String::new(),
            },
            LockBody::Foreign { session, .. } => Holding {
                fence: e.fence,
                holder: "unknown (foreign schema)".into(),
                session: session.clone().unwrap_or_default(),
            },
        }
    }
}

/// A lock in a diff: held before, after, or both (by another acquisition).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiffRow {
    pub lock: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<Holding>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<Holding>,
}

/// What changed between two tables of one fleet: locks taken (held at `at`
/// only), released (held at `from` only) and changed hands (held at both, by
/// other acquisitions: another fence). A lock extended meanwhile is unchanged.
/// Each list names at most [`DIFF_ROWS`] locks, by name; the totals are whole.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableDiff {
    pub from: Millis,
    pub at: Millis,
    pub taken: Vec<DiffRow>,
    pub released: Vec<DiffRow>,
    pub changed: Vec<DiffRow>,
    pub taken_total: u64,
    pub released_total: u64,
    pub changed_total: u64,
}

/// The difference from `before` to `after` (see [`TableDiff`]).
pub fn diff_tables(before: &TableAt, after: &TableAt) -> TableDiff {
    use std::collections::BTreeMap;
    let old: BTreeMap<&str, &LockEntry> = before.locks.iter().map(|e| (e.name.as_str(), e)).collect();
    let new: BTreeMap<&str, &LockEntry> = after.locks.iter().map(|e| (e.name.as_str(), e)).collect();
    let mut d = TableDiff {
        from: before.at,
        at: after.at,
        ..TableDiff::default()
    };
    let push = |list: &mut Vec<DiffRow>, total: &mut u64, row: DiffRow| {
        *total += 1;
        if list.len() < DIFF_ROWS {
            list.push(row);
        }
    };
    for (name, a) in &new {
        let row = |before: Option<&LockEntry>| DiffRow {
            lock: name.to_string(),
            before: before.map(Holding::of),
            after: Some(Holding::of(a)),
        };
        match old.get(name) {
            None => push(&mut d.taken, &mut d.taken_total, row(None)),
            Some(b) if b.fence != a.fence => push(&mut d.changed, &mut d.changed_total, row(Some(b))),
            Some(_) => {}
        }
    }
    for (name, b) in old.iter().filter(|(n, _)| !new.contains_key(*n)) {
        let row = DiffRow {
            lock: name.to_string(),
            before: Some(Holding::of(b)),
            after: None,
        };
        push(&mut d.released, &mut d.released_total, row);
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, fence: i64, revision: i64) -> LockEntry {
        let rec = format!(
            r#"{{"v":1,"owner":"o{fence}","session":"s{fence}","service":"svc","host":"h","pid":{fence},
            "acquired_at":0,"expected_runtime_ms":1,"alert_at":1,"auto_unlock_at":2,"heartbeat_at":0}}"#
        );
        LockEntry::from_stored(name.into(), fence, revision, rec.as_bytes())
    }

    fn table(at: Millis, locks: Vec<LockEntry>) -> TableAt {
        TableAt {
            at,
            locks,
            ..TableAt::default()
        }
    }

    #[test]
    fn a_diff_names_taken_released_and_changed_hands_but_not_extended() {
        let before = table(10, vec![entry("a", 1, 1), entry("b", 2, 2), entry("c", 3, 3)]);
        let after = table(20, vec![entry("b", 2, 9), entry("c", 5, 5), entry("d", 6, 6)]);
        let d = diff_tables(&before, &after);
        assert_eq!((d.from, d.at), (10, 20));
        let names = |rows: &[DiffRow]| rows.iter().map(|r| r.lock.clone()).collect::<Vec<_>>();
        assert_eq!(names(&d.taken), ["d"]);
        assert_eq!(names(&d.released), ["a"]);
        assert_eq!(names(&d.changed), ["c"], "b was only extended");
        let c = &d.changed[0];
        assert_eq!(c.before.as_ref().map(|h| h.fence), Some(3));
        assert_eq!(
            c.after.as_ref().map(|h| (h.fence, h.holder.as_str())),
            Some((5, "svc@h:5"))
        );
        assert_eq!((d.taken_total, d.released_total, d.changed_total), (1, 1, 1));
    }

    #[test]
    fn a_diff_caps_its_lists_but_not_its_counts() {
        let after = table(
            1,
            (0..DIFF_ROWS as i64 + 5)
                .map(|i| entry(&format!("l{i:04}"), i, i))
                .collect(),
        );
        let d = diff_tables(&TableAt::default(), &after);
        assert_eq!(d.taken.len(), DIFF_ROWS);
        assert_eq!(d.taken_total, DIFF_ROWS as u64 + 5);
    }

    #[test]
    fn the_form_keeps_what_was_typed_and_defaults_the_start() {
        let f = ReviewForm::from_query([("lock", " a/b "), ("at", "-5m"), ("x", "y")]);
        assert_eq!(f.from, DEFAULT_FROM);
        assert_eq!(f.lock, "a/b");
        assert_eq!(f.at, "-5m");
        assert_eq!(f.query_pairs(), [("from", DEFAULT_FROM), ("lock", "a/b")]);
        let f = ReviewForm::from_query([("from", "2026-11-23T02:10")]);
        assert_eq!(f.from, "2026-11-23T02:10");
    }
}
