//! The store crate's integration tests against a real etcd, SQLite and
//! PostgreSQL, in one test binary (one link instead of one per suite).

mod busy_link;
mod contract_etcd;
mod contract_scylla;
mod contract_sql;
mod etcd_mutex;
mod etcd_mutex_queue;
mod etcd_observer;
mod force_release_race;
mod pg_advisory;
mod redis;
mod redis_tls;
mod redlock;
mod shedlock;
mod sql_sessions;
mod store_gone;
mod unlocker_election;
mod zookeeper;
