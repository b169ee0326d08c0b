//! [`Cql`] over a real cluster, with the `scylla` driver: connection settings
//! ([`ScyllaConfig`]), every statement prepared once and sent at the
//! consistency its [`Mode`] names, values converted both ways.
//!
//! Not run here (no CQL server can be installed on our machines): the contract
//! suite runs it against a real cluster when `SCYLLA_URI` is set
//! (`store/tests/it/contract_scylla.rs`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use scylla::client::execution_profile::ExecutionProfile;
use scylla::client::session::{OpenSsl010Config, Session, TlsContext};
use scylla::client::session_builder::SessionBuilder;
use scylla::errors::ExecutionError;
use scylla::response::{PagingState, PagingStateResponse};
use scylla::statement::prepared::PreparedStatement;
use scylla::statement::{Consistency, SerialConsistency};
use scylla::value::{CqlTimestamp, CqlValue};
use tokio::sync::Mutex;

use super::cql::{Cql, Mode, Page, Row, Stmt, Value};
use crate::StoreError;

/// Which serial consistency lightweight transactions use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Serial {
    /// Paxos across all datacenters: linearizable everywhere; each LWT costs
    /// cross-datacenter round trips.
    #[default]
    Serial,
    /// Paxos within the local datacenter: cheaper, but two datacenters can each
    /// grant the same lock; only for a keyspace written from one datacenter.
    Local,
}

/// How to reach a cluster (`scylla:` specs, `docs/operations.md`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScyllaConfig {
    /// `host:port` contact points.
    pub nodes: Vec<String>,
    pub keyspace: String,
    /// Prefer this datacenter's nodes (load balancing).
    pub datacenter: Option<String>,
    pub serial: Serial,
    /// User name; its password comes from `LOCKSCOPE_SCYLLA_PASSWORD`, or the
    /// file `password_file` names (never from the spec itself, which is shown
    /// and logged).
    pub user: Option<String>,
    pub password_file: Option<String>,
    /// PEM file of the CA that signed the nodes' certificates: TLS when set.
    pub tls_ca: Option<String>,
    /// Each request's timeout.
    pub timeout: Duration,
    /// How often the dashboard's observer scans the tables.
    pub scan: Duration,
}

impl ScyllaConfig {
    pub fn new(nodes: Vec<String>, keyspace: &str) -> ScyllaConfig {
        ScyllaConfig {
            nodes,
            keyspace: keyspace.to_string(),
            datacenter: None,
            serial: Serial::Serial,
            user: None,
            password_file: None,
            tls_ca: None,
            timeout: Duration::from_secs(5),
            scan: Duration::from_secs(1),
        }
    }
}

/// The environment variable holding the password of [`ScyllaConfig::user`].
pub const PASSWORD_ENV: &str = "LOCKSCOPE_SCYLLA_PASSWORD";

pub(super) struct DriverCql {
    session: Session,
    keyspace: String,
    serial: SerialConsistency,
    prepared: Mutex<HashMap<Stmt, PreparedStatement>>,
    sent: AtomicU64,
}

impl DriverCql {
    pub(super) async fn connect(config: &ScyllaConfig) -> Result<DriverCql, StoreError> {
        super::validate_keyspace(&config.keyspace)?;
        let session = session(config).await?;
        Ok(DriverCql {
            session,
            keyspace: config.keyspace.clone(),
            serial: match config.serial {
                Serial::Serial => SerialConsistency::Serial,
                Serial::Local => SerialConsistency::LocalSerial,
            },
            prepared: Mutex::new(HashMap::new()),
            sent: AtomicU64::new(0),
        })
    }

    /// The statement prepared (once per session) at its mode's consistency.
    async fn prepared(&self, stmt: Stmt) -> Result<PreparedStatement, StoreError> {
        let mut prepared = self.prepared.lock().await;
        if let Some(p) = prepared.get(&stmt) {
            return Ok(p.clone());
        }
        let mut p = self
            .session
            .prepare(stmt.cql(&self.keyspace))
            .await
            .map_err(|e| StoreError::backend(format!("preparing {stmt:?}"), e))?;
        let local = self.serial == SerialConsistency::LocalSerial;
        match stmt.mode() {
            Mode::Lwt => {
                p.set_consistency(if local {
                    Consistency::LocalQuorum
                } else {
                    Consistency::Quorum
                });
                p.set_serial_consistency(Some(self.serial));
            }
            Mode::SerialRead => {
                p.set_consistency(if local {
                    Consistency::LocalSerial
                } else {
                    Consistency::Serial
                });
            }
            Mode::Read => {
                p.set_consistency(if local {
                    Consistency::LocalQuorum
                } else {
                    Consistency::Quorum
                });
            }
            Mode::Schema => p.set_consistency(Consistency::One),
        }
        // Reads may be retried by the driver (on another node, after a
        // timeout); writes may not: an LWT whose outcome is unknown is read
        // back by the caller instead (`super::locks`).
        p.set_is_idempotent(matches!(stmt.mode(), Mode::Read | Mode::SerialRead | Mode::Schema));
        prepared.insert(stmt, p.clone());
        Ok(p)
    }

    async fn execute(
        &self,
        stmt: Stmt,
        values: Vec<Value>,
        page: Option<(i32, PagingState)>,
    ) -> Result<(Vec<Row>, Option<Vec<u8>>), StoreError> {
        self.sent.fetch_add(1, Ordering::Relaxed);
        if stmt.mode() == Mode::Schema && stmt != Stmt::Columns {
            // DDL is not prepared; wait until every node agrees on the schema.
            let mut ddl = scylla::statement::unprepared::Statement::new(stmt.cql(&self.keyspace));
            ddl.set_consistency(Consistency::One);
            self.session
                .query_unpaged(ddl, ())
                .await
                .map_err(|e| failure(stmt, e))?;
            self.session
                .await_schema_agreement()
                .await
                .map_err(|e| StoreError::backend("waiting for schema agreement", e))?;
            return Ok((Vec::new(), None));
        }
        let mut prepared = self.prepared(stmt).await?;
        let values: Vec<Option<CqlValue>> = values.into_iter().map(to_cql).collect();
        let failed = |e| failure(stmt, e);
        let (result, next) = match page {
            Some((size, state)) => {
                prepared.set_page_size(size);
                let (result, next) = self
                    .session
                    .execute_single_page(&prepared, values, state)
                    .await
                    .map_err(failed)?;
                let next = match next {
                    PagingStateResponse::HasMorePages { state } => state.as_bytes_slice().map(|b| b.to_vec()),
                    PagingStateResponse::NoMorePages => None,
                };
                (result, next)
            }
            None => (
                self.session.execute_unpaged(&prepared, values).await.map_err(failed)?,
                None,
            ),
        };
        if !result.is_rows() {
            return Ok((Vec::new(), None));
        }
        let rows = result
            .into_rows_result()
            .map_err(|e| StoreError::backend(format!("{stmt:?} rows"), e))?;
        let names: Vec<String> = rows.column_specs().iter().map(|c| c.name().to_string()).collect();
        let mut out = Vec::new();
        for row in rows
            .rows::<scylla::value::Row>()
            .map_err(|e| StoreError::backend(format!("{stmt:?} rows"), e))?
        {
            let row = row.map_err(|e| StoreError::backend(format!("{stmt:?} row"), e))?;
            out.push(
                names
                    .iter()
                    .cloned()
                    .zip(row.columns.into_iter().map(from_cql))
                    .collect(),
            );
        }
        Ok((out, next))
    }
}

impl Cql for DriverCql {
    fn run<'a>(&'a self, stmt: Stmt, values: Vec<Value>) -> BoxFuture<'a, Result<Vec<Row>, StoreError>> {
        Box::pin(async move { Ok(self.execute(stmt, values, None).await?.0) })
    }

    fn page<'a>(&'a self, stmt: Stmt, size: i32, state: Option<Vec<u8>>) -> BoxFuture<'a, Result<Page, StoreError>> {
        Box::pin(async move {
            let state = state.map_or_else(PagingState::start, PagingState::new_from_raw_bytes);
            let (rows, next) = self.execute(stmt, Vec::new(), Some((size, state))).await?;
            Ok(Page { rows, next })
        })
    }

    fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }
}

/// A driver session to the cluster `config` names (also the test harness's,
/// to create its keyspaces).
pub(crate) async fn session(config: &ScyllaConfig) -> Result<Session, StoreError> {
    let profile = ExecutionProfile::builder()
        .request_timeout(Some(config.timeout))
        .build()
        .into_handle();
    let mut builder = SessionBuilder::new()
        .known_nodes(&config.nodes)
        .connection_timeout(config.timeout)
        .default_execution_profile_handle(profile);
    if let Some(dc) = &config.datacenter {
        builder = builder.prefer_datacenter(dc.clone());
    }
    if let Some(user) = &config.user {
        builder = builder.user(user.clone(), password(user, config.password_file.as_deref())?);
    }
    if let Some(ca) = &config.tls_ca {
        builder = builder.tls_context(Some(TlsContext::OpenSsl010Config(tls(ca)?)));
    }
    builder
        .build()
        .await
        .map_err(|e| StoreError::unreachable(format!("ScyllaDB {}", config.nodes.join(",")), e))
}

/// The password of `user`: from the file, else from [`PASSWORD_ENV`].
fn password(user: &str, file: Option<&str>) -> Result<String, StoreError> {
    if let Some(file) = file {
        let text = std::fs::read_to_string(file)
            .map_err(|e| StoreError::Config(format!("reading the ScyllaDB password file {file}: {e}")))?;
        return Ok(text.trim_end_matches(['\r', '\n']).to_string());
    }
    std::env::var(PASSWORD_ENV).map_err(|_| {
        StoreError::Config(format!(
            "ScyllaDB user {user} needs its password in {PASSWORD_ENV} or a password_file"
        ))
    })
}

/// TLS verifying the nodes against the CA in `ca` (OpenSSL's connector
/// defaults; the driver checks each node's IP against its certificate).
fn tls(ca: &str) -> Result<OpenSsl010Config, StoreError> {
    use openssl::ssl::{SslConnector, SslMethod};
    let bad = |e: openssl::error::ErrorStack| StoreError::Config(format!("TLS with CA {ca}: {e}"));
    let mut b = SslConnector::builder(SslMethod::tls()).map_err(bad)?;
    b.set_ca_file(ca).map_err(bad)?;
    Ok(OpenSsl010Config::new(b))
}

/// What a failed request means: a timeout, the cluster unreachable (no
/// connection, no replicas to answer), or an error in what was asked.
fn failure(stmt: Stmt, e: ExecutionError) -> StoreError {
    use scylla::errors::{DbError, RequestAttemptError};
    let what = format!("ScyllaDB {stmt:?}");
    match &e {
        ExecutionError::RequestTimeout(d) => StoreError::Timeout(*d),
        ExecutionError::ConnectionPoolError(_) | ExecutionError::EmptyPlan => StoreError::unreachable(what, e),
        ExecutionError::LastAttemptError(
            RequestAttemptError::BrokenConnectionError(_)
            | RequestAttemptError::UnableToAllocStreamId
            | RequestAttemptError::DbError(
                DbError::Unavailable { .. }
                | DbError::Overloaded
                | DbError::ReadTimeout { .. }
                | DbError::WriteTimeout { .. }
                | DbError::IsBootstrapping,
                _,
            ),
        ) => StoreError::unreachable(what, e),
        _ => StoreError::backend(what, e),
    }
}

pub(super) fn to_cql(v: Value) -> Option<CqlValue> {
    Some(match v {
        Value::Null => return None,
        Value::Text(s) => CqlValue::Text(s),
        Value::BigInt(i) => CqlValue::BigInt(i),
        Value::Int(i) => CqlValue::Int(i),
        Value::Timestamp(ms) => CqlValue::Timestamp(CqlTimestamp(ms)),
        Value::Boolean(b) => CqlValue::Boolean(b),
        Value::List(items) => CqlValue::List(items.into_iter().filter_map(to_cql).collect()),
    })
}

pub(super) fn from_cql(v: Option<CqlValue>) -> Value {
    match v {
        None => Value::Null,
        Some(CqlValue::Text(s)) | Some(CqlValue::Ascii(s)) => Value::Text(s),
        Some(CqlValue::BigInt(i)) => Value::BigInt(i),
        Some(CqlValue::Int(i)) => Value::Int(i),
        Some(CqlValue::Timestamp(t)) => Value::Timestamp(t.0),
        Some(CqlValue::Boolean(b)) => Value::Boolean(b),
        Some(CqlValue::List(items)) => Value::List(items.into_iter().map(|i| from_cql(Some(i))).collect()),
        // A type lockscope's tables do not use: kept visible, not dropped.
        Some(other) => Value::Text(format!("{other:?}")),
    }
}
