//! The lock record: one JSON document per held lock, written atomically with the
//! lock itself (see `docs/protocol.md`). Times are unix milliseconds on the clock of
//! the host that wrote them (the holder), which the dashboard never assumes agrees
//! with its own.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// The record schema version this build writes and reads.
pub const RECORD_VERSION: u32 = 1;

/// Largest record accepted from a store; larger values are shown as malformed.
pub const MAX_RECORD_BYTES: usize = 256 * 1024;

/// Metadata of one held lock, as stored under `<prefix>locks/<name>`.
///
/// Unknown fields are ignored so that newer writers stay readable.
///
/// `session`, `service`, `host` and `backtrace` are shared (`Arc`): many locks
/// have the same values (one session holds many locks, many locks are taken at
/// one call site), and the hub's [`FleetState`](crate::FleetState) interns them
/// so that each distinct value is stored once. They serialise exactly like
/// `String` and `Vec<String>` (serde's `rc` feature): the JSON does not change.
/// `owner` and `purpose` are unique per acquisition and stay owned.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LockRecord {
    /// Schema version ([`RECORD_VERSION`]).
    pub v: u32,
    /// A fresh id per acquisition attempt, telling records apart (release and
    /// extend compare on the lock's fencing token, which is store metadata).
    pub owner: String,
    /// The holder's session id.
    pub session: Arc<str>,
    pub service: Arc<str>,
    pub host: Arc<str>,
    pub pid: u32,
    /// Why the lock was taken, in the holder's words.
    #[serde(default)]
    pub purpose: String,
    /// Frames of the backtrace captured at the lock call, innermost first.
    #[serde(default)]
    pub backtrace: Arc<[String]>,
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
            RecordError::Json(e) => f.write_str(e),
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

/// A record type of the protocol: JSON with a schema version `v`.
pub trait Record: serde::de::DeserializeOwned {
    /// What the record is, for errors: "not a session record: …".
    const KIND: &'static str;

    fn version(&self) -> u32;

    /// What else makes a parsed record unusable (`docs/protocol.md`).
    fn check(&self) -> Result<(), String> {
        Ok(())
    }

    /// Parses a stored value; never panics, whatever the bytes. The one place a
    /// stored record of any type is read.
    fn parse(raw: &[u8]) -> Result<Self, RecordError> {
        if raw.len() > MAX_RECORD_BYTES {
            return Err(RecordError::TooLarge(raw.len()));
        }
        // A JSON object: serde would also take an array of the fields in order.
        let not_a = |why: String| RecordError::Json(format!("not a {} record: {why}", Self::KIND));
        if raw.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return Err(not_a("not a JSON object".into()));
        }
        let rec: Self = serde_json::from_slice(raw).map_err(|e| not_a(e.to_string()))?;
        if rec.version() > RECORD_VERSION {
            return Err(RecordError::UnsupportedVersion(rec.version()));
        }
        // docs/protocol.md: "`v: 0` is malformed: there is no version 0".
        if rec.version() == 0 {
            return Err(not_a(format!(
                "there is no record version 0 (this build reads {RECORD_VERSION})"
            )));
        }
        rec.check().map_err(not_a)?;
        Ok(rec)
    }
}

impl Record for LockRecord {
    const KIND: &'static str = "lock";

    fn version(&self) -> u32 {
        self.v
    }
}

impl Record for SessionRecord {
    const KIND: &'static str = "session";

    fn version(&self) -> u32 {
        self.v
    }

    fn check(&self) -> Result<(), String> {
        match self.contention.wait_buckets.len() {
            0 => Ok(()),
            n if n == WAIT_BUCKETS_MS.len() + 1 => Ok(()),
            n => Err(format!(
                "wait_buckets has {n} counts, not {}",
                WAIT_BUCKETS_MS.len() + 1
            )),
        }
    }
}

impl Record for BlacklistRecord {
    const KIND: &'static str = "blacklist";

    fn version(&self) -> u32 {
        self.v
    }
}

/// How much of a malformed value is kept for display.
pub const MALFORMED_KEEP_BYTES: usize = 4096;

/// A stored value: the record it holds, or, when it is not a record this build
/// reads, the stored bytes (cut to [`MALFORMED_KEEP_BYTES`]) and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum Stored<T> {
    Record(T),
    Malformed { raw: Vec<u8>, error: String },
}

impl<T: Record> Stored<T> {
    pub fn parse(raw: &[u8]) -> Stored<T> {
        match T::parse(raw) {
            Ok(rec) => Stored::Record(rec),
            Err(e) => Stored::Malformed {
                raw: raw[..raw.len().min(MALFORMED_KEEP_BYTES)].to_vec(),
                error: e.to_string(),
            },
        }
    }
}

impl<T> Stored<T> {
    pub fn value(&self) -> Option<&T> {
        match self {
            Stored::Record(r) => Some(r),
            Stored::Malformed { .. } => None,
        }
    }
}

impl LockRecord {
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a LockRecord always serialises")
    }

    /// The holder as people name it: `service@host:pid`.
    pub fn holder(&self) -> String {
        holder_label(&self.service, &self.host, self.pid)
    }
}

impl SessionRecord {
    /// The session's process as people name it: `service@host:pid`.
    pub fn holder(&self) -> String {
        holder_label(&self.service, &self.host, self.pid)
    }
}

fn holder_label(service: &str, host: &str, pid: u32) -> String {
    format!("{service}@{host}:{pid}")
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
        backtrace: vec!["billing::run".into()].into(),
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
    fn shared_fields_are_plain_json() {
        // The shared (Arc) fields are written exactly as String and Vec<String> were.
        let v = serde_json::to_value(sample("o-1")).unwrap();
        assert_eq!(v["session"], "s-1");
        assert_eq!(v["service"], "billing");
        assert_eq!(v["host"], "host-a");
        assert_eq!(v["backtrace"], serde_json::json!(["billing::run"]));
        let r = LockRecord::parse(
            br#"{"v":1,"owner":"o","session":"s","service":"x","host":"h","pid":1,
            "acquired_at":1,"expected_runtime_ms":1,"alert_at":1,"auto_unlock_at":1,"heartbeat_at":1}"#,
        )
        .unwrap();
        assert!(r.backtrace.is_empty() && r.purpose.is_empty(), "defaults");
    }

    #[test]
    fn bad_inputs_are_errors_not_panics() {
        let cases: &[(&[u8], &str)] = &[
            (b"", "not a lock record"),
            (b"\xff\xfe", "not a lock record"),
            (b"{\"v\":1}", "missing field"),
            (b"[1,2,3]", "not a JSON object"),
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
    fn session_records_need_the_whole_wait_histogram() {
        let base = r#"{"v":1,"session":"s","service":"x","host":"h","pid":1,"started_at":1,"heartbeat_at":1"#;
        let ok = format!(r#"{base}}}"#);
        assert!(SessionRecord::parse(ok.as_bytes()).is_ok(), "no contention: all zero");
        let short = format!(
            r#"{base},"contention":{{"attempts":1,"acquired":1,"conflicts":0,"lost":0,"wait_buckets":[1,0],"wait_sum_ms":3}}}}"#
        );
        let err = SessionRecord::parse(short.as_bytes()).unwrap_err().to_string();
        assert!(err.contains("wait_buckets has 2 counts, not 11"), "{err}");
        let fields_as_array = br#"[1,"s","x","h",1,1,1]"#;
        assert!(SessionRecord::parse(fields_as_array).is_err());
        // A malformed session is "not a session record" (it said "not a lock record").
        let err = SessionRecord::parse(b"{").unwrap_err().to_string();
        assert!(err.starts_with("not a session record: "), "{err}");
        let err = BlacklistRecord::parse(b"[]").unwrap_err().to_string();
        assert_eq!(err, "not a blacklist record: not a JSON object");
    }

    /// docs/protocol.md: "`v: 0` is malformed: there is no version 0".
    #[test]
    fn version_zero_is_malformed() {
        let mut zero = serde_json::to_value(sample("o")).unwrap();
        zero["v"] = 0.into();
        let err = LockRecord::parse(zero.to_string().as_bytes()).unwrap_err().to_string();
        assert_eq!(
            err,
            "not a lock record: there is no record version 0 (this build reads 1)"
        );
    }

    #[test]
    fn unknown_fields_are_ignored() {
        let mut v = serde_json::to_value(sample("o")).unwrap();
        v["added_by_a_newer_writer"] = "x".into();
        assert_eq!(LockRecord::parse(v.to_string().as_bytes()).unwrap(), sample("o"));
    }
}

/// Upper bounds (ms, inclusive) of the wait-time histogram buckets; one more bucket
/// counts everything above the last bound.
pub const WAIT_BUCKETS_MS: [u64; 10] = [1, 5, 10, 50, 100, 500, 1_000, 5_000, 10_000, 60_000];

/// A session's contention counters since it started, published with each session
/// heartbeat. Rates come from differences between two heartbeats.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Contention {
    /// Acquisition attempts (each try against the store, including retries after a wait).
    pub attempts: u64,
    /// Acquisitions that succeeded.
    pub acquired: u64,
    /// Attempts that found the lock held by someone else.
    pub conflicts: u64,
    /// Locks this session lost (taken away, or refused by a blacklist).
    pub lost: u64,
    /// Time from the first attempt to acquisition (or giving up), per `lock` call:
    /// counts per bucket of [`WAIT_BUCKETS_MS`], plus one overflow bucket.
    pub wait_buckets: Vec<u64>,
    pub wait_sum_ms: u64,
}

impl Contention {
    pub fn record_wait(&mut self, ms: u64) {
        if self.wait_buckets.len() != WAIT_BUCKETS_MS.len() + 1 {
            self.wait_buckets = vec![0; WAIT_BUCKETS_MS.len() + 1];
        }
        let i = WAIT_BUCKETS_MS
            .iter()
            .position(|&b| ms <= b)
            .unwrap_or(WAIT_BUCKETS_MS.len());
        self.wait_buckets[i] = self.wait_buckets[i].saturating_add(1);
        self.wait_sum_ms = self.wait_sum_ms.saturating_add(ms);
    }

    /// Waits counted (saturating: a stored record may hold any counts).
    pub fn waits(&self) -> u64 {
        self.wait_buckets.iter().fold(0, |a, n| a.saturating_add(*n))
    }
}

/// One worker process session, as stored under `<prefix>sessions/<id>`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SessionRecord {
    pub v: u32,
    pub session: String,
    pub service: String,
    pub host: String,
    pub pid: u32,
    /// Holder's clock, unix ms.
    pub started_at: i64,
    pub heartbeat_at: i64,
    /// The lock this session is blocked on, if any.
    #[serde(default)]
    pub waiting_for: Option<String>,
    #[serde(default)]
    pub contention: Contention,
}

/// A session blocked on a lock, as stored under `<prefix>waiters/<name>/<session>`
/// (etcd; SQL keeps the session row's `waiting_for` instead). Observers take the
/// lock and the session from the key; the value says since when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaiterRecord {
    pub v: u32,
    pub session: String,
    /// When the wait began: right after the first busy answer (waiter's clock).
    pub since: i64,
}

impl Record for WaiterRecord {
    const KIND: &'static str = "waiter";

    fn version(&self) -> u32 {
        self.v
    }
}

/// A blacklisted session, as stored under `<prefix>blacklist/<session>`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BlacklistRecord {
    pub v: u32,
    pub session: String,
    /// Who blacklisted it.
    pub by: String,
    pub reason: String,
    /// Blacklister's clock, unix ms.
    pub at: i64,
}

impl BlacklistRecord {
    /// `by` blacklists `session` at `at` (their clock) for `reason`.
    pub fn new(session: &str, by: &str, reason: &str, at: i64) -> BlacklistRecord {
        BlacklistRecord {
            v: RECORD_VERSION,
            session: session.into(),
            by: by.into(),
            reason: reason.into(),
            at,
        }
    }
}

#[cfg(test)]
mod contention_tests {
    use super::*;

    #[test]
    fn wait_histogram_buckets() {
        let mut c = Contention::default();
        for ms in [0, 1, 2, 999, 1_000, 70_000] {
            c.record_wait(ms);
        }
        assert_eq!(c.wait_buckets, vec![2, 1, 0, 0, 0, 0, 2, 0, 0, 0, 1]);
        assert_eq!(c.waits(), 6);
        assert_eq!(c.wait_sum_ms, 72_002);
    }
}
