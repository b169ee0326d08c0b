//! Watch a store: one task per fleet owns its live table and every view of it,
//! and sends each subscriber frames of its window.
//!
//! - [`hub`]: the fleet's task (the model's reducer, commands, watchers of one
//!   lock or the sessions, the history's feed) and the handles that reach it.
//! - [`views`]: per (filter, sort) ordered indexes, per subscriber windows,
//!   aggregates; the pure logic the hub runs.
//! - [`stats`]: what a hub counts for `/metrics` and the charts ([`stats::FleetStats`]).
//! - [`subscriber`]: the `/ws` subscriber protocol over a hub, independent of
//!   axum, and the bounds on open sockets ([`subscriber::limit`]).

pub mod hub;
pub mod stats;
pub mod subscriber;
pub mod views;
