//! `/metrics` over a hub fed by hand: what each family reads, and that the
//! counters only go up.

use std::time::Duration;

use lockscope_model::record::{Contention, SessionRecord, RECORD_VERSION};
use lockscope_model::view::ViewSpec;
use lockscope_model::{FleetEvent, LockEntry, LockRecord, SessionEntry, Snapshot, StoreStatus, Waiter};
use lockscope_store::{now_ms, ObserverEvent};
use prometheus_parse::{Scrape, Value};
use tokio::sync::mpsc;

use super::*;
use crate::live::hub::HubHandle;

mod unlocker;

fn lock(name: &str, rev: i64, acquired_at: i64) -> LockEntry {
    lock_of(name, rev, acquired_at, "s1")
}

fn lock_of(name: &str, rev: i64, acquired_at: i64, session: &str) -> LockEntry {
    let rec = LockRecord {
        v: RECORD_VERSION,
        owner: format!("o{rev}"),
        session: session.into(),
        service: "svc".into(),
        host: "h".into(),
        pid: 1,
        purpose: String::new(),
        backtrace: [].into(),
        acquired_at,
        expected_runtime_ms: 3_600_000,
        alert_at: acquired_at + 3_600_000,
        auto_unlock_at: acquired_at + 7_200_000,
        heartbeat_at: acquired_at,
    };
    LockEntry::from_stored(name.into(), rev, rev, &rec.to_json())
}

fn session(id: &str, rev: i64, acquired: u64, conflicts: u64, waits_ms: &[u64]) -> SessionEntry {
    let mut contention = Contention {
        attempts: acquired + conflicts,
        acquired,
        conflicts,
        ..Contention::default()
    };
    for ms in waits_ms {
        contention.record_wait(*ms);
    }
    let rec = SessionRecord {
        v: RECORD_VERSION,
        session: id.into(),
        service: "svc".into(),
        host: "h".into(),
        pid: 1,
        started_at: 0,
        heartbeat_at: now_ms(),
        waiting_for: None,
        contention,
    };
    SessionEntry::from_stored(id.into(), rev, &serde_json::to_vec(&rec).unwrap(), None)
}

/// The value of `name` for fleet `fleet` (a histogram: its count).
fn value(scrape: &Scrape, name: &str, fleet: &str) -> Option<f64> {
    scrape
        .samples
        .iter()
        .find(|s| s.metric == name && s.labels.get("fleet") == Some(fleet))
        .map(|s| match &s.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
            Value::Histogram(h) => h.last().map_or(0.0, |b| b.count),
            Value::Summary(_) => f64::NAN,
        })
}

fn scrape(m: &Metrics) -> (String, Scrape) {
    let text = m.encode().unwrap();
    let lines = text.lines().map(|l| Ok(l.to_string()));
    (text.clone(), Scrape::parse(lines).unwrap())
}

/// Scrapes until `ok` holds (the hub applies events on its own task).
async fn until(m: &Metrics, what: &str, ok: impl Fn(&Scrape) -> bool) -> Scrape {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (text, s) = scrape(m);
        if ok(&s) {
            return s;
        }
        assert!(tokio::time::Instant::now() < deadline, "{what}; last scrape:\n{text}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn hub() -> (mpsc::Sender<ObserverEvent>, HubHandle, Metrics) {
    let (tx, rx) = mpsc::channel(64);
    let hub = HubHandle::with_events("f", "test", rx);
    let metrics = Metrics::for_fleets(&Fleets::new(vec![hub.clone()]));
    (tx, hub, metrics)
}

#[tokio::test]
async fn every_family_is_there_from_the_start_at_zero() {
    let (_tx, _hub, m) = hub();
    let (text, s) = scrape(&m);
    assert!(text.ends_with("# EOF\n"), "{text}");
    for name in [
        "lockscope_locks_held",
        "lockscope_lock_waiters",
        "lockscope_locks_overdue",
        "lockscope_locks_expired",
        "lockscope_locks_orphaned",
        "lockscope_locks_blacklisted",
        "lockscope_locks_malformed",
        "lockscope_locks_foreign",
        "lockscope_oldest_lock_age_seconds",
        "lockscope_lock_acquisitions_total",
        "lockscope_lock_conflicts_total",
        "lockscope_lock_attempts_total",
        "lockscope_locks_lost_total",
        "lockscope_lock_wait_seconds_count",
        "lockscope_lock_wait_seconds_sum",
        "lockscope_store_up",
        "lockscope_store_reconnects_total",
        "lockscope_websocket_subscribers",
        "lockscope_websocket_lag_drops_total",
        "lockscope_unlocker_active",
        "lockscope_deadlock_cycles",
    ] {
        assert_eq!(value(&s, name, "f"), Some(0.0), "{name}\n{text}");
    }
    for outcome in UNLOCKER_OUTCOMES {
        assert!(
            text.contains(&format!(
                "lockscope_unlocker_releases_total{{fleet=\"f\",outcome=\"{outcome}\"}} 0\n"
            )),
            "{text}"
        );
    }
    for reason in UNLOCKER_FAILURE_REASONS {
        assert!(
            text.contains(&format!(
                "lockscope_unlocker_failures_total{{fleet=\"f\",reason=\"{reason}\"}} 0\n"
            )),
            "{text}"
        );
    }
    // Prometheus conventions: a TYPE (and HELP) for every family, units in names.
    assert!(text.contains("# TYPE lockscope_lock_acquisitions counter\n"));
    assert!(text.contains("# TYPE lockscope_lock_wait_seconds histogram\n"));
    assert!(text.contains("# UNIT lockscope_lock_wait_seconds seconds\n"));
    assert!(text.contains("# TYPE lockscope_oldest_lock_age_seconds gauge\n"));
    assert!(
        text.contains("lockscope_lock_wait_seconds_bucket{le=\"+Inf\",fleet=\"f\"} 0\n"),
        "{text}"
    );
    assert!(text.contains("# HELP lockscope_locks_held Locks held (every lock entry, malformed ones included).\n"));
}

#[tokio::test]
async fn counts_and_the_oldest_lock_come_from_the_hub() {
    let (tx, _hub, m) = hub();
    let now = now_ms();
    let snapshot = Snapshot {
        revision: 3,
        locks: vec![lock("a", 1, now - 90_000), lock("b", 2, now - 5_000)],
        waiters: vec![Waiter {
            lock: "a".into(),
            session: "s2".into(),
        }],
        sessions: Some(vec![session("s1", 1, 0, 0, &[]), session("s2", 1, 0, 0, &[])]),
        blacklist: vec![],
    };
    tx.send(ObserverEvent::Status(StoreStatus::Live { since: now }))
        .await
        .unwrap();
    tx.send(ObserverEvent::Events(vec![FleetEvent::Reset(snapshot)]))
        .await
        .unwrap();
    let s = until(&m, "two locks held", |s| {
        value(s, "lockscope_locks_held", "f") == Some(2.0)
    })
    .await;
    assert_eq!(value(&s, "lockscope_lock_waiters", "f"), Some(1.0));
    assert_eq!(value(&s, "lockscope_store_up", "f"), Some(1.0));
    let age = value(&s, "lockscope_oldest_lock_age_seconds", "f").unwrap();
    assert!((90.0..120.0).contains(&age), "the oldest lock is about 90 s old: {age}");
    // The oldest goes; the next oldest is now the oldest.
    tx.send(ObserverEvent::Events(vec![FleetEvent::Remove {
        name: "a".into(),
        revision: 4,
    }]))
    .await
    .unwrap();
    let s = until(&m, "one lock held", |s| {
        value(s, "lockscope_locks_held", "f") == Some(1.0)
    })
    .await;
    let age = value(&s, "lockscope_oldest_lock_age_seconds", "f").unwrap();
    assert!((5.0..30.0).contains(&age), "{age}");
    tx.send(ObserverEvent::Events(vec![FleetEvent::Remove {
        name: "b".into(),
        revision: 5,
    }]))
    .await
    .unwrap();
    let s = until(&m, "none held", |s| value(s, "lockscope_locks_held", "f") == Some(0.0)).await;
    assert_eq!(value(&s, "lockscope_oldest_lock_age_seconds", "f"), Some(0.0));
}

/// docs/operations.md, Metrics: "`lockscope_deadlock_cycles` … Cycles in the
/// fleet's deadlock view".
#[tokio::test]
async fn deadlock_cycles_follow_the_fleets_deadlock_view() {
    let (tx, _hub, m) = hub();
    let now = now_ms();
    let wait = |session: &str, lock: &str| Waiter {
        lock: lock.into(),
        session: session.into(),
    };
    // A waits for y (B's), B for x (A's): one cycle. C and D likewise on z
    // and w: a second. E waits for x without being on a cycle.
    let held = [("x", "A"), ("y", "B"), ("z", "C"), ("w", "D")];
    let snapshot = Snapshot {
        revision: 9,
        locks: (held.iter().enumerate())
            .map(|(i, (l, s))| lock_of(l, i as i64 + 1, now, s))
            .collect(),
        waiters: vec![
            wait("A", "y"),
            wait("B", "x"),
            wait("C", "w"),
            wait("D", "z"),
            wait("E", "x"),
        ],
        sessions: None,
        blacklist: vec![],
    };
    tx.send(ObserverEvent::Events(vec![FleetEvent::Reset(snapshot)]))
        .await
        .unwrap();
    until(&m, "two cycles", |s| {
        value(s, "lockscope_deadlock_cycles", "f") == Some(2.0)
    })
    .await;
    // B gives up waiting: A-B is a chain now.
    tx.send(ObserverEvent::Events(vec![FleetEvent::StoppedWaiting(wait("B", "x"))]))
        .await
        .unwrap();
    until(&m, "one cycle", |s| {
        value(s, "lockscope_deadlock_cycles", "f") == Some(1.0)
    })
    .await;
    tx.send(ObserverEvent::Events(vec![FleetEvent::Remove {
        name: "w".into(),
        revision: 10,
    }]))
    .await
    .unwrap();
    until(&m, "no cycle", |s| {
        value(s, "lockscope_deadlock_cycles", "f") == Some(0.0)
    })
    .await;
}

#[tokio::test]
async fn contention_counters_add_increases_and_never_go_down() {
    let (tx, _hub, m) = hub();
    let send = |evs: Vec<FleetEvent>| {
        let tx = tx.clone();
        async move { tx.send(ObserverEvent::Events(evs)).await.unwrap() }
    };
    // At start, s1 has history: a baseline, not counted.
    send(vec![FleetEvent::Reset(Snapshot {
        sessions: Some(vec![session("s1", 1, 10, 4, &[1, 2, 3])]),
        ..Snapshot::default()
    })])
    .await;
    // s2 is new and registers with zero counters.
    send(vec![FleetEvent::Session(session("s2", 2, 0, 0, &[]))]).await;
    // Both heartbeat with more.
    send(vec![
        FleetEvent::Session(session("s1", 3, 12, 5, &[1, 2, 3, 40, 2_000])),
        FleetEvent::Session(session("s2", 4, 1, 1, &[700])),
    ])
    .await;
    let s = until(&m, "3 acquisitions", |s| {
        value(s, "lockscope_lock_acquisitions_total", "f") == Some(3.0)
    })
    .await;
    assert_eq!(value(&s, "lockscope_lock_conflicts_total", "f"), Some(2.0));
    assert_eq!(value(&s, "lockscope_lock_attempts_total", "f"), Some(5.0));
    assert_eq!(value(&s, "lockscope_lock_wait_seconds_count", "f"), Some(3.0));
    assert_eq!(value(&s, "lockscope_lock_wait_seconds_sum", "f"), Some(2.74));
    let h = s
        .samples
        .iter()
        .find_map(|x| match &x.value {
            Value::Histogram(h) if x.metric == "lockscope_lock_wait_seconds" => Some(h.clone()),
            _ => None,
        })
        .expect("the wait histogram");
    let cumulative: Vec<(f64, f64)> = h.iter().map(|b| (b.less_than, b.count)).collect();
    assert_eq!(
        cumulative,
        vec![
            (0.001, 0.0),
            (0.005, 0.0),
            (0.01, 0.0),
            (0.05, 1.0),
            (0.1, 1.0),
            (0.5, 1.0),
            (1.0, 2.0),
            (5.0, 3.0),
            (10.0, 3.0),
            (60.0, 3.0),
            (f64::INFINITY, 3.0),
        ]
    );
    // s1 goes away: nothing is taken back.
    send(vec![FleetEvent::SessionGone { id: "s1".into() }]).await;
    // A resync without s2 (gone while we were away), then s2's id back with
    // lower counters (a writer that started over): nothing added or taken.
    send(vec![FleetEvent::Reset(Snapshot {
        sessions: Some(vec![]),
        ..Snapshot::default()
    })])
    .await;
    send(vec![FleetEvent::Session(session("s2", 9, 0, 0, &[]))]).await;
    send(vec![FleetEvent::Session(session("s2", 10, 2, 0, &[]))]).await;
    let s = until(&m, "5 acquisitions", |s| {
        value(s, "lockscope_lock_acquisitions_total", "f") == Some(5.0)
    })
    .await;
    assert_eq!(value(&s, "lockscope_lock_conflicts_total", "f"), Some(2.0));
}

#[tokio::test]
async fn store_reconnects_count_returns_to_live_after_a_failure() {
    let (tx, _hub, m) = hub();
    let down = StoreStatus::Unreachable {
        since: 1,
        error: "refused".into(),
        detail: String::new(),
        retry_at: 2,
    };
    for status in [
        StoreStatus::Connecting { since: 0 },
        StoreStatus::Live { since: 1 },
        down.clone(),
        down.clone(),
        StoreStatus::Live { since: 3 },
        down,
    ] {
        tx.send(ObserverEvent::Status(status)).await.unwrap();
    }
    let s = until(&m, "down again", |s| {
        value(s, "lockscope_store_reconnects_total", "f") == Some(1.0)
            && value(s, "lockscope_store_up", "f") == Some(0.0)
    })
    .await;
    assert_eq!(value(&s, "lockscope_store_up", "f"), Some(0.0));
    tx.send(ObserverEvent::Status(StoreStatus::Live { since: 4 }))
        .await
        .unwrap();
    until(&m, "back", |s| {
        value(s, "lockscope_store_reconnects_total", "f") == Some(2.0)
            && value(s, "lockscope_store_up", "f") == Some(1.0)
    })
    .await;
}

#[tokio::test]
async fn a_subscriber_that_stops_reading_is_a_lag_drop() {
    let (tx, hub, m) = hub();
    let sub = hub.subscribe(1, ViewSpec::default()).await.unwrap();
    // Never read: status changes go to every subscriber and fill its queue.
    for i in 0..40 {
        tx.send(ObserverEvent::Status(StoreStatus::Live { since: i }))
            .await
            .unwrap();
    }
    until(&m, "one lag drop", |s| {
        value(s, "lockscope_websocket_lag_drops_total", "f") == Some(1.0)
    })
    .await;
    drop(sub);
}

#[tokio::test]
async fn websocket_connections_count_while_open() {
    let (_tx, hub, m) = hub();
    let a = hub.stats().websocket_opened();
    let b = hub.stats().websocket_opened();
    assert_eq!(value(&scrape(&m).1, "lockscope_websocket_subscribers", "f"), Some(2.0));
    drop(a);
    assert_eq!(value(&scrape(&m).1, "lockscope_websocket_subscribers", "f"), Some(1.0));
    drop(b);
    assert_eq!(value(&scrape(&m).1, "lockscope_websocket_subscribers", "f"), Some(0.0));
}

#[tokio::test(start_paused = true)]
async fn the_charts_sample_the_counters_on_the_monotonic_clock() {
    use lockscope_model::charts::ChartWindow;
    let (tx, hub, _m) = hub();
    let send = |evs: Vec<FleetEvent>| {
        let tx = tx.clone();
        async move { tx.send(ObserverEvent::Events(evs)).await.unwrap() }
    };
    // A baseline, then two heartbeats with more, 30 s apart (paused time:
    // the sampler ticks every 2.5 s of it).
    send(vec![FleetEvent::Reset(Snapshot {
        sessions: Some(vec![session("s1", 1, 10, 4, &[1])]),
        ..Snapshot::default()
    })])
    .await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    send(vec![FleetEvent::Session(session("s1", 2, 12, 5, &[1, 40, 40]))]).await;
    tokio::time::sleep(Duration::from_secs(30)).await;
    send(vec![FleetEvent::Session(session("s1", 3, 15, 9, &[1, 40, 40, 3_000]))]).await;
    tokio::time::sleep(Duration::from_secs(31)).await;

    let frame = ChartWindow::FiveMinutes.frame(now_ms());
    let c = hub.stats().counter_charts(&frame);
    assert_eq!(c.sessions, 1);
    assert!(c.since.is_some());
    let total = c.total.expect("samples over 71 s");
    assert_eq!(total.ms, 70_000, "first to last sample, on the monotonic clock");
    assert_eq!(
        (total.counts.acquired, total.counts.conflicts, total.counts.attempts),
        (5, 5, 10)
    );
    assert_eq!(total.counts.waits(), 3);
    assert!((total.acquired_per_s() - 5.0 / 70.0).abs() < 1e-9);
    // The buckets' increases follow one another: they add up to the total.
    let known: Vec<_> = c.buckets.iter().flatten().collect();
    assert!(!known.is_empty());
    let sum = |f: fn(&lockscope_model::charts::Increase) -> u64| known.iter().map(|i| f(i)).sum::<u64>();
    assert_eq!(sum(|i| i.counts.acquired), 5);
    assert_eq!(sum(|i| i.counts.conflicts), 5);
    assert_eq!(sum(|i| i.counts.waits()), 3);
}
