use super::*;
use lockscope_model::{FleetEvent, LockEntry, ServerMsg, Window};

fn up(name: &str, rev: i64) -> FleetEvent {
    FleetEvent::Upsert(LockEntry::from_stored(name.into(), rev, rev, b"x"))
}

fn parse(f: &Frame) -> ServerMsg {
    serde_json::from_str(f).unwrap()
}

async fn next_window(sub: &mut Subscription) -> WindowFrame {
    loop {
        let f = tokio::time::timeout(Duration::from_secs(5), sub.frames.recv())
            .await
            .expect("a frame in time")
            .expect("hub running");
        if let ServerMsg::Window(w) = parse(&f) {
            return w;
        }
    }
}

#[tokio::test]
async fn a_subscriber_gets_its_window_then_what_changes_in_it() {
    let (tx, rx) = mpsc::channel(16);
    let hub = HubHandle::with_events("f", "test", rx);
    tx.send(ObserverEvent::Events(vec![up("a", 1)])).await.unwrap();
    let mut sub = hub.subscribe(1, ViewSpec::default()).await.unwrap();
    match parse(&sub.frames.recv().await.unwrap()) {
        ServerMsg::Status { status, .. } => assert!(matches!(status, StoreStatus::Connecting { .. })),
        other => panic!("status first, got {other:?}"),
    }
    let mut w = Window::default();
    // The event and the subscription race; either way the window ends with a.
    while w.order() != ["a"] {
        let f = next_window(&mut sub).await;
        sub.ack(f.seq).await.unwrap();
        w.apply(f).unwrap();
    }
    tx.send(ObserverEvent::Events(vec![up("b", 2), up("a", 1)]))
        .await
        .unwrap();
    let f = next_window(&mut sub).await;
    assert_eq!(f.order.as_deref(), Some(&["a".to_string(), "b".to_string()][..]));
    assert_eq!(f.rows.len(), 1, "a is unchanged; only b travels");
    let live = StoreStatus::Live { since: 5 };
    tx.send(ObserverEvent::Status(live.clone())).await.unwrap();
    loop {
        if let ServerMsg::Status { status, .. } = parse(&sub.frames.recv().await.unwrap()) {
            assert_eq!(status, live);
            break;
        }
    }
    // The summary follows without asking the hub.
    let mut summary = hub.summary.clone();
    summary
        .wait_for(|s| s.status == live && s.counts.held == 2)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_page_render_is_one_window_whatever_the_fleet_size() {
    let (tx, rx) = mpsc::channel(16);
    let hub = HubHandle::with_events("f", "test", rx);
    let many: Vec<FleetEvent> = (0..5_000).map(|i| up(&format!("l{i:05}"), i + 1)).collect();
    tx.send(ObserverEvent::Events(many)).await.unwrap();
    let mut summary = hub.summary.clone();
    summary.wait_for(|s| s.counts.held == 5_000).await.unwrap();
    let view = ViewSpec {
        limit: 50,
        offset: 4_990,
        ..ViewSpec::default()
    };
    let (frame, _) = hub.render(view).await.unwrap();
    assert_eq!(frame.total, 5_000);
    assert_eq!(frame.offset, 4_950, "clamped so the window is full");
    assert_eq!(frame.rows.len(), 50);
    assert!(frame.full);
}

#[tokio::test]
async fn views_whose_index_is_built_off_the_task_are_served_once_it_is() {
    let (tx, rx) = mpsc::channel(16);
    let hub = HubHandle::start("f", "test", rx, Views::with_off_task_build_from(0), None, None);
    let many: Vec<FleetEvent> = (0..3_000).map(|i| up(&format!("l{i:05}"), i + 1)).collect();
    tx.send(ObserverEvent::Events(many)).await.unwrap();
    let mut summary = hub.summary.clone();
    summary.wait_for(|s| s.counts.held == 3_000).await.unwrap();
    let by_name = |prefix: &str| ViewSpec {
        filter: lockscope_model::view::Filter {
            prefix: Some(prefix.into()),
            ..Default::default()
        },
        sort: lockscope_model::view::Sort {
            key: lockscope_model::view::SortKey::Name,
            reverse: true,
        },
        limit: 10,
        offset: 0,
    };
    // Two page renders and a subscriber at once, each on an index of its own.
    let (a, b) = tokio::join!(hub.render(by_name("l01")), hub.render(by_name("l02")));
    let (a, b) = (a.unwrap().0, b.unwrap().0);
    assert_eq!((a.total, a.order.unwrap()[0].as_str()), (1_000, "l01999"));
    assert_eq!((b.total, b.order.unwrap()[0].as_str()), (1_000, "l02999"));
    let mut sub = hub.subscribe(1, by_name("l00")).await.unwrap();
    tx.send(ObserverEvent::Events(vec![up("l00999", 5_000)])).await.unwrap();
    let f = next_window(&mut sub).await;
    assert_eq!((f.total, f.order.unwrap()[0].as_str()), (1_000, "l00999"));
}

#[tokio::test]
async fn a_watched_lock_follows_its_waiters_and_says_how_long_each_waited() {
    use lockscope_model::{Snapshot, Waiter};
    let w = |session: &str| Waiter {
        lock: "a".into(),
        session: session.into(),
    };
    let (tx, rx) = mpsc::channel(16);
    let hub = HubHandle::with_events("f", "test", rx);
    // `old` was already waiting when the store was first read.
    tx.send(ObserverEvent::Events(vec![FleetEvent::Reset(Snapshot {
        revision: 1,
        locks: vec![LockEntry::from_stored("a".into(), 1, 1, b"x")],
        waiters: vec![w("old")],
        ..Snapshot::default()
    })]))
    .await
    .unwrap();
    let mut detail = hub.watch_lock("a").await.unwrap();
    detail
        .wait_for(|d| d.as_ref().is_some_and(|d| d.waiters.len() == 1))
        .await
        .unwrap();
    let before = now_ms();
    tx.send(ObserverEvent::Events(vec![FleetEvent::Waiting(w("new"))]))
        .await
        .unwrap();
    let d = tokio::time::timeout(
        Duration::from_secs(5),
        detail.wait_for(|d| d.as_ref().is_some_and(|d| d.waiters.len() == 2)),
    )
    .await
    .expect("the new waiter in time")
    .unwrap()
    .clone()
    .unwrap();
    let new = d.waiters.iter().find(|x| x.session == "new").unwrap();
    let old = d.waiters.iter().find(|x| x.session == "old").unwrap();
    assert!(!new.at_least && new.since >= before && new.since <= now_ms(), "{new:?}");
    assert!(old.at_least, "seen in the first read: waiting at least since then");
    assert!(old.since <= new.since);
    // Another lock's change does not wake this watcher; this lock's release does.
    tx.send(ObserverEvent::Events(vec![up("b", 2)])).await.unwrap();
    tx.send(ObserverEvent::Events(vec![FleetEvent::Remove {
        name: "a".into(),
        revision: 3,
    }]))
    .await
    .unwrap();
    let d = tokio::time::timeout(
        Duration::from_secs(5),
        detail.wait_for(|d| d.as_ref().is_some_and(|d| d.entry.is_none())),
    )
    .await
    .expect("the release in time")
    .unwrap()
    .clone()
    .unwrap();
    assert_eq!(d.waiters.len(), 2, "still waiting for the now free lock");
}

/// A top that needs a pass over the fleet waits one turn for it, not a sleep:
/// the hub wakes at once for the pass it owes (tokio's clock is paused, so a
/// hub asleep until its longest sleep would show as a second gone by).
#[tokio::test(start_paused = true)]
async fn a_view_waiting_for_the_pass_is_answered_in_the_next_turn() {
    let (tx, rx) = mpsc::channel(16);
    let hub = HubHandle::start("f", "test", rx, Views::with_top_from(0), None, None);
    let many: Vec<FleetEvent> = (0..100).map(|i| up(&format!("l{i:03}"), i + 1)).collect();
    tx.send(ObserverEvent::Events(many)).await.unwrap();
    let mut summary = hub.summary.clone();
    summary.wait_for(|s| s.counts.held == 100).await.unwrap();
    let by_fence = ViewSpec {
        sort: lockscope_model::view::Sort {
            key: lockscope_model::view::SortKey::Fence,
            reverse: false,
        },
        limit: 10,
        offset: 0,
        ..ViewSpec::default()
    };
    let asked = tokio::time::Instant::now();
    let mut sub = hub.subscribe(1, by_fence).await.unwrap();
    let f = next_window(&mut sub).await;
    assert_eq!(
        (f.total, f.order.unwrap()[0].as_str()),
        (100, "l099"),
        "highest fence first"
    );
    assert!(asked.elapsed() < MAX_SLEEP / 2, "answered after {:?}", asked.elapsed());
}
