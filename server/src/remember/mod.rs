//! What the store forgets, kept in SQL: who did what, and what happened.
//!
//! - [`audit`]: the append-only audit log of admin actions, and the browser's
//!   sign-in sessions.
//! - [`history`]: every event the hubs derive, queried, exported, replayed into
//!   the table at any instant, and summed into the contention charts.

pub mod audit;
pub mod history;
