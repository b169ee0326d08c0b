//! The history credits a release to an actor only when the store says that
//! actor's compare-and-delete removed the acquisition (issue 24, defect 1).
//!
//! docs/operations.md (History): "A release is credited to an operator
//! (`force_released`) or to the unlocker (`auto_released`) only when the
//! store says that actor's compare-and-delete is the one that removed the
//! acquisition".
//!
//! - `library`: on etcd, SQLite and PostgreSQL, through the hub and the
//!   history as the server runs them: an operator's release is announced, the
//!   holder releases its own lock (a real client) and the hub sees the delete,
//!   then the operator's guarded release answers "not held": the history
//!   records the holder's release, never `force_released`. An operator's
//!   release that does delete is `force_released` by them, with their reason,
//!   and the unlocker's fenced release is `auto_released`, each at the
//!   revision the store answered.
//! - `replicas`: two real `lockscope` processes on one etcd fleet with the
//!   unlocker on (the active one paused while the other releases a dead
//!   holder's lock, then woken): see that module.

mod library;
mod replicas;
