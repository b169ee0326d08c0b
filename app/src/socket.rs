//! The browser's websocket to `/ws`: takes over the socket the page's head
//! opened ([`crate::boot`]), or connects; either way the upgrade itself asks for
//! the view on screen (or what the page watches: [`crate::boot::socket_path`]),
//! so no request waits for the socket's `open`. Feeds every message to [`LiveView::receive`], publishes a frame
//! to the document at once if it is the first since the last paint and the
//! others together at the next animation frame (so a busy page renders once per
//! paint whatever the frames), acknowledges each at that animation frame (so the
//! server never sends faster than the page paints), pings for the clock offset, and reconnects with capped,
//! jittered backoff. A reconnect always starts from a full window, so nothing
//! missed while disconnected stays missing.
//!
//! The browser runs this on one thread: the connection lives in a thread-local,
//! replaced (and its callbacks dropped) only once the old socket has closed.

use std::cell::{Cell, RefCell};
use std::time::Duration;

use leptos::prelude::*;
use lockscope_model::view::ViewSpec;
use lockscope_model::{ClientMsg, ServerMsg, PROTOCOL_VERSION};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use web_sys::{CloseEvent, MessageEvent, WebSocket};

use crate::live::{Connection, Followup, LiveView};

const PING_EVERY: Duration = Duration::from_secs(10);
const BACKOFF_MIN_MS: f64 = 500.0;
const BACKOFF_MAX_MS: f64 = 10_000.0;

struct Conn {
    ws: WebSocket,
    _on_message: Closure<dyn FnMut(MessageEvent)>,
    _on_close: Closure<dyn FnMut(CloseEvent)>,
}

thread_local! {
    static CONN: RefCell<Option<Conn>> = const { RefCell::new(None) };
    static ATTEMPT: Cell<u32> = const { Cell::new(0) };
    /// A frame was published since the last animation frame: later ones wait for it.
    static PAINT_PENDING: Cell<bool> = const { Cell::new(false) };
}

fn local_now() -> i64 {
    js_sys::Date::now() as i64
}

/// Starts the live connection once the page has hydrated.
pub fn start(live: LiveView) {
    live.batch_frames();
    Effect::new(move |_| {
        connect(live);
        set_interval(move || live.tick(local_now()), Duration::from_secs(1));
        set_interval(ping, PING_EVERY);
    });
}

/// Sends `msg` if the socket is open (a closed one reconnects and resends the view).
fn send(msg: &ClientMsg) {
    CONN.with_borrow(|c| {
        if let Some(c) = c {
            if c.ws.ready_state() == WebSocket::OPEN {
                let _ =
                    c.ws.send_with_str(&serde_json::to_string(msg).expect("client messages serialise"));
            }
        }
    });
}

fn ping() {
    send(&ClientMsg::Ping {
        nonce: local_now() as u64,
    });
}

/// Shows `view`: asks the server for it and puts it in the URL. The URL names
/// the view and its position, not the window's size the screen chose: a
/// reload renders the first window (the cheapest to go live with) and then
/// asks for what its screen shows.
pub fn show(live: LiveView, view: ViewSpec) {
    let id = live.request(view.clone());
    send(&ClientMsg::View { id, view: view.clone() });
    let named = ViewSpec {
        limit: lockscope_model::view::DEFAULT_WINDOW,
        ..view
    };
    let url = crate::links::view_query(&live.fleet.get_untracked(), &named);
    if let Ok(h) = window().history() {
        let _ = h.replace_state_with_url(&JsValue::NULL, "", Some(&url));
    }
}

/// Publishes frame `seq` at once if it is the first since the last animation
/// frame (an idle page shows a change as soon as it arrives); otherwise it waits
/// for that animation frame, which publishes every frame since at once. Frame
/// `seq` is acknowledged then.
fn ack_after_paint(live: LiveView, seq: u64) {
    if !PAINT_PENDING.replace(true) {
        live.publish();
    }
    request_animation_frame(move || {
        PAINT_PENDING.set(false);
        live.publish();
        send(&ClientMsg::Ack { seq });
    });
}

fn connect(live: LiveView) {
    live.connection.set(Connection::Connecting);
    let (ws, kept) = match adopt(live) {
        Some(early) => early,
        None => match open(live) {
            Some(ws) => (ws, Vec::new()),
            None => return schedule_reconnect(live),
        },
    };
    let on_message = Closure::<dyn FnMut(MessageEvent)>::new(move |ev: MessageEvent| {
        if let Some(text) = ev.data().as_string() {
            on_text(live, &text);
        }
    });
    let on_close = Closure::<dyn FnMut(CloseEvent)>::new(move |_: CloseEvent| schedule_reconnect(live));
    ws.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
    ws.set_onclose(Some(on_close.as_ref().unchecked_ref()));
    CONN.set(Some(Conn {
        ws,
        _on_message: on_message,
        _on_close: on_close,
    }));
    // What the early socket received before the page took it over, in order.
    for text in kept {
        on_text(live, &text);
    }
}

/// A new socket to `/ws` for the page's fleet, asking for what the page shows.
fn open(live: LiveView) -> Option<WebSocket> {
    let location = window().location();
    let scheme = if location.protocol().as_deref() == Ok("https:") {
        "wss"
    } else {
        "ws"
    };
    let request = live.first_request()?;
    let path = crate::boot::socket_path(&live.fleet.get_untracked(), &request);
    let url = format!("{scheme}://{}{path}", location.host().unwrap_or_default());
    WebSocket::new(&url)
        .map_err(|e| leptos::logging::warn!("websocket {url}: {e:?}"))
        .ok()
}

/// The socket the page's head opened ([`crate::boot`]), with the messages it
/// kept, if it is open or opening and asked for what this page asks for; it is
/// taken once (a reconnect opens a new one). One that does not fit is closed.
fn adopt(live: LiveView) -> Option<(WebSocket, Vec<String>)> {
    use js_sys::Reflect;
    let win = window();
    let key = JsValue::from_str(crate::boot::SOCKET_GLOBAL);
    let early = Reflect::get(&win, &key).ok().filter(JsValue::is_object)?;
    let _ = Reflect::delete_property(win.unchecked_ref::<js_sys::Object>(), &key);
    let ws: WebSocket = Reflect::get(&early, &"socket".into()).ok()?.dyn_into().ok()?;
    let asked = Reflect::get(&early, &"request".into()).ok().and_then(|r| r.as_string());
    let ours = live.first_request().map(|m| crate::boot::message_text(&m));
    let open = matches!(ws.ready_state(), WebSocket::CONNECTING | WebSocket::OPEN);
    if !open || asked.is_none() || asked != ours {
        let _ = ws.close();
        return None;
    }
    let kept: js_sys::Array = Reflect::get(&early, &"queue".into()).ok()?.dyn_into().ok()?;
    Some((ws, kept.iter().filter_map(|m| m.as_string()).collect()))
}

/// One message from the server.
fn on_text(live: LiveView, text: &str) {
    let now = local_now();
    match serde_json::from_str::<ServerMsg>(text) {
        Ok(ServerMsg::Pong { nonce, server_time }) => live.pong(nonce as i64, now, server_time),
        Ok(msg) => {
            // (The upgrade asked for the view: the hello needs no answer.)
            if let ServerMsg::Hello {
                protocol: PROTOCOL_VERSION,
                ..
            } = &msg
            {
                ATTEMPT.set(0);
            }
            match live.receive(msg, now) {
                Followup::None => {}
                Followup::Ack(seq) => ack_after_paint(live, seq),
                Followup::Resync(why) => {
                    leptos::logging::warn!("resynchronising: {why}");
                    CONN.with_borrow(|c| c.as_ref().map(|c| c.ws.close()));
                }
            }
        }
        Err(e) => leptos::logging::warn!("unreadable server message ({e}): {text:.200}"),
    }
}

fn schedule_reconnect(live: LiveView) {
    let attempt = ATTEMPT.get();
    ATTEMPT.set(attempt.saturating_add(1));
    let ceiling = (BACKOFF_MIN_MS * 2f64.powi(attempt.min(16) as i32)).min(BACKOFF_MAX_MS);
    let delay = ceiling / 2.0 + ceiling / 2.0 * js_sys::Math::random();
    let retry_at = local_now() + live.clock_offset.get_untracked() + delay as i64;
    live.connection.set(Connection::Reconnecting { retry_at });
    set_timeout(move || connect(live), Duration::from_millis(delay as u64));
}
