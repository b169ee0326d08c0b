//! One websocket subscriber (`/ws`), independent of axum: it speaks to any
//! `Sink<WsOut>` / `Stream<Item = WsIn>`, so tests drive it with channels.
//!
//! Order of messages: `hello`; then, once the browser has named its view
//! (`view`), `status` and the view's `window` frames as the hub sends them, with
//! an `overview` of every fleet whenever one changes (at most every
//! [`OVERVIEW_EVERY_MS`]). The browser's `ack`s and `view` changes go to the hub.
//! A detail or sessions page names what it watches instead (`watch`) and gets
//! `detail` or `sessions` messages, the current value first, then each change
//! (the hub coalesces them). Bad input gets an `error` message and a close frame
//! with the reason.

use std::time::Duration;

use futures::{Sink, SinkExt, Stream, StreamExt};
use lockscope_model::detail::{LockDetail, SessionList};
use lockscope_model::wire::OVERVIEW_EVERY_MS;
use lockscope_model::{ClientMsg, ServerMsg, Watch, PROTOCOL_VERSION};
use lockscope_store::now_ms;
use tokio::sync::watch;

use crate::hub::{Fleets, Frame, HubHandle, HubStopped, Subscription};

/// How long a new connection may take to name its view.
pub const FIRST_VIEW_WITHIN: Duration = Duration::from_secs(10);

/// What the client sent, reduced to what the protocol cares about.
#[derive(Debug)]
pub enum WsIn {
    Text(String),
    Binary,
    Close,
}

#[derive(Debug, Clone, PartialEq)]
pub enum WsOut {
    Text(Frame),
    Close { code: u16, reason: String },
}

/// Close codes (RFC 6455 §7.4.1).
pub mod close {
    pub const GOING_AWAY: u16 = 1001;
    pub const UNSUPPORTED_DATA: u16 = 1003;
    pub const POLICY_VIOLATION: u16 = 1008;
    pub const INTERNAL_ERROR: u16 = 1011;
}

fn frame(msg: &ServerMsg) -> WsOut {
    WsOut::Text(serde_json::to_string(msg).expect("server messages serialise").into())
}

/// The reply to bad input: an `error` message, then a close frame.
fn refuse(reason: String, code: u16) -> [WsOut; 2] {
    [
        frame(&ServerMsg::Error { reason: reason.clone() }),
        WsOut::Close {
            code,
            reason: truncate(reason),
        },
    ]
}

/// What one client message asks for, or the reply that ends the connection.
enum Input {
    Msg(ClientMsg),
    Leave,
    Refuse([WsOut; 2]),
}

fn read(msg: Option<WsIn>) -> Input {
    match msg {
        None | Some(WsIn::Close) => Input::Leave,
        Some(WsIn::Text(text)) => match ClientMsg::parse(&text) {
            Ok(m) => Input::Msg(m),
            Err(reason) => Input::Refuse(refuse(reason, close::POLICY_VIOLATION)),
        },
        Some(WsIn::Binary) => Input::Refuse(refuse(
            "binary frames are not part of the protocol".into(),
            close::UNSUPPORTED_DATA,
        )),
    }
}

/// Serves one subscriber of `hub` until it leaves, misbehaves, or `shutdown` turns
/// true.
pub async fn serve_subscriber<S, R>(
    hub: HubHandle,
    fleets: Fleets,
    mut out: S,
    mut input: R,
    mut shutdown: watch::Receiver<bool>,
) where
    S: Sink<WsOut> + Unpin,
    R: Stream<Item = WsIn> + Unpin,
{
    let hello = ServerMsg::Hello {
        protocol: PROTOCOL_VERSION,
        server_version: env!("CARGO_PKG_VERSION").into(),
        fleet: hub.fleet().to_string(),
    };
    if out.send(frame(&hello)).await.is_err() {
        return;
    }
    let Some(mut feed) = first_request(&hub, &mut out, &mut input).await else {
        return;
    };
    let mut overviews = fleets.watch();
    let mut overview_tick = tokio::time::interval(Duration::from_millis(OVERVIEW_EVERY_MS));
    let mut first_overview = true;
    loop {
        let msgs: Vec<WsOut> = tokio::select! {
            _ = overview_tick.tick() => {
                // Every receiver is read, so each change is sent once.
                let changed = overviews.iter_mut().fold(false, |c, rx| rx.has_changed().unwrap_or(false) | c);
                overviews.iter_mut().for_each(|rx| { rx.borrow_and_update(); });
                if !(changed || std::mem::take(&mut first_overview)) {
                    continue;
                }
                vec![frame(&ServerMsg::Overview { server_time: now_ms(), fleets: fleets.summaries() })]
            }
            f = feed.next() => match f {
                Some(f) => vec![f],
                None => vec![WsOut::Close { code: close::INTERNAL_ERROR, reason: "hub stopped".into() }],
            },
            msg = input.next() => match (read(msg), &feed) {
                (Input::Leave, _) => return,
                (Input::Refuse(reply), _) => reply.into(),
                (Input::Msg(ClientMsg::Ping { nonce }), _) => vec![frame(&ServerMsg::Pong { nonce, server_time: now_ms() })],
                (Input::Msg(ClientMsg::Ack { seq }), Feed::Window(sub)) => {
                    if sub.ack(seq).await.is_err() { return }
                    continue;
                }
                (Input::Msg(ClientMsg::View { id, view }), Feed::Window(sub)) => {
                    if sub.set_view(id, view).await.is_err() { return }
                    continue;
                }
                (Input::Msg(ClientMsg::Ack { .. }), _) => continue,
                (Input::Msg(_), _) => refuse(
                    "a connection either shows a view or watches one thing; open another for the other".into(),
                    close::POLICY_VIOLATION,
                )
                .into(),
            },
            _ = async { shutdown.wait_for(|s| *s).await.map(|_| ()) } => vec![WsOut::Close { code: close::GOING_AWAY, reason: "server shutting down".into() }],
        };
        for m in msgs {
            let closing = matches!(m, WsOut::Close { .. });
            if out.send(m).await.is_err() || closing {
                return;
            }
        }
    }
}

/// What one connection follows: a view's window, or a watched lock or the
/// sessions.
enum Feed {
    Window(Subscription),
    Lock(watch::Receiver<Option<LockDetail>>),
    Sessions(watch::Receiver<Option<SessionList>>),
}

impl Feed {
    /// The next message for the browser; `None` when the hub stopped.
    async fn next(&mut self) -> Option<WsOut> {
        match self {
            Feed::Window(sub) => sub.frames.recv().await.map(WsOut::Text),
            Feed::Lock(rx) => {
                rx.changed().await.ok()?;
                let detail = rx.borrow_and_update().clone()?;
                Some(frame(&ServerMsg::Detail {
                    server_time: now_ms(),
                    detail: Box::new(detail),
                }))
            }
            Feed::Sessions(rx) => {
                rx.changed().await.ok()?;
                let sessions = rx.borrow_and_update().clone()?;
                Some(frame(&ServerMsg::Sessions {
                    server_time: now_ms(),
                    sessions,
                }))
            }
        }
    }
}

/// Waits for the browser to name its view (or what it watches), and subscribes.
async fn first_request<S, R>(hub: &HubHandle, out: &mut S, input: &mut R) -> Option<Feed>
where
    S: Sink<WsOut> + Unpin,
    R: Stream<Item = WsIn> + Unpin,
{
    let deadline = tokio::time::sleep(FIRST_VIEW_WITHIN);
    tokio::pin!(deadline);
    loop {
        let reply: Vec<WsOut> = tokio::select! {
            _ = &mut deadline => refuse(format!("no view requested within {FIRST_VIEW_WITHIN:?}"), close::POLICY_VIOLATION).into(),
            msg = input.next() => match read(msg) {
                Input::Leave => return None,
                Input::Refuse(reply) => reply.into(),
                Input::Msg(ClientMsg::View { id, view }) => {
                    let sub = hub.subscribe(id, view).await.map(Feed::Window);
                    return hub_or_close(sub, out).await;
                }
                Input::Msg(ClientMsg::Watch { watch }) => {
                    let feed = match watch {
                        Watch::Lock { name } => hub.watch_lock(&name).await.map(Feed::Lock),
                        Watch::Sessions => hub.watch_sessions().await.map(Feed::Sessions),
                    };
                    let mut feed = hub_or_close(feed, out).await?;
                    // The current value goes out first.
                    match &mut feed {
                        Feed::Lock(rx) => rx.mark_changed(),
                        Feed::Sessions(rx) => rx.mark_changed(),
                        Feed::Window(_) => {}
                    }
                    return Some(feed);
                }
                Input::Msg(ClientMsg::Ping { nonce }) => vec![frame(&ServerMsg::Pong { nonce, server_time: now_ms() })],
                Input::Msg(ClientMsg::Ack { .. }) => vec![],
            },
        };
        for m in reply {
            let closing = matches!(m, WsOut::Close { .. });
            if out.send(m).await.is_err() || closing {
                return None;
            }
        }
    }
}

/// The feed, or (the hub stopped) a close frame and `None`.
async fn hub_or_close<S: Sink<WsOut> + Unpin>(feed: Result<Feed, HubStopped>, out: &mut S) -> Option<Feed> {
    match feed {
        Ok(feed) => Some(feed),
        Err(_) => {
            let _ = out
                .send(WsOut::Close {
                    code: close::INTERNAL_ERROR,
                    reason: "hub stopped".into(),
                })
                .await;
            None
        }
    }
}

/// Close reasons must fit in a control frame (123 bytes).
fn truncate(mut s: String) -> String {
    if s.len() > 120 {
        let mut cut = 120;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

#[cfg(test)]
mod tests {
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
        while let Ok(Some(WsOut::Text(t))) =
            tokio::time::timeout(Duration::from_millis(300), c.from_server.next()).await
        {
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
        assert_eq!(w.len(), 100);
    }
}
