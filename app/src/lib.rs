//! lockscope's UI. The server renders the page (readable without JavaScript)
//! from one window of the view the URL names; in the browser the same page
//! hydrates, opens `/ws`, asks for that view and keeps it live by feeding the
//! frames to the model's window reducer.
//!
//! - [`live`]: the browser-side state (the view's window, aggregates, store
//!   status, connection, clock offset) and how each server message changes it;
//!   plain logic, tested natively.
//! - [`rows`]: what a row says, as text (pure, tested natively).
//! - [`page`]: the document, the frame every screen shares and the choice of
//!   screen.
//! - [`links`]: every URL the pages build (a leaf: pages link to each other
//!   without importing each other).
//! - [`table`]: the lock table page; [`detail`]: one lock; [`sessions`]: the sessions.
//! - [`lease`]: a foreign lock's lease in words (the detail page and the
//!   force-release dialog).
//! - [`viewer`]: who is looking (or the no-authentication warning) and the
//!   notice of their last admin action.
//! - [`actions`]: the admin forms (blacklist, lift a blacklist) the detail and
//!   sessions pages share; [`release`]: the detail page's force-release dialog.
//! - [`audit`]: the audit log page; [`signin`]: the sign-in form.
//! - [`history`]: the incident-review page (a history query, its exports);
//!   [`timeline`]: one lock's timeline (SVG); [`travel`]: the table at an instant.
//! - [`charts`]: the contention charts page (kept current by asking the API again).
//! - [`unlocker`]: the overview's unlocker cell (mode, active replica, what is due).
//! - [`outage`]: what the page says while a fleet's store is not live (the
//!   overview's "unknown", the banner with the failure in one line).
//! - [`prefs`]: the reader's theme and time zone (remembered in the browser);
//!   [`focus`]: keyboard use of the `<details>` used as dialogs.
//! - [`boot`]: what a live page starts from its head before the wasm arrives
//!   (the websocket, asking for the page's view at once).
//! - `socket` (hydrate only): the websocket client with reconnect backoff; it
//!   takes over the socket [`boot`] opened.
// The page's view type nests past the compiler's default depth of 128 when
// the wasm build computes its hydration future's layout.
#![recursion_limit = "256"]

pub mod actions;
pub mod audit;
pub mod boot;
pub mod charts;
pub mod detail;
pub mod focus;
pub mod history;
pub mod lease;
pub mod links;
pub mod live;
pub mod outage;
pub mod page;
pub mod prefs;
pub mod release;
#[cfg(all(test, feature = "ssr"))]
mod render_tests;
pub mod rows;
pub mod sessions;
pub mod signin;
#[cfg(feature = "hydrate")]
mod socket;
pub mod table;
pub mod timeline;
pub mod travel;
pub mod unlocker;
pub mod viewer;

pub use page::{shell, App};
