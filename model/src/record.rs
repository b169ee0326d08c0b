//! The lock record: one JSON document per held lock, written atomically with the
//! lock itself (see `docs/protocol.md`). Times are unix milliseconds on the clock of
//! the host that wrote them (the holder), which the dashboard never assumes agrees
//! with its own.

use serde::{Deserialize, Serialize};

/// The record schema version this build writes and reads.
pub const RECORD_VERSION: u32 = 1;

/// Largest record accepted from a store; larger values are shown as malformed.
pub const MAX_RECORD_BYTES: usize = 256 * 1024;

/// Metadata of one held lock, as stored under `<prefix>locks/<name>`.
///
/// Unknown fields are ignored so that newer writers stay readable.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockRecord {
    /// Schema version ([`RECORD_VERSION`]).
    pub v: u32,
    /// A fresh id per acquisition; release and heartbeat compare on it.
    pub owner: String,
    /// The holder's session id.
    pub session: String,
    pub service: String,
    pub host: String,
    pub pid: u32,
    /// Why the lock was taken, in the holder's words.
    #[serde(default)]
    pub purpose: String,
    /// Frames of the backtrace captured at the lock call, innermost first.
    #[serde(default)]
    pub backtrace: Vec<String>,
    /// When the lock was taken (holder's clock, unix ms).
    pub acquired_at: i64,
    /// How long the holder expects to hold it.
    pub expected_runtime_ms: u64,
    /// Past this instant the lock is flagged as overdue.
    pub alert_at: i64,
    /// Past this instant (not extended by a heartbeat) the unlocker may release it.
    pub auto_unlock_at: i64,
    /// Last heartbeat (holder's clock); equals `acquired_at` until the first one.
    pub heartbeat_at: i64,
}

/// Why a stored value is not a usable [`LockRecord`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordError {
    TooLarge(usize),
    Json(String),
    UnsupportedVersion(u32),
}

impl std::fmt::Display for RecordError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecordError::TooLarge(n) => write!(f, "record is {n} bytes, over the {MAX_RECORD_BYTES} byte limit"),
            RecordError::Json(e) => write!(f, "not a lock record: {e}"),
            RecordError::UnsupportedVersion(v) => {
                write!(
                    f,
                    "record version {v} is newer than this build understands ({RECORD_VERSION})"
                )
            }
        }
    }
}

impl std::error::Error for RecordError {}

impl LockRecord {
    /// Parses a stored value; never panics, whatever the bytes.
    pub fn parse(raw: &[u8]) -> Result<LockRecord, RecordError> {
        if raw.len() > MAX_RECORD_BYTES {
            return Err(RecordError::TooLarge(raw.len()));
        }
        let rec: LockRecord = serde_json::from_slice(raw).map_err(|e| RecordError::Json(e.to_string()))?;
        if rec.v > RECORD_VERSION {
            return Err(RecordError::UnsupportedVersion(rec.v));
        }
        Ok(rec)
    }

    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a LockRecord always serialises")
    }
}

#[cfg(test)]
pub(crate) fn sample(owner: &str) -> LockRecord {
    LockRecord {
        v: RECORD_VERSION,
        owner: owner.into(),
        session: "s-1".into(),
        service: "billing".into(),
        host: "host-a".into(),
        pid: 42,
        purpose: "nightly invoice run".into(),
        backtrace: vec!["billing::run".into()],
        acquired_at: 1_000,
        expected_runtime_ms: 60_000,
        alert_at: 61_000,
        auto_unlock_at: 121_000,
        heartbeat_at: 1_000,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let r = sample("o-1");
        assert_eq!(LockRecord::parse(&r.to_json()).unwrap(), r);
    }

    #[test]
    fn bad_inputs_are_errors_not_panics() {
        let cases: &[(&[u8], &str)] = &[
            (b"", "not a lock record"),
            (b"\xff\xfe", "not a lock record"),
            (b"{\"v\":1}", "missing field"),
            (b"[1,2,3]", "not a lock record"),
        ];
        for (raw, want) in cases {
            let err = LockRecord::parse(raw).unwrap_err().to_string();
            assert!(err.contains(want), "{raw:?}: {err}");
        }
        let mut newer = serde_json::to_value(sample("o")).unwrap();
        newer["v"] = 99.into();
        let err = LockRecord::parse(newer.to_string().as_bytes()).unwrap_err();
        assert_eq!(err, RecordError::UnsupportedVersion(99));
        assert!(matches!(
            LockRecord::parse(&vec![b' '; MAX_RECORD_BYTES + 1]),
            Err(RecordError::TooLarge(_))
        ));
    }

    #[test]
    fn unknown_fields_are_ignored() {
        let mut v = serde_json::to_value(sample("o")).unwrap();
        v["added_by_a_newer_writer"] = "x".into();
        assert_eq!(LockRecord::parse(v.to_string().as_bytes()).unwrap(), sample("o"));
    }
}
