//! What a live page starts from its document's head, before its wasm has
//! arrived: the websocket ([`early_socket`]). A small inline script opens `/ws`
//! with the page's view (or what it watches) in the upgrade itself
//! ([`socket_path`]: the server starts on the first frame at the handshake, not
//! when the busy main thread gets to the socket's `open` event), and keeps what
//! the server sends; once the page has hydrated, `socket` adopts that socket
//! and reads the kept messages first ([`SOCKET_GLOBAL`]). So the server
//! computes the first frame while the browser fetches, compiles and hydrates
//! the wasm, instead of after. Nothing here shows anything: the page says
//! "live" only once it has applied and shown a frame.
//!
//! Without JavaScript the script does not run; a page whose wasm never takes
//! the socket over closes it after [`UNCLAIMED_CLOSE_MS`].

use lockscope_model::view::ViewSpec;
use lockscope_model::{ClientMsg, Page, Screen, Watch};

/// The `window` property the early socket waits under: `{socket, queue,
/// request}` (the `WebSocket`, the message texts received so far, the request
/// it sent). The page removes it when it takes the socket over.
pub const SOCKET_GLOBAL: &str = "__lockscope_socket";

/// An early socket nobody took over is closed after this (its page never
/// hydrated: no wasm, or it failed), so it does not hold one of the reader's
/// sockets (`[limits]`) for as long as the tab stays open.
pub const UNCLAIMED_CLOSE_MS: u32 = 60_000;

/// What a new connection of a page on `screen` asks for first: its view (with
/// request id `id`), the lock or the sessions it watches, or nothing (a page
/// that is not kept live).
pub fn first_request(screen: &Screen, view: &ViewSpec, id: u32) -> Option<ClientMsg> {
    match screen {
        Screen::Locks => Some(ClientMsg::View { id, view: view.clone() }),
        Screen::Lock { detail } => Some(ClientMsg::Watch {
            watch: Watch::Lock {
                name: detail.name.clone(),
            },
        }),
        Screen::Sessions { .. } => Some(ClientMsg::Watch { watch: Watch::Sessions }),
        Screen::Audit { .. } | Screen::History { .. } | Screen::Charts { .. } | Screen::SignIn { .. } => None,
    }
}

/// The text of a client message as the socket sends it (the early socket's
/// request and the page's must be the same bytes: the page compares them to adopt).
pub fn message_text(msg: &ClientMsg) -> String {
    serde_json::to_string(msg).expect("client messages serialise")
}

/// The path of a socket of `fleet` whose upgrade carries its first message,
/// `request` (the server reads it as if the socket had sent it: `server/src/web/ws.rs`).
pub fn socket_path(fleet: &str, request: &ClientMsg) -> String {
    use lockscope_model::url::query;
    format!("/ws?fleet={}&first={}", query(fleet), query(&message_text(request)))
}

/// The inline script that opens the socket of `fleet` asking for `request`.
pub fn early_socket_script(fleet: &str, request: &ClientMsg) -> String {
    format!(
        "(function(p,m){{try{{var s=new WebSocket((location.protocol==='https:'?'wss://':'ws://')+location.host+p),\
q=[];s.onmessage=function(e){{q.push(e.data)}};\
window.{SOCKET_GLOBAL}={{socket:s,queue:q,request:m}};\
setTimeout(function(){{var e=window.{SOCKET_GLOBAL};if(e&&e.socket===s){{delete window.{SOCKET_GLOBAL};s.close()}}}},\
{UNCLAIMED_CLOSE_MS})}}catch(e){{}}}})({},{})",
        js_string(&socket_path(fleet, request)),
        js_string(&message_text(request)),
    )
}

/// `s` as a JavaScript string literal that cannot end the `<script>` element
/// it stands in (no `<`, so no `</script>` nor `<!--`).
fn js_string(s: &str) -> String {
    serde_json::to_string(s)
        .expect("strings serialise")
        .replace('<', "\\u003c")
}

/// The early socket's script for the head of `page`, if it is kept live.
pub fn early_socket(page: &Page) -> Option<String> {
    first_request(&page.screen, &page.view, 0).map(|request| early_socket_script(&page.fleet, &request))
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockscope_model::detail::LockDetail;
    use lockscope_model::view::Filter;

    /// The two arguments the early script is called with: the socket's path and
    /// the request's text (JavaScript string literals that are JSON strings too).
    fn arguments(script: &str) -> (String, String) {
        let args = &script[script.rfind(")(").expect("called at once") + 2..script.len() - 1];
        serde_json::from_str(&format!("[{args}]")).expect("two string literals")
    }

    #[test]
    fn a_live_page_asks_for_what_it_shows_and_nothing_in_it_ends_the_script() {
        let view = ViewSpec {
            filter: Filter {
                prefix: Some("</script><script>alert(1)</script><!--".into()),
                ..Filter::default()
            },
            offset: 500_000,
            ..ViewSpec::default()
        };
        let page = Page {
            fleet: "prod-eu".into(),
            view: view.clone(),
            ..Page::default()
        };
        let script = early_socket(&page).expect("the lock table is kept live");
        assert!(!script.contains('<'), "no </script> nor <!-- in: {script}");
        let (path, request) = arguments(&script);
        // The page compares this text with its own to take the socket over.
        assert_eq!(request, message_text(&ClientMsg::View { id: 0, view }));
        // The upgrade carries it: the server starts on the frame at the handshake.
        let first = lockscope_model::url::query(&request);
        assert_eq!(path, format!("/ws?fleet=prod-eu&first={first}"));
        assert!(!script.contains(".send("), "the script sends nothing itself: {script}");
    }

    #[test]
    fn pages_that_watch_ask_for_what_they_watch_and_others_open_no_socket() {
        let lock = Page {
            screen: Screen::Lock {
                detail: Box::new(LockDetail {
                    name: "jobs/nightly".into(),
                    ..LockDetail::default()
                }),
            },
            ..Page::default()
        };
        let (_, request) = arguments(&early_socket(&lock).unwrap());
        assert_eq!(
            serde_json::from_str::<ClientMsg>(&request).unwrap(),
            ClientMsg::Watch {
                watch: Watch::Lock {
                    name: "jobs/nightly".into()
                }
            }
        );
        let audit = Page {
            screen: Screen::Audit {
                entries: vec![],
                query: Default::default(),
                error: None,
            },
            ..Page::default()
        };
        assert_eq!(early_socket(&audit), None, "the audit page is read once");
    }
}
