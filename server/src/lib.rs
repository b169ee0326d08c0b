//! The lockscope server (`lockscope` binary). Its rooms, one per concern:
//!
//! - [`live`]: watch a store: one task per fleet (the hub) owns its live table and
//!   every view of it, and sends each subscriber frames of its window.
//! - [`act`]: act on a lock: every admin action checked, done through the store
//!   and audited ([`act::admin`]), and the unlocker ([`act::unlocker`]).
//! - [`remember`]: what the store forgets, in SQL: the audit log and sign-in
//!   sessions ([`remember::audit`]), the lock history ([`remember::history`]).
//! - [`metrics`]: the Prometheus registry and its collectors, read from what the
//!   hubs, the history and the limits publish (served by [`web`]).
//! - [`web`]: the HTTP skin: routes, pages, the JSON API, forms, the websocket
//!   upgrade, one error type, the shared state and the caller.
//! - [`auth`]: identities (tokens, sign-in sessions, a trusted proxy), roles, CSRF,
//!   and the limits on failed checks.
//! - [`settings`]: `lockscope.toml`; [`client`]: what identifies a client (its
//!   source address, random keys).
//! - [`cli`]: the command line and the subcommands besides `serve` (`admin`,
//!   `get`/`describe`, `history`, `lock`/`unlock`, `demo`).
//! - [`start`]: the `lockscope` command itself (`main.rs` only calls it): `serve`
//!   wires the stores, hubs, history, audit, auth, unlockers and web server.
//!
//! Data flows one way: store observer → hub reducer → view windows → browser.
//! Imports go down: settings, client and remember at the bottom; then live, auth
//! and cli; then metrics, act, web; `start` on top (checked by
//! `scripts/check-modules.py`).

pub mod act;
pub mod auth;
pub mod cli;
pub mod client;
pub mod live;
pub mod metrics;
pub mod remember;
pub mod settings;
pub mod start;
pub mod web;

pub use web::listener::{check_exposure, drop_stalled_peer_after};
pub use web::serve;
