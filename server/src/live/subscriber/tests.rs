use super::*;
use futures::channel::mpsc;
use lockscope_model::{FleetEvent, LockEntry, Window, WindowFrame};
use lockscope_store::ObserverEvent;

struct Client {
    to_server: mpsc::UnboundedSender<WsIn>,
    from_server: mpsc::UnboundedReceiver<WsOut>,
}

impl Client {
    async fn next(&mut self) -> WsOut {
        tokio::time::timeout(Duration::from_secs(5), self.from_server.next())
            .await
            .unwrap()
            .unwrap()
    }
    /// The next message that is not a periodic overview.
    async fn msg(&mut self) -> ServerMsg {
        loop {
            match self.next().await {
                WsOut::Text(t) => match serde_json::from_str(&t).unwrap() {
                    ServerMsg::Overview { .. } => continue,
                    m => return m,
                },
                other => panic!("expected a message, got {other:?}"),
            }
        }
    }
    async fn window(&mut self) -> WindowFrame {
        loop {
            if let ServerMsg::Window(w) = self.msg().await {
                return w;
            }
        }
    }
    fn send(&self, text: &str) {
        self.to_server.unbounded_send(WsIn::Text(text.into())).unwrap();
    }
}

fn start() -> (
    tokio::sync::mpsc::Sender<ObserverEvent>,
    Client,
    watch::Sender<bool>,
    HubHandle,
) {
    let (ev_tx, ev_rx) = tokio::sync::mpsc::channel(64);
    let hub = HubHandle::with_events("test-fleet", "test", ev_rx);
    let (out_tx, out_rx) = mpsc::unbounded();
    let (in_tx, in_rx) = mpsc::unbounded();
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(serve_subscriber(
        hub.clone(),
        Fleets::new(vec![hub.clone()]),
        out_tx,
        in_rx,
        stop_rx,
    ));
    (
        ev_tx,
        Client {
            to_server: in_tx,
            from_server: out_rx,
        },
        stop_tx,
        hub,
    )
}

const DEFAULT_VIEW: &str = r#"{"type":"view","id":1,"view":{}}"#;

#[tokio::test]
async fn a_watch_gets_the_lock_now_then_its_changes_and_cannot_also_view() {
    let (ev, mut c, _stop, _hub) = start();
    assert!(matches!(c.msg().await, ServerMsg::Hello { .. }));
    c.send(r#"{"type":"watch","watch":{"kind":"lock","name":"a"}}"#);
    match c.msg().await {
        ServerMsg::Detail { detail, .. } => assert!(detail.name == "a" && detail.entry.is_none()),
        other => panic!("the current detail first, got {other:?}"),
    }
    ev.send(ObserverEvent::Events(vec![FleetEvent::Upsert(LockEntry::from_stored(
        "a".into(),
        4,
        4,
        b"x",
    ))]))
    .await
    .unwrap();
    match c.msg().await {
        ServerMsg::Detail { detail, .. } => assert_eq!(detail.entry.map(|e| e.fence), Some(4)),
        other => panic!("the change, got {other:?}"),
    }
    c.send(DEFAULT_VIEW);
    assert!(
        matches!(c.msg().await, ServerMsg::Error { ref reason } if reason.contains("either shows a view or watches"))
    );
    assert!(matches!(
        c.next().await,
        WsOut::Close {
            code: close::POLICY_VIOLATION,
            ..
        }
    ));
}

#[tokio::test]
async fn hello_view_window_pong_and_shutdown() {
    let (_ev, mut c, stop, _hub) = start();
    assert!(
        matches!(c.msg().await, ServerMsg::Hello { protocol: PROTOCOL_VERSION, ref fleet, .. } if fleet == "test-fleet")
    );
    c.send(DEFAULT_VIEW);
    assert!(matches!(c.msg().await, ServerMsg::Status { .. }));
    let w = c.window().await;
    assert!(w.full && w.total == 0 && w.view_id == 1);
    c.send(r#"{"type":"ping","nonce":42}"#);
    assert!(matches!(c.msg().await, ServerMsg::Pong { nonce: 42, .. }));
    stop.send(true).unwrap();
    loop {
        match c.next().await {
            WsOut::Close { code, reason } => {
                assert_eq!((code, reason.as_str()), (close::GOING_AWAY, "server shutting down"));
                break;
            }
            WsOut::Text(_) => {}
        }
    }
}

#[tokio::test]
async fn an_overview_follows_the_subscription() {
    let (_ev, mut c, _stop, _hub) = start();
    c.send(DEFAULT_VIEW);
    loop {
        if let WsOut::Text(t) = c.next().await {
            if let ServerMsg::Overview { fleets, .. } = serde_json::from_str(&t).unwrap() {
                assert_eq!(fleets.len(), 1);
                assert_eq!(fleets[0].name, "test-fleet");
                assert_eq!(fleets[0].source, "test");
                break;
            }
        }
    }
}

#[tokio::test]
async fn bad_input_gets_a_reason_and_a_close() {
    for (before_view, input, code) in [
        (
            false,
            WsIn::Text("{\"type\":\"drop_tables\"}".into()),
            close::POLICY_VIOLATION,
        ),
        (
            true,
            WsIn::Text("{\"type\":\"drop_tables\"}".into()),
            close::POLICY_VIOLATION,
        ),
        (true, WsIn::Text("x".repeat(10_000)), close::POLICY_VIOLATION),
        (
            false,
            WsIn::Text(r#"{"type":"view","id":1,"view":{"limit":9999}}"#.into()),
            close::POLICY_VIOLATION,
        ),
        (true, WsIn::Binary, close::UNSUPPORTED_DATA),
        // "a message (and a frame) from the browser at MAX_MESSAGE_BYTES (longer: closed 1009)"
        (false, WsIn::TooBig, close::MESSAGE_TOO_BIG),
    ] {
        let (_ev, mut c, _stop, _hub) = start();
        c.msg().await;
        if !before_view {
            c.send(DEFAULT_VIEW);
            c.window().await;
        }
        c.to_server.unbounded_send(input).unwrap();
        loop {
            match c.msg().await {
                ServerMsg::Error { reason } => {
                    assert!(!reason.is_empty());
                    break;
                }
                ServerMsg::Status { .. } | ServerMsg::Window(_) => {}
                other => panic!("{other:?}"),
            }
        }
        match c.next().await {
            WsOut::Close { code: got, reason } => {
                assert_eq!(got, code);
                assert!(!reason.is_empty() && reason.len() <= 123);
            }
            other => panic!("{other:?}"),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_connection_that_never_names_a_view_is_closed() {
    let (_ev, mut c, _stop, _hub) = start();
    c.msg().await;
    tokio::time::advance(FIRST_VIEW_WITHIN + Duration::from_millis(1)).await;
    assert!(matches!(c.msg().await, ServerMsg::Error { ref reason } if reason.contains("no view")));
}

#[tokio::test]
async fn a_reader_that_stops_acknowledging_is_held_back_then_gets_the_present() {
    let (ev, mut c, _stop, _hub) = start();
    c.msg().await;
    c.send(DEFAULT_VIEW);
    let mut w = Window::default();
    w.apply(c.window().await).unwrap();
    // No acks from here on: after MAX_IN_FLIGHT frames the server holds back.
    for i in 0..200 {
        let e = LockEntry::from_stored(format!("l{i:03}"), i + 1, i + 1, b"x");
        ev.send(ObserverEvent::Events(vec![FleetEvent::Upsert(e)]))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let mut got = 0;
    while let Ok(Some(WsOut::Text(t))) = tokio::time::timeout(Duration::from_millis(300), c.from_server.next()).await {
        if let ServerMsg::Window(f) = serde_json::from_str(&t).unwrap() {
            w.apply(f).unwrap();
            got += 1;
        }
    }
    assert_eq!(
        got,
        lockscope_model::wire::MAX_IN_FLIGHT - 1,
        "the first frame was already in flight"
    );
    c.send(&format!(r#"{{"type":"ack","seq":{}}}"#, w.seq));
    let f = c.window().await;
    assert_eq!(f.total, 200, "one frame with the present, not a backlog");
    w.apply(f).unwrap();
    assert_eq!(w.len(), lockscope_model::view::DEFAULT_WINDOW as usize);
}

/// "a subscription's queue holds at most 16 frames … and a socket whose
/// reader falls that far behind is dropped by the hub" (module docs): a
/// browser that stops reading altogether holds a bounded queue, then none.
#[tokio::test]
async fn a_socket_that_stops_reading_holds_a_bounded_queue_then_is_dropped() {
    let (ev_tx, ev_rx) = tokio::sync::mpsc::channel(64);
    let hub = HubHandle::with_events("test-fleet", "test", ev_rx);
    // The socket takes a few messages, then nothing more (its reader stopped).
    let (out_tx, _out_rx) = mpsc::channel::<WsOut>(2);
    let (in_tx, in_rx) = mpsc::unbounded();
    let (_stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(serve_subscriber(
        hub.clone(),
        Fleets::new(vec![hub.clone()]),
        out_tx,
        in_rx,
        stop_rx,
    ));
    in_tx.unbounded_send(WsIn::Text(DEFAULT_VIEW.into())).unwrap();
    for since in 0..40 {
        let status = lockscope_model::StoreStatus::Live { since };
        ev_tx.send(ObserverEvent::Status(status)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while hub.stats().now().lag_drops == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the stalled socket was never dropped"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(hub.stats().now().lag_drops, 1);
}

/// Adaptive pacing (docs/architecture.md: "fewer than 2 unacknowledged
/// frames, and, while one is unacknowledged, none in the last 25 ms"): a
/// reader that has acknowledged everything is idle, and a store write 1 ms
/// after its last frame reaches it at once, not after the frame interval.
#[tokio::test(start_paused = true)]
async fn an_idle_reader_gets_a_change_at_once() {
    let (ev, mut c, _stop, _hub) = start();
    c.msg().await;
    c.send(DEFAULT_VIEW);
    let first = c.window().await;
    c.send(&format!(r#"{{"type":"ack","seq":{}}}"#, first.seq));
    tokio::time::sleep(Duration::from_millis(1)).await;
    let written = tokio::time::Instant::now();
    let e = LockEntry::from_stored("a".into(), 1, 1, b"x");
    ev.send(ObserverEvent::Events(vec![FleetEvent::Upsert(e)]))
        .await
        .unwrap();
    let f = c.window().await;
    assert_eq!(f.total, 1);
    let took = written.elapsed();
    assert!(
        took < Duration::from_millis(5),
        "an idle reader waited {took:?} for a change"
    );
}
