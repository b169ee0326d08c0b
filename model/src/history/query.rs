//! History queries: a time range and filters, and times typed by people
//! (absolute, or relative to now).

use serde::{Deserialize, Serialize};

use super::{Kind, MAX_HISTORY_ROWS};
use crate::time::Millis;

/// A history query: a time range and filters, as the review page, the API and
/// `lockscope history export` send it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryQuery {
    pub fleet: String,
    pub from: Option<Millis>,
    pub to: Option<Millis>,
    /// A lock's name, or a prefix when it ends with `*`.
    pub lock: Option<String>,
    pub session: Option<String>,
    pub service: Option<String>,
    pub actor: Option<String>,
    /// Any of these kinds (empty: all).
    pub kinds: Vec<Kind>,
    pub limit: Option<u32>,
}

impl HistoryQuery {
    /// From query-string pairs (unknown keys ignored, empty values unset).
    /// Times: anything [`parse_when`] reads, relative to `now`, within
    /// [`crate::time::EARLIEST`]`..=`[`crate::time::LATEST`] (outside: an error
    /// stating the range).
    pub fn from_query<'a>(
        fleet: &str,
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
        now: Millis,
    ) -> Result<HistoryQuery, String> {
        let mut q = HistoryQuery {
            fleet: fleet.to_string(),
            ..HistoryQuery::default()
        };
        for (k, v) in pairs {
            let v = v.trim();
            if v.is_empty() {
                continue;
            }
            let when = || parse_when(v, now).map_err(|why| format!("{k}={v:?}: {why}"));
            match k {
                "from" => q.from = Some(when()?),
                "to" => q.to = Some(when()?),
                "lock" => q.lock = Some(v.to_string()),
                "session" => q.session = Some(v.to_string()),
                "service" => q.service = Some(v.to_string()),
                "actor" => q.actor = Some(v.to_string()),
                "kind" => {
                    for part in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                        let kind = Kind::parse(part).ok_or_else(|| {
                            let all: Vec<_> = Kind::ALL.iter().map(|k| k.as_str()).collect();
                            format!("kind={part:?}: use one of {}", all.join(", "))
                        })?;
                        if !q.kinds.contains(&kind) {
                            q.kinds.push(kind);
                        }
                    }
                }
                "limit" => {
                    let n: u32 = v.parse().map_err(|_| format!("limit={v:?}: not a number"))?;
                    q.limit = Some(n.clamp(1, MAX_HISTORY_ROWS));
                }
                _ => {}
            }
        }
        if let (Some(f), Some(t)) = (q.from, q.to) {
            if f > t {
                return Err("from is after to".into());
            }
        }
        Ok(q)
    }

    /// The lock filter as (exact name) or (prefix).
    pub fn lock_filter(&self) -> Option<(&str, bool)> {
        self.lock.as_deref().map(|l| match l.strip_suffix('*') {
            Some(prefix) => (prefix, true),
            None => (l, false),
        })
    }
}

/// How to write a time in a query.
pub const WHEN_HELP: &str =
    "not a time (use 2026-11-23T02:17:00Z, 2026-11-23T02:17 taken as UTC, unix ms, now, or now-15m / -1h / -2d)";

/// An instant as [`crate::time::parse_instant`] reads it, or relative to `now`:
/// `now`, `now-15m`, `-15m`, `-1h30m`, `-2d` (units s, m, h, d); or why it is
/// not one: [`WHEN_HELP`], or [`crate::time::RANGE_HELP`] for an instant (or
/// a duration back from `now`) outside [`crate::time::EARLIEST`]`..=`[`crate::time::LATEST`].
/// Never overflows, whatever `text` and `now`.
pub fn parse_when(text: &str, now: Millis) -> Result<Millis, String> {
    let t = text.trim();
    let rel = t.strip_prefix("now").unwrap_or(t);
    let at = if rel.is_empty() && t == "now" {
        Some(now)
    } else {
        match rel
            .strip_prefix('-')
            .filter(|r| r.starts_with(|c: char| c.is_ascii_digit()))
        {
            // `-123` is unix ms, not a duration.
            Some(ago) if ago.contains(|c: char| c.is_ascii_alphabetic()) => match parse_duration(ago) {
                // A duration too long for an `i64`, or reaching before `i64::MIN`.
                Some(d) => Some(
                    now.checked_sub(d)
                        .ok_or_else(|| format!("{t}: {}", crate::time::RANGE_HELP))?,
                ),
                None if valid_units(ago) => return Err(format!("{t}: {}", crate::time::RANGE_HELP)),
                None => None,
            },
            _ => crate::time::parse_instant(t),
        }
    };
    crate::time::in_range(at.ok_or_else(|| WHEN_HELP.to_string())?)
}

/// Written as a duration (`1h30m`: numbers, each followed by a unit), whatever its size.
fn valid_units(text: &str) -> bool {
    let mut digits = false;
    for c in text.chars() {
        match c {
            '0'..='9' => digits = true,
            's' | 'm' | 'h' | 'd' if digits => digits = false,
            _ => return false,
        }
    }
    !text.is_empty() && !digits
}

/// `1h30m`, `15m`, `2d`, `90s` as milliseconds (`None`: not that syntax, or
/// past `i64` milliseconds). The one duration syntax of the history's relative
/// times and the CLI's `--wait`.
pub fn parse_duration(text: &str) -> Option<Millis> {
    let mut total: i64 = 0;
    let mut num = String::new();
    for c in text.chars() {
        if c.is_ascii_digit() {
            num.push(c);
            continue;
        }
        let unit = match c {
            's' => 1_000,
            'm' => 60_000,
            'h' => 3_600_000,
            'd' => 86_400_000,
            _ => return None,
        };
        let n: i64 = num.parse().ok()?;
        total = total.checked_add(n.checked_mul(unit)?)?;
        num.clear();
    }
    num.is_empty().then_some(total)
}
