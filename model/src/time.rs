//! Timestamps and durations as the UI shows them.
//!
//! Wall-clock instants are unix milliseconds (`i64`); whose clock produced them is
//! part of each field's contract. Durations shown to people are rounded down to the
//! largest two units ("3m 07s", "2h 05m"), so a countdown ticks once a second.

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

/// `HH:MM:SS` UTC of a unix-ms instant (the UI labels it UTC).
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

/// RFC 3339 with milliseconds (`2026-11-23T04:20:13.250Z`), for exports and
/// machine-readable attributes.
pub fn rfc3339(ms: Millis) -> String {
    utc(ms).map_or_else(
        || format!("{ms}"),
        |t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
    )
}

/// A UTC instant and how long ago (or from now) it is: "04:20:13 UTC (3m 07s ago)".
pub fn absolute_and_relative(at: Millis, now: Millis) -> String {
    let rel = human_duration(now - at);
    let when = if at <= now {
        format!("{rel} ago")
    } else {
        format!("in {rel}")
    };
    format!("{} ({when})", utc_datetime(at))
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
