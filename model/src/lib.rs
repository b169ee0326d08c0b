//! lockscope's pure domain: what a held lock is, how the live fleet state changes,
//! and the messages the server and the browser exchange.
//!
//! Compiled both natively (server, store) and for wasm (the hydrated UI), so it has
//! no I/O and no clock of its own: every function that needs "now" takes it.
//!
//! - [`admin`]: roles, admin actions, the audit log's entries, what a page's
//!   viewer may do.
//! - [`record`]: the JSON lock record as the lock protocol stores it (`docs/protocol.md`).
//! - [`fleet`]: lock entries, fleet events and the reducer ([`fleet::FleetState::apply`])
//!   the server's hub runs.
//! - [`detail`]: the lock detail and sessions pages' data.
//! - [`session`]: sessions, the blacklist, what a lock's holder looks like
//!   ([`session::Holder`]), the clock-skew estimate, deadlock detection.
//! - [`view`]: what one browser looks at (filter, sort, window of rows), the
//!   severity order, and the window reducer the browser runs.
//! - [`wire`]: the versioned websocket messages.
//! - [`review`]: the incident-review page's data (a history query, the table at
//!   an instant, what changed meanwhile).
//! - [`unlock`]: the unlocker's release decision and status.
//! - [`contention`]: the sessions' contention counters summed as increases
//!   (counter resets handled); [`charts`]: rates and percentiles over windows.
//! - [`polled`]: when a polled or rescanned fleet last read its store, and
//!   whether that is recent enough to count as live.
//! - [`time`]: millisecond timestamps and the human forms of durations.
//! - [`url`]: percent-encoding a lock name or fleet as one URL path segment.

pub mod admin;
pub mod charts;
pub mod contention;
pub mod detail;
pub mod fleet;
pub mod history;
pub mod polled;
pub mod record;
pub mod review;
pub mod session;
pub mod time;
pub mod unlock;
pub mod url;
pub mod view;
pub mod wire;

#[cfg(test)]
mod proptests;

pub use fleet::{Changed, Counts, FleetEvent, FleetState, LockBody, LockEntry, Snapshot, StoreStatus, Waiter};
pub use record::LockRecord;
pub use session::{BlacklistEntry, Holder, SessionEntry};
pub use view::{Aggregates, RowState, ViewSpec, Window, WindowFrame, WindowRow};
pub use wire::{ClientMsg, FleetSummary, Page, Screen, ServerMsg, Watch, PROTOCOL_VERSION};
