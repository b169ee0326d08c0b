//! The page's refresh, in the browser: once hydrated, ask the charts API
//! every refresh interval and replace the data; a clock ticks each second so
//! "N s ago" and staleness follow. One request at a time: a tick while one is
//! still out is skipped, and a request gives up after its timeout, so a hung
//! server shows as "not live" rather than as a queue of requests.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use leptos::prelude::*;
use leptos::task::spawn_local;
use lockscope_model::charts::Charts;
use lockscope_model::time::Millis;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use web_sys::{AbortSignal, Request, RequestCache, RequestInit, Response};

use super::freshness::Freshness;

fn local_now() -> Millis {
    js_sys::Date::now() as Millis
}

/// A JavaScript error's message.
fn js_text(e: JsValue) -> String {
    js_sys::Reflect::get(&e, &JsValue::from_str("message"))
        .ok()
        .and_then(|m| m.as_string())
        .or_else(|| e.as_string())
        .unwrap_or_else(|| format!("{e:?}"))
}

/// Starts refreshing once the page has hydrated (effects run in the browser only).
pub fn start(url: String, refresh_ms: i64, data: RwSignal<Charts>, fresh: RwSignal<Freshness>, now: RwSignal<Millis>) {
    Effect::new(move |_| {
        let loaded = local_now();
        now.set(loaded);
        // The server's render is the first answer.
        fresh.set(Freshness {
            received_at: Some(loaded),
            error: None,
        });
        set_interval(move || now.set(local_now()), Duration::from_secs(1));
        let busy = Rc::new(Cell::new(false));
        let url = url.clone();
        let timeout = refresh_ms.max(10_000) as u32;
        set_interval(
            move || {
                if busy.replace(true) {
                    return;
                }
                let busy = busy.clone();
                let url = url.clone();
                spawn_local(async move {
                    match fetch(&url, timeout).await {
                        Ok(charts) => {
                            data.set(charts);
                            fresh.set(Freshness {
                                received_at: Some(local_now()),
                                error: None,
                            });
                        }
                        Err(why) => fresh.update(|f| f.error = Some(why)),
                    }
                    now.set(local_now());
                    busy.set(false);
                });
            },
            Duration::from_millis(refresh_ms as u64),
        );
    });
}

async fn fetch(url: &str, timeout_ms: u32) -> Result<Charts, String> {
    let init = RequestInit::new();
    init.set_method("GET");
    init.set_cache(RequestCache::NoStore);
    init.set_signal(Some(&AbortSignal::timeout_with_u32(timeout_ms)));
    let req = Request::new_with_str_and_init(url, &init).map_err(js_text)?;
    req.headers().set("Accept", "application/json").map_err(js_text)?;
    let resp = JsFuture::from(window().fetch_with_request(&req))
        .await
        .map_err(|e| format!("no answer from the server ({})", js_text(e)))?;
    let resp: Response = resp.dyn_into().map_err(js_text)?;
    let body = JsFuture::from(resp.text().map_err(js_text)?)
        .await
        .map_err(|e| format!("the answer was cut ({})", js_text(e)))?
        .as_string()
        .unwrap_or_default();
    if !resp.ok() {
        let body: String = body.chars().take(200).collect();
        return Err(format!("the server answered {} {}", resp.status(), body.trim()));
    }
    serde_json::from_str(&body).map_err(|e| format!("unreadable answer ({e})"))
}
