//! Property tests (issue 23: one GET with `to=9223372036854775807` made the
//! release build allocate without bound): every parser of what a URL, a
//! websocket client or a store hands the server, and the arithmetic over what
//! it yields, over the whole `i64` range and arbitrary text and bytes.
//!
//! Deterministic: a fixed seed ([`run`]) and 256 cases a property, no
//! failure files; `PROPTEST_CASES=100000` runs a longer campaign and
//! `LOCKSCOPE_PROPTEST_SEED=N` another one. The test profile checks
//! overflows, and the code covered does its time arithmetic with explicit
//! checked or saturating operations, so a release build (overflow checks off)
//! computes exactly what these tests see.

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

use crate::admin::{AuditQuery, MAX_AUDIT_ROWS};
use crate::charts::ChartWindow;
use crate::history::{parse_when, HistoryEvent, HistoryQuery, Kind, Replay, TableAt, MAX_HISTORY_ROWS};
use crate::record::{BlacklistRecord, Contention, LockRecord, Record, SessionRecord, WaiterRecord, RECORD_VERSION};
use crate::review::{diff_tables, Review, DIFF_ROWS};
use crate::time::{Millis, EARLIEST, LATEST, RANGE_HELP};
use crate::view::{ViewSpec, MAX_WINDOW};
use crate::{BlacklistEntry, ClientMsg, LockEntry, SessionEntry};

/// Runs `test` on values of `strategy` from a fixed seed (see the module docs).
pub(crate) fn run<S: Strategy>(strategy: S, test: impl Fn(S::Value) -> Result<(), TestCaseError>) {
    let seed: u64 = std::env::var("LOCKSCOPE_PROPTEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(23);
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    // `Config::default()` reads PROPTEST_CASES (default 256).
    let config = Config {
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner = TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &bytes));
    if let Err(e) = runner.run(&strategy, test) {
        panic!("{e} (seed {seed})");
    }
}

/// Any `i64`, often an edge: the extremes, around 0 and the accepted range's ends.
pub(crate) fn edge_i64() -> impl Strategy<Value = i64> {
    prop_oneof![
        3 => any::<i64>(),
        1 => Just(i64::MIN),
        1 => Just(i64::MAX),
        1 => i64::MIN..i64::MIN + 100_000_000_000,
        1 => i64::MAX - 100_000_000_000..=i64::MAX,
        1 => -1_000i64..1_000,
        1 => EARLIEST - 10..EARLIEST + 10,
        1 => LATEST - 10..LATEST + 10,
        2 => 1_700_000_000_000i64..1_900_000_000_000,
    ]
}

/// What a person or a script may type as a time: numbers over the whole
/// `i64` range and past it, relative durations of any size, dates, noise.
fn time_text() -> impl Strategy<Value = String> {
    let unit = prop_oneof![Just("s"), Just("m"), Just("h"), Just("d"), Just("x"), Just("")];
    prop_oneof![
        edge_i64().prop_map(|n| n.to_string()),
        any::<u128>().prop_map(|n| n.to_string()),
        (any::<bool>(), any::<u64>(), unit.clone(), any::<u32>(), unit)
            .prop_map(|(now, a, u, b, v)| format!("{}-{a}{u}{b}{v}", if now { "now" } else { "" })),
        (0u32..12_000, 1u32..13, 1u32..32, 0u32..25, 0u32..61)
            .prop_map(|(y, mo, d, h, mi)| format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}")),
        (0u32..12_000).prop_map(|y| format!("{y:04}-12-31T23:59:59.999Z")),
        Just("now".to_string()),
        any::<String>(),
    ]
}

fn in_range(t: Millis) -> bool {
    (EARLIEST..=LATEST).contains(&t)
}

#[test]
fn typed_times_are_in_range_or_refused_saying_why() {
    run((time_text(), edge_i64()), |(text, now)| {
        match parse_when(&text, now) {
            Ok(t) => prop_assert!(in_range(t), "{text:?} at {now} gave {t}"),
            Err(why) => prop_assert!(!why.is_empty()),
        }
        Ok(())
    });
    // The issue's own values, whatever the clock.
    run(edge_i64(), |now| {
        for text in ["9223372036854775807", "-9223372036854775808"] {
            let why = parse_when(text, now).unwrap_err();
            prop_assert!(why.contains(RANGE_HELP), "{why}");
        }
        Ok(())
    });
}

#[test]
fn history_queries_yield_bounded_ranges_and_limits_and_reviews_never_overflow() {
    let pairs = (time_text(), time_text(), edge_i64(), any::<String>(), edge_i64());
    run(pairs, |(from, to, limit, kind, now)| {
        let limit = limit.to_string();
        let q = HistoryQuery::from_query(
            "F",
            [
                ("from", from.as_str()),
                ("to", to.as_str()),
                ("limit", &limit),
                ("kind", &kind),
            ],
            now,
        );
        if let Ok(q) = q {
            prop_assert!(q.from.is_none_or(in_range) && q.to.is_none_or(in_range), "{q:?}");
            prop_assert!(q.from <= q.to || q.to.is_none(), "{q:?}");
            prop_assert!(q.limit.is_none_or(|l| (1..=MAX_HISTORY_ROWS).contains(&l)));
            let (f, t) = Review {
                query: q,
                read_at: now,
                ..Review::default()
            }
            .range();
            prop_assert!(f <= t);
        }
        Ok(())
    });
}

#[test]
fn a_review_range_never_overflows_whatever_it_was_given() {
    // A review is also deserialised (the browser hydrates it): any values.
    let ends = (
        proptest::option::of(edge_i64()),
        proptest::option::of(edge_i64()),
        edge_i64(),
    );
    run(ends, |(from, to, read_at)| {
        let r = Review {
            query: HistoryQuery {
                from,
                to,
                ..HistoryQuery::default()
            },
            read_at,
            ..Review::default()
        };
        let (f, t) = r.range();
        prop_assert!(f <= t);
        prop_assert_eq!(t, to.unwrap_or(read_at));
        Ok(())
    });
}

#[test]
fn audit_queries_yield_bounded_times_and_limits() {
    run((time_text(), time_text(), edge_i64()), |(from, to, limit)| {
        let limit = limit.to_string();
        if let Ok(q) = AuditQuery::from_query([("from", from.as_str()), ("to", to.as_str()), ("limit", &limit)]) {
            prop_assert!(q.from.is_none_or(in_range) && q.to.is_none_or(in_range), "{q:?}");
            prop_assert!(q.limit.is_none_or(|l| (1..=MAX_AUDIT_ROWS).contains(&l)));
        }
        Ok(())
    });
}

#[test]
fn view_specs_yield_bounded_windows() {
    let number = prop_oneof![
        edge_i64().prop_map(|n| n.to_string()),
        any::<u128>().prop_map(|n| n.to_string()),
        any::<String>()
    ];
    run((number.clone(), number, any::<String>()), |(offset, limit, sort)| {
        if let Ok(v) = ViewSpec::from_query([("offset", offset.as_str()), ("limit", &limit), ("sort", &sort)]) {
            prop_assert!((1..=MAX_WINDOW).contains(&v.limit));
        }
        Ok(())
    });
}

#[test]
fn chart_windows_have_few_buckets_and_frames_never_overflow() {
    run((any::<String>(), edge_i64(), edge_i64()), |(text, now, at)| {
        for value in [None, Some(text.as_str()), Some("5m"), Some("1h"), Some("24h")] {
            let Ok(w) = ChartWindow::from_query(value) else {
                continue;
            };
            let f = w.frame(now);
            // The chart points a window makes the server allocate: 96 at most.
            prop_assert!(f.buckets <= 96 && f.buckets > 0);
            prop_assert!(f.from <= f.to || now < f.from, "{f:?}");
            for i in [0, f.buckets / 2, f.buckets - 1, f.buckets, usize::MAX] {
                let _ = (f.start(i), f.end(i));
            }
            if let Some(i) = f.index(at) {
                prop_assert!(i < f.buckets);
            }
        }
        Ok(())
    });
}

/// A stored lock value: a real record with any times, or noise.
fn stored_value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        lock_record().prop_map(|r| r.to_json()),
        proptest::collection::vec(any::<u8>(), 0..64),
        any::<String>().prop_map(String::into_bytes),
    ]
}

fn lock_record() -> impl Strategy<Value = LockRecord> {
    (
        (
            // Version 0 does not exist: malformed (docs/protocol.md, "Records").
            1..=RECORD_VERSION,
            any::<String>(),
            any::<String>(),
            any::<String>(),
            any::<u32>(),
        ),
        (any::<String>(), proptest::collection::vec(any::<String>(), 0..3)),
        (edge_i64(), any::<u64>(), edge_i64(), edge_i64(), edge_i64()),
    )
        .prop_map(
            |((v, owner, session, service, pid), (purpose, backtrace), (acq, exp, alert, auto, hb))| LockRecord {
                v,
                owner,
                session: session.into(),
                service: service.clone().into(),
                host: service.into(),
                pid,
                purpose,
                backtrace: backtrace.into(),
                acquired_at: acq,
                expected_runtime_ms: exp,
                alert_at: alert,
                auto_unlock_at: auto,
                heartbeat_at: hb,
            },
        )
}

fn event() -> impl Strategy<Value = HistoryEvent> {
    (
        proptest::sample::select(Kind::ALL.to_vec()),
        edge_i64(),
        proptest::option::of(0u8..6),
        proptest::option::of(edge_i64()),
        proptest::option::of(edge_i64()),
        proptest::option::of(0u8..3),
        proptest::option::of(stored_value()),
    )
        .prop_map(|(kind, at, lock, fence, revision, session, value)| HistoryEvent {
            id: String::new(),
            fleet: "F".into(),
            at,
            kind,
            lock: lock.map(|l| format!("l{l}")),
            session: session.map(|s| format!("s{s}")),
            owner: None,
            fence,
            revision,
            service: None,
            host: None,
            actor: None,
            detail: String::new(),
            record: value.map(|raw| {
                let e = LockEntry::from_stored("x".into(), 0, 0, &raw);
                serde_json::to_string(&e.body).expect("bodies serialise")
            }),
        })
}

#[test]
fn the_table_at_an_instant_and_its_diff_are_bounded_and_never_panic() {
    let events = || proptest::collection::vec(event(), 0..40);
    run(
        (events(), events(), 0usize..8, edge_i64()),
        |(before, after, cap, at)| {
            let table = |events: &[HistoryEvent]| {
                let mut r = Replay::default();
                for e in events {
                    r.apply(e);
                }
                r.table("F", at, None, events.len() as u64)
            };
            let (b, a) = (table(&before), table(&after));
            prop_assert!(a.locks.len() <= after.len() && a.waiters.len() <= after.len());
            let d = diff_tables(&b, &a);
            for (list, total) in [
                (&d.taken, d.taken_total),
                (&d.released, d.released_total),
                (&d.changed, d.changed_total),
            ] {
                prop_assert!(list.len() <= DIFF_ROWS && list.len() as u64 == total.min(DIFF_ROWS as u64));
            }
            let whole = a.clone();
            let capped: TableAt = a.capped(cap);
            prop_assert!(capped.locks.len() <= cap && capped.waiters.len() <= cap);
            prop_assert_eq!(
                capped.locks_total.unwrap_or(capped.locks.len() as u64),
                whole.locks.len() as u64
            );
            prop_assert_eq!(
                capped.waiters_total.unwrap_or(capped.waiters.len() as u64),
                whole.waiters.len() as u64
            );
            Ok(())
        },
    );
}

/// JSON a client could send: the messages' shapes with any numbers and text.
fn client_json() -> impl Strategy<Value = String> {
    let num = prop_oneof![
        edge_i64().prop_map(|n| n.to_string()),
        any::<u128>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|n| n.to_string()),
        Just("null".to_string()),
        any::<String>().prop_map(|s| serde_json::Value::from(s).to_string()),
    ];
    let text = any::<String>().prop_map(|s| serde_json::Value::from(s).to_string());
    prop_oneof![
        (num.clone(), num.clone(), num.clone(), text.clone(), text.clone()).prop_map(|(id, offset, limit, sort, q)| format!(
            r#"{{"type":"view","id":{id},"view":{{"offset":{offset},"limit":{limit},"sort":{{"key":{sort}}},"filter":{{"contains":{q}}}}}}}"#
        )),
        num.clone().prop_map(|n| format!(r#"{{"type":"ping","nonce":{n}}}"#)),
        num.prop_map(|n| format!(r#"{{"type":"ack","seq":{n}}}"#)),
        text.prop_map(|name| format!(r#"{{"type":"watch","watch":{{"lock":{{"name":{name}}}}}}}"#)),
        any::<String>(),
    ]
}

#[test]
fn client_messages_decode_or_are_refused_never_panic() {
    run(client_json(), |text| {
        match ClientMsg::parse(&text) {
            Ok(ClientMsg::View { view, .. }) => prop_assert!((1..=MAX_WINDOW).contains(&view.limit)),
            Ok(ClientMsg::Watch {
                watch: crate::Watch::Lock { name },
            }) => prop_assert!(!name.is_empty() && name.len() <= 512),
            Ok(_) => {}
            Err(why) => prop_assert!(!why.is_empty()),
        }
        Ok(())
    });
}

#[test]
fn stored_records_decode_or_are_malformed_and_what_is_derived_never_overflows() {
    let json_ish = (edge_i64(), edge_i64(), any::<u64>(), any::<u64>()).prop_map(|(a, b, c, d)| {
        format!(
            r#"{{"v":1,"session":"s","service":"x","host":"h","pid":1,"started_at":{a},"heartbeat_at":{b},
            "contention":{{"attempts":{c},"acquired":{c},"conflicts":{d},"lost":{d},
            "wait_buckets":[{c},{d},{c},{d},{c},{d},{c},{d},{c},{d},{c}],"wait_sum_ms":{d}}}}}"#
        )
        .into_bytes()
    });
    let raw = prop_oneof![stored_value(), json_ish];
    run((raw, edge_i64(), edge_i64()), |(raw, seen_at, now)| {
        let lock = LockEntry::from_stored("l".into(), seen_at, now, &raw);
        let _ = crate::RowState::of(&lock, crate::Holder::Alive, now);
        let _ = crate::unlock::verdict(&lock, now, seen_at);
        let session = SessionEntry::from_stored("s".into(), 1, &raw, Some(seen_at));
        let _ = session.skew_estimate();
        if let Some(r) = session.record() {
            let _ = r.contention.waits();
            let totals = crate::contention::Totals::of(&r.contention);
            let _ = totals.waits();
            for q in [0.5, 0.99, 1.0] {
                let _ = crate::charts::quantile(&totals.wait_buckets, q);
            }
        }
        let _ = BlacklistEntry::from_stored("s".into(), 1, &raw);
        let _ = WaiterRecord::parse(&raw);
        let _ = crate::time::absolute_and_relative(seen_at, now);
        let _ = crate::time::human_duration(now);
        Ok(())
    });
}

#[test]
fn records_round_trip_what_they_encode() {
    let session = (
        any::<String>(),
        edge_i64(),
        edge_i64(),
        proptest::option::of(any::<String>()),
        any::<[u64; 5]>(),
    )
        .prop_map(|(s, started_at, heartbeat_at, waiting_for, n)| SessionRecord {
            v: RECORD_VERSION,
            session: s.clone(),
            service: s.clone(),
            host: s,
            pid: 7,
            started_at,
            heartbeat_at,
            waiting_for,
            contention: Contention {
                attempts: n[0],
                acquired: n[1],
                conflicts: n[2],
                lost: n[3],
                wait_buckets: vec![n[4]; crate::record::WAIT_BUCKETS_MS.len() + 1],
                wait_sum_ms: n[4],
            },
        });
    run(
        (lock_record(), session, any::<String>(), edge_i64()),
        |(lock, session, text, at)| {
            prop_assert_eq!(LockRecord::parse(&lock.to_json()), Ok(lock.clone()));
            let entry = LockEntry::from_stored("l".into(), 1, 1, &lock.to_json());
            prop_assert_eq!(entry.record(), Some(&lock));
            prop_assert_eq!(
                SessionRecord::parse(&serde_json::to_vec(&session).unwrap()),
                Ok(session.clone())
            );
            let b = BlacklistRecord::new(&text, &text, &text, at);
            prop_assert_eq!(BlacklistRecord::parse(&serde_json::to_vec(&b).unwrap()), Ok(b));
            let w = WaiterRecord {
                v: RECORD_VERSION,
                session: text,
                since: at,
            };
            prop_assert_eq!(WaiterRecord::parse(&serde_json::to_vec(&w).unwrap()), Ok(w));
            Ok(())
        },
    );
}
