//! One websocket subscriber (`/ws`), independent of axum: it speaks to any
//! `Sink<WsOut>` / `Stream<Item = WsIn>`, so tests drive it with channels.
//!
//! Order of messages: `hello`, `snapshot`, then the hub's frames as published,
//! with an `overview` of every fleet every [`OVERVIEW_EVERY`]. If
//! the subscriber falls behind the hub's buffer it gets `lagged` and a fresh
//! `snapshot` (the browser's reducer turns that into the difference). Bad input
//! gets an `error` message and a close frame with the reason.

use futures::{Sink, SinkExt, Stream, StreamExt};
use lockscope_model::{ClientMsg, ServerMsg, PROTOCOL_VERSION};
use lockscope_store::now_ms;
use tokio::sync::{broadcast::error::RecvError, watch};
use tracing::debug;

use crate::hub::{Fleets, Frame, HubHandle};

/// How often a subscriber gets every fleet's headline numbers.
pub const OVERVIEW_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

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
    let Ok(mut sub) = hub.subscribe().await else {
        let _ = out
            .send(WsOut::Close {
                code: close::INTERNAL_ERROR,
                reason: "hub stopped".into(),
            })
            .await;
        return;
    };
    if out.send(frame(&ServerMsg::Snapshot(sub.snapshot))).await.is_err() {
        return;
    }
    let mut overview = tokio::time::interval(OVERVIEW_EVERY);
    loop {
        let out_msg = tokio::select! {
            _ = overview.tick() => frame(&ServerMsg::Overview { server_time: now_ms(), fleets: fleets.summaries().await }),
            update = sub.updates.recv() => match update {
                Ok(f) => WsOut::Text(f),
                Err(RecvError::Lagged(dropped)) => {
                    debug!(dropped, "subscriber lagged; sending a fresh snapshot");
                    if out.send(frame(&ServerMsg::Lagged { dropped })).await.is_err() {
                        return;
                    }
                    match hub.subscribe().await {
                        Ok(s) => sub = s,
                        Err(_) => return,
                    }
                    frame(&ServerMsg::Snapshot(sub.snapshot.clone()))
                }
                Err(RecvError::Closed) => WsOut::Close { code: close::INTERNAL_ERROR, reason: "hub stopped".into() },
            },
            msg = input.next() => match msg {
                None | Some(WsIn::Close) => return,
                Some(WsIn::Text(text)) => match ClientMsg::parse(&text) {
                    Ok(ClientMsg::Ping { nonce }) => frame(&ServerMsg::Pong { nonce, server_time: now_ms() }),
                    Err(reason) => {
                        let _ = out.send(frame(&ServerMsg::Error { reason: reason.clone() })).await;
                        WsOut::Close { code: close::POLICY_VIOLATION, reason: truncate(reason) }
                    }
                },
                Some(WsIn::Binary) => {
                    let reason = "binary frames are not part of the protocol".to_string();
                    let _ = out.send(frame(&ServerMsg::Error { reason: reason.clone() })).await;
                    WsOut::Close { code: close::UNSUPPORTED_DATA, reason }
                }
            },
            _ = async { shutdown.wait_for(|s| *s).await.map(|_| ()) } => WsOut::Close { code: close::GOING_AWAY, reason: "server shutting down".into() },
        };
        let closing = matches!(out_msg, WsOut::Close { .. });
        if out.send(out_msg).await.is_err() || closing {
            return;
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
    use lockscope_model::{FleetEvent, LockEntry};
    use lockscope_store::ObserverEvent;

    struct Client {
        to_server: mpsc::UnboundedSender<WsIn>,
        from_server: mpsc::UnboundedReceiver<WsOut>,
    }

    impl Client {
        async fn next(&mut self) -> WsOut {
            tokio::time::timeout(std::time::Duration::from_secs(5), self.from_server.next())
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
    }

    fn start(
        buffer: usize,
    ) -> (
        tokio::sync::mpsc::Sender<ObserverEvent>,
        Client,
        watch::Sender<bool>,
        HubHandle,
    ) {
        let (ev_tx, ev_rx) = tokio::sync::mpsc::channel(64);
        let hub = HubHandle::with_events("test-fleet", "test", ev_rx, buffer);
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

    #[tokio::test]
    async fn hello_snapshot_pong_and_shutdown() {
        let (_ev, mut c, stop, _hub) = start(16);
        assert!(
            matches!(c.msg().await, ServerMsg::Hello { protocol: PROTOCOL_VERSION, ref fleet, .. } if fleet == "test-fleet")
        );
        assert!(matches!(c.msg().await, ServerMsg::Snapshot(ref s) if s.locks.is_empty()));
        c.to_server
            .unbounded_send(WsIn::Text(r#"{"type":"ping","nonce":42}"#.into()))
            .unwrap();
        assert!(matches!(c.msg().await, ServerMsg::Pong { nonce: 42, .. }));
        stop.send(true).unwrap();
        assert_eq!(
            c.next().await,
            WsOut::Close {
                code: close::GOING_AWAY,
                reason: "server shutting down".into()
            }
        );
    }

    #[tokio::test]
    async fn an_overview_follows_the_snapshot() {
        let (_ev, mut c, _stop, _hub) = start(16);
        c.msg().await;
        c.msg().await;
        match c.next().await {
            WsOut::Text(t) => match serde_json::from_str(&t).unwrap() {
                ServerMsg::Overview { fleets, .. } => {
                    assert_eq!(fleets.len(), 1);
                    assert_eq!(fleets[0].name, "test-fleet");
                    assert_eq!(fleets[0].source, "test");
                }
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn bad_input_gets_a_reason_and_a_close() {
        for (input, code) in [
            (WsIn::Text("{\"type\":\"drop_tables\"}".into()), close::POLICY_VIOLATION),
            (WsIn::Text("x".repeat(10_000)), close::POLICY_VIOLATION),
            (WsIn::Binary, close::UNSUPPORTED_DATA),
        ] {
            let (_ev, mut c, _stop, _hub) = start(16);
            c.msg().await;
            c.msg().await;
            c.to_server.unbounded_send(input).unwrap();
            match c.msg().await {
                ServerMsg::Error { reason } => assert!(!reason.is_empty()),
                other => panic!("{other:?}"),
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

    #[tokio::test]
    async fn a_lagging_subscriber_gets_lagged_then_a_fresh_snapshot() {
        // A bounded sink the test does not drain: the subscriber blocks on it while
        // the hub keeps publishing into a 2-message buffer.
        let (ev_tx, ev_rx) = tokio::sync::mpsc::channel(64);
        let hub = HubHandle::with_events("f", "test", ev_rx, 2);
        let (out_tx, mut out_rx) = mpsc::channel::<WsOut>(0);
        let (_in_tx, in_rx) = mpsc::unbounded::<WsIn>();
        let (_stop_tx, stop_rx) = watch::channel(false);
        tokio::spawn(serve_subscriber(
            hub.clone(),
            Fleets::new(vec![hub.clone()]),
            out_tx,
            in_rx,
            stop_rx,
        ));
        async fn text(rx: &mut mpsc::Receiver<WsOut>) -> ServerMsg {
            match rx.next().await.unwrap() {
                WsOut::Text(t) => serde_json::from_str::<ServerMsg>(&t).unwrap(),
                other => panic!("{other:?}"),
            }
        }
        assert!(matches!(text(&mut out_rx).await, ServerMsg::Hello { .. }));
        for i in 0..20 {
            let e = LockEntry::from_stored(format!("l{i:02}"), i + 1, i + 1, b"x");
            ev_tx
                .send(ObserverEvent::Events(vec![FleetEvent::Upsert(e)]))
                .await
                .unwrap();
            hub.snapshot().await.unwrap(); // one delta per event
        }
        let mut seen_lag = false;
        let mut names = std::collections::BTreeSet::new();
        for _ in 0..20 {
            match text(&mut out_rx).await {
                ServerMsg::Snapshot(s) => {
                    names = s.locks.iter().map(|l| l.name.clone()).collect();
                    if seen_lag {
                        break;
                    }
                }
                ServerMsg::Lagged { dropped } => {
                    assert!(dropped > 0);
                    seen_lag = true;
                }
                ServerMsg::Overview { .. } => {}
                ServerMsg::Delta { events, .. } => {
                    for e in events {
                        if let FleetEvent::Upsert(l) = e {
                            names.insert(l.name);
                        }
                    }
                }
                other => panic!("{other:?}"),
            }
        }
        assert!(seen_lag, "the subscriber was told it lagged");
        assert_eq!(names.len(), 20, "after the fresh snapshot nothing is missing");
    }
}
