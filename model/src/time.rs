//! Timestamps and durations as the UI shows them.
//!
//! Wall-clock instants are unix milliseconds (`i64`); whose clock produced them is
//! part of each field's contract. Durations shown to people are rounded down to the
//! largest two units ("3m 07s", "2h 05m"), so a countdown ticks once a second.
//!
//! Absolute times for people ([`hms`], [`datetime`], [`absolute_and_relative`],
//! [`tick_label`]) are shown in the display zone and always say which:
//! "14:03:07 UTC", or "15:03:07 UTC+1" once the browser chose its own zone
//! ([`show_in_local`]; the server never does, so what it renders is UTC).
//! [`utc_hms`], [`utc_datetime`] and [`rfc3339`] are UTC whatever was chosen.

use std::cell::Cell;

/// Unix milliseconds.
pub type Millis = i64;

/// "4s", "3m 07s", "2h 05m", "3d 04h"; negative durations are shown as their magnitude
/// (callers say "ago" / "overdue" themselves).
pub fn human_duration(ms: i64) -> String {
    let s = ms.unsigned_abs() / 1000;
    match s {
        0..=59 => format!("{s}s"),
        60..=3_599 => format!("{}m {:02}s", s / 60, s % 60),
        3_600..=86_399 => format!("{}h {:02}m", s / 3_600, (s % 3_600) / 60),
        _ => format!("{}d {:02}h", s / 86_400, (s % 86_400) / 3_600),
    }
}

fn utc(ms: Millis) -> Option<chrono::DateTime<chrono::Utc>> {
    chrono::DateTime::from_timestamp_millis(ms)
}

/// The local zone's offset east of UTC in minutes at an instant (the browser's
/// `Date`, which knows its daylight-saving rules).
pub type LocalOffset = fn(Millis) -> i32;

thread_local! {
    static LOCAL: Cell<Option<LocalOffset>> = const { Cell::new(None) };
}

/// Shows absolute times in the local zone whose offset `local` gives, or in UTC
/// (`None`, the default) — for this thread, which is the browser's only one.
pub fn show_in_local(local: Option<LocalOffset>) {
    LOCAL.with(|l| l.set(local));
}

/// The display zone's name at an instant: "UTC", or "UTC+1", "UTC-3", "UTC+5:30".
pub fn zone_label(ms: Millis) -> String {
    offset_label(LOCAL.with(Cell::get).map_or(0, |f| f(ms)))
}

/// "UTC" for the display zone in UTC, "your time zone (UTC+1 now)" otherwise: what a
/// column of times or an axis is in.
pub fn zone_name(now: Millis) -> String {
    match LOCAL.with(Cell::get) {
        None => "UTC".into(),
        Some(_) => format!("your time zone, {} now", zone_label(now)),
    }
}

fn offset_label(minutes: i32) -> String {
    let (h, m) = (minutes.abs() / 60, minutes.abs() % 60);
    let sign = if minutes < 0 { '-' } else { '+' };
    match (h, m) {
        (0, 0) => "UTC".into(),
        (h, 0) => format!("UTC{sign}{h}"),
        (h, m) => format!("UTC{sign}{h}:{m:02}"),
    }
}

/// The instant on the display zone's wall clock.
fn shown(ms: Millis) -> Option<chrono::NaiveDateTime> {
    let offset = LOCAL.with(Cell::get).map_or(0, |f| f(ms));
    chrono::DateTime::from_timestamp_millis(ms.checked_add(i64::from(offset) * 60_000)?).map(|t| t.naive_utc())
}

/// "HH:MM:SS UTC" (or "HH:MM:SS UTC+1") of a unix-ms instant, in the display zone.
pub fn hms(ms: Millis) -> String {
    let t = shown(ms).map_or_else(|| "--:--:--".into(), |t| t.format("%H:%M:%S").to_string());
    format!("{t} {}", zone_label(ms))
}

/// "YYYY-MM-DD HH:MM:SS UTC" (or "… UTC+1") of a unix-ms instant, in the display zone.
pub fn datetime(ms: Millis) -> String {
    shown(ms).map_or_else(
        || format!("{ms} ms (out of range)"),
        |t| format!("{} {}", t.format("%Y-%m-%d %H:%M:%S"), zone_label(ms)),
    )
}

/// `HH:MM:SS` UTC of a unix-ms instant (whatever the display zone; the caller labels it UTC).
pub fn utc_hms(ms: Millis) -> String {
    utc(ms).map_or_else(|| "--:--:--".into(), |t| t.format("%H:%M:%S").to_string())
}

/// `YYYY-MM-DD HH:MM:SS UTC` of a unix-ms instant.
pub fn utc_datetime(ms: Millis) -> String {
    utc(ms).map_or_else(
        || format!("{ms} ms (out of range)"),
        |t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
    )
}

/// A time axis tick's label, as fine as the ticks' spacing `step_ms` (in the
/// display zone, which the axis names with [`zone_name`]):
/// `HH:MM:SS` under a minute, `HH:MM` under a day, `MM-DD` from a day on.
pub fn tick_label(ms: Millis, step_ms: i64) -> String {
    let format = match step_ms {
        ..60_000 => "%H:%M:%S",
        60_000..86_400_000 => "%H:%M",
        _ => "%m-%d",
    };
    shown(ms).map_or_else(String::new, |t| t.format(format).to_string())
}

/// RFC 3339 with milliseconds (`2026-11-23T04:20:13.250Z`), for exports and
/// machine-readable attributes.
pub fn rfc3339(ms: Millis) -> String {
    utc(ms).map_or_else(
        || format!("{ms}"),
        |t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
    )
}

/// An instant typed by a person or a script, as UTC: RFC 3339
/// (`2026-11-23T04:20:13Z`, any offset), `YYYY-MM-DDTHH:MM[:SS]` or
/// `YYYY-MM-DD HH:MM[:SS]` (taken as UTC, what a `datetime-local` input sends),
/// `YYYY-MM-DD` (midnight UTC), or unix milliseconds.
pub fn parse_instant(text: &str) -> Option<Millis> {
    let t = text.trim();
    if let Ok(ms) = t.parse::<i64>() {
        return Some(ms);
    }
    if let Ok(d) = chrono::DateTime::parse_from_rfc3339(t) {
        return Some(d.timestamp_millis());
    }
    for f in [
        "%Y-%m-%dT%H:%M:%S",
        "%Y-%m-%dT%H:%M",
        "%Y-%m-%d %H:%M:%S",
        "%Y-%m-%d %H:%M",
    ] {
        if let Ok(d) = chrono::NaiveDateTime::parse_from_str(t, f) {
            return Some(d.and_utc().timestamp_millis());
        }
    }
    chrono::NaiveDate::parse_from_str(t, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|d| d.and_utc().timestamp_millis())
}

/// The earliest instant a query may name: 1970-01-01T00:00:00Z (unix ms 0).
pub const EARLIEST: Millis = 0;
/// The latest instant a query may name: 9999-12-31T23:59:59.999Z. Every
/// instant in `EARLIEST..=LATEST` has an RFC 3339 form, and the span between
/// any two of them (or one of them and a relative duration) fits an `i64`.
pub const LATEST: Millis = 253_402_300_799_999;
/// The accepted range, as a refusal states it.
pub const RANGE_HELP: &str =
    "times must lie between 1970-01-01T00:00:00Z and 9999-12-31T23:59:59.999Z (unix ms 0 to 253402300799999)";

/// `ms` when it lies in [`EARLIEST`]`..=`[`LATEST`], else why not (naming the range).
pub fn in_range(ms: Millis) -> Result<Millis, String> {
    if (EARLIEST..=LATEST).contains(&ms) {
        Ok(ms)
    } else {
        Err(format!("{ms} is out of range: {RANGE_HELP}"))
    }
}

/// An instant (in the display zone) and how long ago (or from now) it is:
/// "2026-11-23 04:20:13 UTC (3m 07s ago)".
pub fn absolute_and_relative(at: Millis, now: Millis) -> String {
    let rel = human_duration(now.saturating_sub(at));
    let when = if at <= now {
        format!("{rel} ago")
    } else {
        format!("in {rel}")
    };
    format!("{} ({when})", datetime(at))
}

#[cfg(test)]
mod tests {
    #[test]
    fn instants_parse_in_every_documented_form() {
        use super::parse_instant as p;
        let at = 1_795_407_613_000; // 2026-11-23T04:20:13Z
        assert_eq!(p("2026-11-23T04:20:13Z"), Some(at));
        assert_eq!(p("2026-11-23T05:20:13+01:00"), Some(at));
        assert_eq!(p("2026-11-23T04:20:13"), Some(at));
        assert_eq!(p("2026-11-23 04:20"), Some(at - 13_000));
        assert_eq!(p("2026-11-23"), Some(at - (4 * 3600 + 20 * 60 + 13) * 1000));
        assert_eq!(p(&at.to_string()), Some(at));
        assert_eq!(p("yesterday"), None);
        assert_eq!(p("2026-13-01"), None);
    }

    use super::*;

    #[test]
    fn tick_labels_are_as_fine_as_their_spacing() {
        let at = 1_795_407_613_000; // 2026-11-23T04:20:13Z
        assert_eq!(tick_label(at, 10_000), "04:20:13");
        assert_eq!(tick_label(at, 300_000), "04:20");
        assert_eq!(tick_label(at, 86_400_000), "11-23");
    }

    #[test]
    fn durations() {
        for (ms, want) in [
            (0, "0s"),
            (999, "0s"),
            (59_999, "59s"),
            (60_000, "1m 00s"),
            (187_000, "3m 07s"),
            (-187_000, "3m 07s"),
            (7_500_000, "2h 05m"),
            (273_600_000, "3d 04h"),
        ] {
            assert_eq!(human_duration(ms), want, "{ms}");
        }
    }

    #[test]
    fn clock() {
        assert_eq!(utc_hms(0), "00:00:00");
        assert_eq!(utc_hms(86_399_999), "23:59:59");
        assert_eq!(utc_hms(1_700_000_000_000), "22:13:20");
        assert_eq!(utc_hms(-1000), "23:59:59");
        assert_eq!(utc_datetime(1_700_000_000_000), "2023-11-14 22:13:20 UTC");
        assert_eq!(rfc3339(1_700_000_000_250), "2023-11-14T22:13:20.250Z");
        assert_eq!(
            absolute_and_relative(1_700_000_000_000, 1_700_000_187_000),
            "2023-11-14 22:13:20 UTC (3m 07s ago)"
        );
        assert!(absolute_and_relative(1_700_000_010_000, 1_700_000_000_000).ends_with("(in 10s)"));
    }

    /// Berlin's offset: +1 in winter, +2 from the last Sunday of March 2026.
    fn berlin(ms: Millis) -> i32 {
        if ms >= 1_774_746_000_000 {
            120
        } else {
            60
        }
    }

    #[test]
    fn the_display_zone_is_said_next_to_every_absolute_time() {
        // docs/operations.md (Accessibility): "Every absolute time says its zone: "14:03:07 UTC" or
        // "15:03:07 UTC+1" (the offset the zone had at that instant)."
        let winter = 1_700_000_000_000; // 2023-11-14T22:13:20Z
        let summer = 1_780_000_000_000; // 2026-05-28T20:26:40Z
        assert_eq!(hms(winter), "22:13:20 UTC");
        assert_eq!(zone_name(winter), "UTC");
        show_in_local(Some(berlin));
        assert_eq!(hms(winter), "23:13:20 UTC+1");
        assert_eq!(datetime(summer), "2026-05-28 22:26:40 UTC+2");
        assert_eq!(
            absolute_and_relative(winter, winter + 187_000),
            "2023-11-14 23:13:20 UTC+1 (3m 07s ago)"
        );
        assert_eq!(tick_label(winter, 10_000), "23:13:20");
        assert_eq!(zone_name(summer), "your time zone, UTC+2 now");
        // What the server writes (logs, exports) stays UTC.
        assert_eq!(utc_datetime(winter), "2023-11-14 22:13:20 UTC");
        assert_eq!(utc_hms(winter), "22:13:20");
        assert_eq!(rfc3339(winter), "2023-11-14T22:13:20.000Z");
        show_in_local(Some(|_| -210));
        assert_eq!(hms(winter), "18:43:20 UTC-3:30");
        show_in_local(None);
        assert_eq!(hms(winter), "22:13:20 UTC");
    }
}
