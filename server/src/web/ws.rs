//! `/ws`: the websocket upgrade and its glue to axum; the subscriber protocol
//! itself is [`crate::live::subscriber`].
//!
//! The upgrade may carry the connection's first message (`/ws?fleet=…&first=…`,
//! the JSON text the socket would send: a `view` or a `watch`), so the server
//! starts on the first frame at the handshake instead of a round trip later,
//! after the browser's main thread has got round to the socket's `open` event
//! (`app/src/boot.rs` opens it so from the page's head). It is read as that
//! message would be, bounded alike ([`ClientMsg::parse`]); one that is not
//! usable refuses the upgrade with `400` and the reason.

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use futures::{SinkExt, StreamExt};
use lockscope_model::ClientMsg;

use super::caller::Caller;
use super::error::AppError;
use super::state::{AppState, FleetQuery};
use crate::live::hub::HubHandle;
use crate::live::subscriber::limit::{Refused, Slot};
use crate::live::subscriber::{serve_subscriber, WsIn, WsOut};

/// `/ws`'s query: the fleet, and the connection's first message, if the upgrade
/// carries it.
#[derive(Debug, Default, serde::Deserialize)]
pub(super) struct WsQuery {
    fleet: Option<String>,
    first: Option<String>,
}

/// The first message an upgrade carries, if any, checked as the socket would
/// check it; `Err` is the reason to refuse the upgrade with.
fn first_message(first: Option<String>) -> Result<Option<String>, String> {
    let Some(text) = first else { return Ok(None) };
    match ClientMsg::parse(&text) {
        Ok(ClientMsg::View { .. } | ClientMsg::Watch { .. }) => Ok(Some(text)),
        Ok(_) => Err("first=: the first message names a view (`view`) or what to watch (`watch`)".into()),
        Err(reason) => Err(format!("first=: {reason}")),
    }
}

/// `/ws`: the live feed ([`crate::live::subscriber`]). A socket past a limit of
/// `[limits]` (per identity, per address, in all) is accepted and closed at
/// once, `1008` or `1013`, with a reason naming the limit (a browser's script
/// can read that, not a refused upgrade's status); counted in `/metrics`.
pub(super) async fn ws_upgrade(
    State(state): State<AppState>,
    caller: Caller,
    Query(q): Query<WsQuery>,
    headers: HeaderMap,
    upgrade: WebSocketUpgrade,
) -> Result<Response, AppError> {
    // A page on another site must not read the lock table through the visitor's browser.
    crate::auth::same_origin(&headers).map_err(AppError::Forbidden)?;
    let actor = caller.reader()?.actor.clone();
    let hub = state.fleet(&FleetQuery { fleet: q.fleet })?.clone();
    let first = first_message(q.first).map_err(AppError::BadRequest)?;
    // The place is taken before the upgrade, so a burst cannot overshoot.
    let slot = state.sockets.open(&actor, caller.client);
    if let Err(refused) = &slot {
        tracing::warn!(%actor, client = ?caller.client, reason = %refused.reason(), "websocket refused");
    }
    Ok(upgrade
        .max_message_size(crate::live::subscriber::MAX_MESSAGE_BYTES)
        .max_frame_size(crate::live::subscriber::MAX_MESSAGE_BYTES)
        // tungstenite's defaults hold 128 KiB each way per socket from the
        // start; ours grow with what is read, and every message is flushed.
        .read_buffer_size(crate::live::subscriber::READ_BUFFER_BYTES)
        .write_buffer_size(0)
        .on_upgrade(move |socket| subscriber(state, hub, socket, slot, first)))
}

async fn subscriber(
    state: AppState,
    hub: HubHandle,
    socket: WebSocket,
    slot: Result<Slot, Refused>,
    first: Option<String>,
) {
    let (sink, stream) = socket.split();
    let mut sink = Box::pin(sink.with(|out: WsOut| async move {
        Ok::<_, axum::Error>(match out {
            WsOut::Text(t) => Message::Text(t.as_ref().into()),
            WsOut::Close { code, reason } => Message::Close(Some(CloseFrame {
                code,
                reason: reason.into(),
            })),
        })
    }));
    let _slot = match slot {
        Ok(slot) => slot,
        Err(refused) => {
            let close = WsOut::Close {
                code: refused.code(),
                reason: refused.reason(),
            };
            let _ = sink.send(close).await;
            return;
        }
    };
    let stream = stream.filter_map(|m| async move {
        match m {
            Ok(Message::Text(t)) => Some(WsIn::Text(t.to_string())),
            Ok(Message::Binary(_)) => Some(WsIn::Binary),
            Err(e) if too_big(&e) => Some(WsIn::TooBig),
            Ok(Message::Close(_)) | Err(_) => Some(WsIn::Close),
            Ok(Message::Ping(_) | Message::Pong(_)) => None,
        }
    });
    // The upgrade's first message reads as if the socket had sent it first.
    let stream = futures::stream::iter(first.map(WsIn::Text)).chain(stream);
    serve_subscriber(hub, state.fleets, sink, Box::pin(stream), state.shutdown).await;
}

/// Whether reading stopped at a message or frame past
/// [`crate::live::subscriber::MAX_MESSAGE_BYTES`].
fn too_big(e: &axum::Error) -> bool {
    use tokio_tungstenite::tungstenite::Error;
    let inner = std::error::Error::source(e).and_then(|s| s.downcast_ref::<Error>());
    matches!(inner, Some(Error::Capacity(_)))
}
