//! The lock history outlives the store's memory and the server: events recorded
//! from a real etcd are still there after etcd compacted its history and the
//! server restarted; the restart's snapshot adds nothing twice; a lock released
//! while no dashboard watched gets its end from the first snapshot after; and
//! the table at an instant in between is the one that stood then. Times
//! outside the accepted range are refused with 400 by every route that takes
//! one, and what a query makes the server build is capped (issue 23).

use std::time::Duration;

use lockscope::live::hub::HubHandle;
use lockscope::remember::history::History;
use lockscope_model::history::{HistoryEvent, HistoryQuery, Kind};
use lockscope_model::StoreStatus;
use lockscope_store::client::{LockOptions, Session, SessionConfig};
use lockscope_store::etcd::{EtcdConfig, EtcdLocks};
use lockscope_store::now_ms;
use lockscope_store::spec::StoreSpec;
use lockscope_store::testing::EtcdServer;

const PREFIX: &str = "/history-it/";

async fn all(history: &History) -> Vec<HistoryEvent> {
    history
        .query(&HistoryQuery {
            fleet: "it".into(),
            limit: Some(10_000),
            ..HistoryQuery::default()
        })
        .await
        .unwrap()
}

fn has(events: &[HistoryEvent], kind: Kind, lock: &str) -> usize {
    events
        .iter()
        .filter(|e| e.kind == kind && e.lock.as_deref() == Some(lock))
        .count()
}

/// Polls `history` until `done` holds (10 s at most).
async fn until(history: &History, what: &str, done: impl Fn(&[HistoryEvent]) -> bool) -> Vec<HistoryEvent> {
    for _ in 0..200 {
        let events = all(history).await;
        if done(&events) {
            return events;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{what}: not in the history within 10 s: {:#?}", all(history).await);
}

fn start(spec: &StoreSpec, history: &History) -> HubHandle {
    let recorder = Some((history.recorder("it"), "replica-1".to_string()));
    HubHandle::spawn_recording("it", "etcd under test", spec.open().unwrap(), recorder)
}

async fn live(hub: &HubHandle) {
    for _ in 0..200 {
        if matches!(hub.summary().status, StoreStatus::Live { .. }) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the hub never went live: {:?}", hub.summary().status);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_survives_compaction_and_restart() {
    let etcd = EtcdServer::start().await;
    let spec = StoreSpec::Etcd {
        endpoints: vec![etcd.endpoint()],
        prefix: Some(PREFIX.into()),
    };
    let direct = EtcdLocks::connect(EtcdConfig::new(vec![etcd.endpoint()], PREFIX))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("history.db").display());
    let history = History::open(&url, None).await.unwrap();
    let hub = start(&spec, &history);
    live(&hub).await;

    let session = Session::open(spec.connect().await.unwrap(), SessionConfig::new("history-it"))
        .await
        .unwrap();
    let opts = || LockOptions::new("history test", Duration::from_secs(60));
    let a = session.lock("a", opts()).await.unwrap();
    let b = session.lock("b", opts()).await.unwrap();
    let b_fence = b.fence();
    assert!(a.unlock().await.unwrap());
    let before = until(&history, "a taken and released, b taken", |e| {
        has(e, Kind::Acquired, "a") == 1 && has(e, Kind::Released, "a") == 1 && has(e, Kind::Acquired, "b") == 1
    })
    .await;
    let b_taken_at = before.iter().find(|e| e.lock.as_deref() == Some("b")).unwrap().at;

    // The server stops; meanwhile b is released, c taken, and etcd forgets it all.
    drop(hub);
    drop(history);
    // Longer than the margin a first snapshot leaves for acquisitions another
    // replica may have recorded after it was read.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let gap = now_ms();
    assert!(b.unlock().await.unwrap());
    let c = session.lock("c", opts()).await.unwrap();
    direct.compact(c.fence()).await.unwrap();

    // The restart reads the same history and a fresh snapshot.
    let history = History::open(&url, None).await.unwrap();
    let hub = start(&spec, &history);
    live(&hub).await;
    let after = until(&history, "c taken, b's end found", |e| {
        has(e, Kind::Acquired, "c") == 1 && has(e, Kind::Released, "b") == 1
    })
    .await;
    assert_eq!(after[..before.len()], before[..], "the earlier events, unchanged");
    for (kind, lock) in [(Kind::Acquired, "a"), (Kind::Released, "a"), (Kind::Acquired, "b")] {
        assert_eq!(has(&after, kind, lock), 1, "{kind:?} {lock}: nothing recorded twice");
    }
    let b_end = after
        .iter()
        .find(|e| e.kind == Kind::Released && e.lock.as_deref() == Some("b"))
        .unwrap();
    assert_eq!(b_end.fence, Some(b_fence));
    assert!(b_end.at >= gap, "b's end is recorded when it was found, not earlier");
    assert!(b_end.detail.contains("no dashboard"), "{}", b_end.detail);

    // The table at each instant.
    let names = |t: lockscope_model::history::TableAt| t.locks.into_iter().map(|e| e.name).collect::<Vec<_>>();
    // Events of one hub turn share their time: what stood at each recorded
    // instant, worked out simply from the events (acquired at or before, not
    // ended at or before).
    for t in after.iter().flat_map(|e| [e.at - 1, e.at]) {
        let mut want: Vec<String> = after
            .iter()
            .filter(|e| e.kind == Kind::Acquired && e.at <= t)
            .filter(|a| {
                !after
                    .iter()
                    .any(|e| e.kind.ends_hold() && e.lock == a.lock && e.fence == a.fence && e.at <= t)
            })
            .filter_map(|a| a.lock.clone())
            .collect();
        want.sort();
        assert_eq!(names(history.table_at("it", t).await.unwrap()), want, "at {t}");
    }
    assert!(names(history.table_at("it", b_taken_at).await.unwrap()).contains(&"b".to_string()));
    assert_eq!(names(history.table_at("it", gap).await.unwrap()), ["b"]);
    assert_eq!(names(history.table_at("it", now_ms()).await.unwrap()), ["c"]);
    drop(c);
}

/// GET `path` from the server at `addr`: status and body.
async fn get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    use http_body_util::BodyExt;
    let req = hyper::Request::builder()
        .uri(format!("http://{addr}{path}"))
        .body(http_body_util::Full::new(hyper::body::Bytes::new()))
        .unwrap();
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build_http();
    let ask = async {
        let resp = client.request(req).await.unwrap_or_else(|e| panic!("{path}: {e}"));
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    };
    tokio::time::timeout(Duration::from_secs(30), ask)
        .await
        .unwrap_or_else(|_| panic!("{path}: no answer within 30 s"))
}

/// Issue 23: `GET /history?fleet=F&lock=NAME&from=0&to=9223372036854775807`
/// made the release build allocate without bound (its timeline's tick loop
/// wrapped around) and the debug build panic, as did
/// `from=-9223372036854775808&to=-9223372036854775808`. A real server on a real
/// SQLite history: every route that takes a time answers 400 stating the
/// accepted range, the charts (which take a window, not times) answer 200, and
/// the table at an instant is capped at `MAX_TABLE_LOCKS` locks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn times_outside_the_range_are_refused_with_it_and_answers_are_capped() {
    use lockscope::auth::Auth;
    use lockscope::live::hub::Fleets;
    use lockscope::remember::audit::AuditLog;
    use lockscope::web::AppState;
    use lockscope_model::history::{Draft, TableAt, MAX_TABLE_LOCKS};
    use lockscope_model::time::RANGE_HELP;

    const F: &str = "F";
    let dir = tempfile::tempdir().unwrap();
    let spec = StoreSpec::sqlite_file(&dir.path().join("locks.db"));
    let audit = AuditLog::open(&format!("sqlite:{}", dir.path().join("audit.db").display()))
        .await
        .unwrap();
    let history = History::open(&format!("sqlite:{}", dir.path().join("history.db").display()), None)
        .await
        .unwrap();
    // One more lock than the table at an instant answers, NAME among them.
    let stored = br#"{"v":1,"owner":"o","session":"s","service":"svc","host":"h","pid":1,"acquired_at":0,
        "expected_runtime_ms":1,"alert_at":1,"auto_unlock_at":2,"heartbeat_at":0}"#;
    let record =
        serde_json::to_string(&lockscope_model::LockEntry::from_stored("x".into(), 1, 1, stored).body).unwrap();
    let start = now_ms() - 60_000;
    let events: Vec<HistoryEvent> = (0..=MAX_TABLE_LOCKS)
        .map(|i| {
            let d = Draft {
                kind: Some(Kind::Acquired),
                lock: Some(if i == 0 { "NAME".into() } else { format!("l{i:05}") }),
                fence: Some(i as i64 + 1),
                revision: Some(i as i64 + 1),
                record: Some(record.clone()),
                ..Draft::default()
            };
            HistoryEvent::new(F, start + i as i64, d)
        })
        .collect();
    history.write(events).await.unwrap();
    let hub = HubHandle::spawn_recording(F, "sqlite under test", spec.open().unwrap(), None);
    let (_stop, stop_rx) = tokio::sync::watch::channel(false);
    let state = AppState::new(
        Fleets::new(vec![hub.clone()]),
        "target/site".into(),
        stop_rx.clone(),
        audit.clone(),
        Auth::new(None, audit),
    )
    .with_history(history.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(lockscope::serve(listener, state, stop_rx, Duration::from_secs(1)));

    for range in [
        "from=0&to=9223372036854775807",
        "from=-9223372036854775808&to=-9223372036854775808",
    ] {
        // docs/api.md: "Every time a query takes … lies between 1970-01-01T00:00:00Z and
        // 9999-12-31T23:59:59.999Z (unix ms 0 to 253402300799999): one outside is a `400`
        // stating that range." docs/operations.md: "outside, the page answers 400 with the
        // reason, showing the default range; the API answers 400".
        let (status, body) = get(addr, &format!("/history?fleet={F}&lock=NAME&{range}")).await;
        assert_eq!(status, 400, "/history?{range}: {body}");
        assert!(body.contains(RANGE_HELP), "the page states the range: {body}");
        let (status, body) = get(addr, &format!("/api/v1/fleets/{F}/history?lock=NAME&{range}")).await;
        assert_eq!(status, 400, "{range}: {body}");
        assert!(body.contains(RANGE_HELP), "{body}");
        // docs/api.md: "60, 60 or 96 buckets, whatever the query (other parameters, such as
        // times, are ignored)".
        let (status, body) = get(addr, &format!("/api/v1/fleets/{F}/charts?{range}")).await;
        assert_eq!(status, 200, "{body}");
        let charts: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(charts["frame"]["buckets"], 60, "{body}");
        let (status, body) = get(addr, &format!("/charts?fleet={F}&{range}")).await;
        assert_eq!(status, 200, "{body}");
    }
    for at in ["9223372036854775807", "-9223372036854775808", "now-9999999999999d"] {
        let (status, body) = get(addr, &format!("/api/v1/fleets/{F}/table?at={at}")).await;
        assert_eq!(status, 400, "at={at}: {body}");
        assert!(body.contains(RANGE_HELP), "{body}");
        let (status, body) = get(addr, &format!("/history?fleet={F}&at={at}")).await;
        assert_eq!(status, 400, "/history?at={at}: {body}");
        assert!(body.contains(RANGE_HELP), "{body}");
    }

    // The whole accepted range is served, its answers capped. docs/operations.md: "the page lists
    // at most `limit` events (default 500 …), draws one lock's timeline … with at most 8 axis
    // ticks"; docs/api.md: "At most 10,000 locks and 10,000 waiters are answered
    // (`MAX_TABLE_LOCKS`), the first by name; when there were more, `locks_total` /
    // `waiters_total` say how many".
    let whole = "from=0&to=253402300799999";
    let (status, body) = get(addr, &format!("/history?fleet={F}&lock=NAME&{whole}")).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#"data-testid="timeline-hold""#), "{body}");
    let ticks = body.matches(r#"class="tick-label""#).count();
    assert!((1..=8).contains(&ticks), "{ticks} ticks");
    let (status, body) = get(addr, &format!("/api/v1/fleets/{F}/history?{whole}")).await;
    assert_eq!(status, 200);
    let events: Vec<HistoryEvent> = serde_json::from_str(&body).unwrap();
    assert_eq!(events.len(), 500, "the default limit");
    let (status, body) = get(addr, &format!("/api/v1/fleets/{F}/table?at=now")).await;
    assert_eq!(status, 200);
    let table: TableAt = serde_json::from_str(&body).unwrap();
    assert_eq!(table.locks.len(), MAX_TABLE_LOCKS);
    assert_eq!(table.locks_total, Some(MAX_TABLE_LOCKS as u64 + 1));
    assert_eq!(table.locks[0].name, "NAME", "the first by name");
}
