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
//!
//! What one socket can make the server hold is bounded: a message (and a
//! frame) from the browser at [`MAX_MESSAGE_BYTES`] (longer: closed `1009`);
//! sockets per identity, per address and in all by [`limit`]; and what waits
//! to go out: a subscription's queue holds at most 16 frames (window frames
//! are paced by acknowledgements, at most
//! [`lockscope_model::wire::MAX_IN_FLIGHT`] unacknowledged), and a socket
//! whose reader falls that far behind is dropped by the hub; each message is
//! flushed to the socket before the next is taken, and a watch or overview
//! keeps only its newest value.

use std::time::Duration;

use futures::{Sink, SinkExt, Stream, StreamExt};
use lockscope_model::detail::{LockDetail, SessionList};
use lockscope_model::wire::OVERVIEW_EVERY_MS;
use lockscope_model::{ClientMsg, ServerMsg, Watch, PROTOCOL_VERSION};
use lockscope_store::now_ms;
use tokio::sync::watch;

use crate::live::hub::{Fleets, Frame, HubHandle, HubStopped, Subscription};

pub mod limit;

/// The longest message, and frame, a browser may send (bytes): room for any
/// client message (they are parsed up to
/// [`lockscope_model::wire::MAX_CLIENT_MSG_BYTES`], longer ones refused with
/// a reason); past it the socket reads no further and is closed `1009`.
pub const MAX_MESSAGE_BYTES: usize = lockscope_model::wire::MAX_CLIENT_MSG_BYTES * 4;

/// The read buffer a socket starts with (it grows up to a message when one
/// needs it).
pub const READ_BUFFER_BYTES: usize = 4 * 1024;

/// How long a new connection may take to name its view.
pub const FIRST_VIEW_WITHIN: Duration = Duration::from_secs(10);

/// What the client sent, reduced to what the protocol cares about.
#[derive(Debug)]
pub enum WsIn {
    Text(String),
    Binary,
    /// A message or frame longer than [`MAX_MESSAGE_BYTES`] (not read).
    TooBig,
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
    pub const MESSAGE_TOO_BIG: u16 = 1009;
    pub const INTERNAL_ERROR: u16 = 1011;
    pub const TRY_AGAIN_LATER: u16 = 1013;
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
        Some(WsIn::TooBig) => Input::Refuse(refuse(
            format!("a message or frame longer than {MAX_MESSAGE_BYTES} bytes"),
            close::MESSAGE_TOO_BIG,
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
    // Counted in `/metrics` while the connection lives.
    let _open = hub.stats().websocket_opened();
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
                next_value(rx, |detail, server_time| ServerMsg::Detail {
                    server_time,
                    detail: Box::new(detail),
                })
                .await
            }
            Feed::Sessions(rx) => {
                next_value(rx, |sessions, server_time| ServerMsg::Sessions {
                    server_time,
                    sessions,
                })
                .await
            }
        }
    }
}

/// The watch channel's next value as a message; `None` when the hub stopped.
async fn next_value<T: Clone>(
    rx: &mut watch::Receiver<Option<T>>,
    msg: impl FnOnce(T, lockscope_model::time::Millis) -> ServerMsg,
) -> Option<WsOut> {
    rx.changed().await.ok()?;
    let value = rx.borrow_and_update().clone()?;
    Some(frame(&msg(value, now_ms())))
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
mod tests;
