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

/// `HH:MM:SS` UTC of a unix-ms instant (the UI labels it UTC).
pub fn utc_hms(ms: Millis) -> String {
    let day_s = ms.div_euclid(1000).rem_euclid(86_400);
    format!("{:02}:{:02}:{:02}", day_s / 3600, (day_s % 3600) / 60, day_s % 60)
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
    }
}
