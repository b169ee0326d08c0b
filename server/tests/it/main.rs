//! The server's integration tests against real stores, in one test binary: each
//! test binary is a link of the whole server (tens of seconds on two cores), so
//! the suites are modules of this one. `memory` keeps a binary of its own (its
//! counting allocator is global) and so does `unlocker_replicas` (timing-bound
//! tests of two real processes that run one at a time, never beside other suites).

mod abuse;
mod admin;
mod admin_exact;
mod attribution;
mod binary;
mod cli;
mod cli_watch;
mod demo;
mod deploy;
mod etcd_mutex;
mod foreign;
mod fuzz;
mod history;
mod history_exports;
mod history_faults;
mod limits;
mod list;
mod live;
mod metrics;
mod openapi;
mod outage;
mod pg_advisory;
mod redis;
mod replicas_pg;
mod restart_gap;
mod scrape;
mod soak;
mod store_busy;
mod unlocker;
mod unlocker_audit;
mod zookeeper;
