//! lockscope's UI. The server renders the complete page (readable without
//! JavaScript) from the hub's snapshot; in the browser the same page hydrates,
//! opens `/ws` and keeps the table live by feeding the messages to the model's
//! reducer.
//!
//! - [`live`]: the browser-side state (table, store status, connection, clock
//!   offset) and how each server message changes it; plain logic, tested natively.
//! - [`page`]: the components.
//! - `socket` (hydrate only): the websocket client with reconnect backoff.

pub mod live;
pub mod page;
#[cfg(feature = "hydrate")]
mod socket;

pub use page::{shell, App};

#[cfg(feature = "hydrate")]
#[wasm_bindgen::prelude::wasm_bindgen]
pub fn hydrate() {
    console_error_panic_hook::set_once();
    leptos::mount::hydrate_body(App);
}
