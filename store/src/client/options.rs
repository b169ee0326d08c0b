//! How a session is set up and how one lock is taken: [`SessionConfig`],
//! [`LockOptions`], and the cap on a record's `purpose`.

use std::time::Duration;

/// Who a session is and how it keeps itself alive.
#[derive(Clone, Debug)]
pub struct SessionConfig {
    pub service: String,
    pub host: String,
    pub pid: u32,
    /// How often held locks are extended and the session record refreshed.
    pub heartbeat_every: Duration,
    /// How long the session's registration (and its waiter entries) outlive the
    /// last heartbeat.
    pub session_ttl: Duration,
}

impl SessionConfig {
    pub fn new(service: impl Into<String>) -> SessionConfig {
        SessionConfig {
            service: service.into(),
            host: hostname(),
            pid: std::process::id(),
            heartbeat_every: Duration::from_secs(2),
            session_ttl: Duration::from_secs(10),
        }
    }
}

/// This machine's host name (Linux: the kernel's), `unknown` if unreadable.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "unknown".into())
}

/// How to take one lock.
#[derive(Clone, Debug)]
pub struct LockOptions {
    pub purpose: String,
    /// Past this hold time the lock is flagged overdue (`alert_at`).
    pub expected_runtime: Duration,
    /// Without a heartbeat for this long the lock may be released by the unlocker
    /// (`auto_unlock_at` = last heartbeat + this). Defaults to `expected_runtime`,
    /// at least three heartbeats.
    pub auto_unlock_after: Option<Duration>,
    /// How long `lock` may wait for the lock to become free.
    pub deadline: Duration,
    /// Record where `lock` was called (costs a stack walk per call).
    pub backtrace: bool,
}

impl LockOptions {
    pub fn new(purpose: impl Into<String>, expected_runtime: Duration) -> LockOptions {
        LockOptions {
            purpose: purpose.into(),
            expected_runtime,
            auto_unlock_after: None,
            deadline: Duration::from_secs(30),
            backtrace: true,
        }
    }

    pub fn deadline(mut self, d: Duration) -> LockOptions {
        self.deadline = d;
        self
    }

    pub fn auto_unlock_after(mut self, d: Duration) -> LockOptions {
        self.auto_unlock_after = Some(d);
        self
    }

    pub fn without_backtrace(mut self) -> LockOptions {
        self.backtrace = false;
        self
    }
}

/// Longest `purpose` written, counted as it is written in the record's JSON
/// (escapes included: `"` is 2 bytes, U+0001 is 6): what leaves room for the
/// rest of the record within the protocol's 256 KiB (`docs/protocol.md`).
pub const MAX_PURPOSE_BYTES: usize = 240 * 1024;

/// How many bytes `c` takes inside a JSON string as serde_json writes it.
fn escaped_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
        c if (c as u32) < 0x20 => 6,
        c => c.len_utf8(),
    }
}

/// `purpose` cut at a character boundary so that its escaped form is at most
/// [`MAX_PURPOSE_BYTES`].
pub(super) fn capped(purpose: &str) -> &str {
    let mut written = 0;
    for (i, c) in purpose.char_indices() {
        written += escaped_len(c);
        if written > MAX_PURPOSE_BYTES {
            return &purpose[..i];
        }
    }
    purpose
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_huge_purpose_is_cut_at_a_character_boundary() {
        let long = "é".repeat(MAX_PURPOSE_BYTES);
        let cut = capped(&long);
        assert!(cut.len() <= MAX_PURPOSE_BYTES && cut.len() > MAX_PURPOSE_BYTES - 2);
        assert_eq!(capped("short"), "short");
    }

    #[test]
    fn the_cap_counts_escaped_bytes_as_serde_json_writes_them() {
        for c in ['"', '\\', '\n', '\u{1}', '\u{7f}', 'é', '€', '😀', 'a', '/'] {
            let json = serde_json::to_string(&c.to_string()).unwrap();
            assert_eq!(escaped_len(c), json.len() - 2, "{c:?} is written {json}");
        }
        let quotes = "\"".repeat(MAX_PURPOSE_BYTES);
        assert_eq!(capped(&quotes).len(), MAX_PURPOSE_BYTES / 2);
    }
}
