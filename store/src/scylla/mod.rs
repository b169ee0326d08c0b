//! The lockscope protocol on ScyllaDB / Cassandra lightweight transactions
//! (`docs/protocol.md`, "ScyllaDB and Cassandra"), over the published two-table locking
//! schema (`tokens`, `token_times`) and lockscope's superset of it.
//!
//! Every statement goes through one narrow interface, [`cql::Cql`]: the `scylla`
//! driver implements it ([`driver`]), and so does an in-memory keyspace with
//! LWT semantics ([`memory`]) on which the contract suite runs here, where no
//! CQL server can be installed.
//!
//! - A lock is a `tokens` row, created by `INSERT … IF NOT EXISTS` and deleted
//!   on release, as the published clients do. Its fencing token comes from
//!   `lockscope_fences`, a counter per lock that survives the row: the
//!   acquirer claims the next value by compare-and-set *before* inserting, and
//!   checks *after* inserting that nobody claimed a later one meanwhile (else it
//!   claims again and moves its row onto the later token before using it), so
//!   tokens grow across acquisitions in the order the lock was held.
//! - A row's `revision` is `fence × 2^24 + extensions`: it grows across
//!   acquisitions and extensions, as observers need.
//! - Sessions are `token_times` rows written with a TTL (the session's ttl, on
//!   the server's clock) and heartbeats that are LWTs refused for a
//!   blacklisted session.
//! - Here: the store handle ([`ScyllaLocks`]: connect, schema detection, the
//!   reads observers use). Beside it: `locks` (the protocol's operations),
//!   `observer`, `unlocker` (the election), `config`.

pub mod cql;
mod driver;
mod locks;
pub mod memory;
mod observer;
mod unlocker;

#[cfg(feature = "test-util")]
pub(crate) use driver::session as driver_session;
pub use driver::{ScyllaConfig, Serial, PASSWORD_ENV};
pub use observer::ScyllaObserver;
pub use unlocker::ScyllaLeadership;

use std::sync::Arc;

use lockscope_model::fleet::SnapshotSharing;
use lockscope_model::record::{BlacklistRecord, SessionRecord, Stored};
use lockscope_model::LockEntry;

use crate::protocol::Blacklisting;
use crate::StoreError;
use cql::{col, scan, Cql, Row, Schema, Stmt, Value};

/// The keyspace when a spec names none.
pub const DEFAULT_KEYSPACE: &str = "lockscope";

/// `revision = fence × REVISION_STRIDE + extensions since the acquisition`.
pub const REVISION_STRIDE: i64 = 1 << 24;

/// Rows per page of a scan.
pub const PAGE_ROWS: i32 = 1000;

/// A ScyllaDB lock store (cheap to clone: a shared executor).
#[derive(Clone)]
pub struct ScyllaLocks {
    cql: Arc<dyn Cql>,
    keyspace: String,
    schema: Schema,
    page: i32,
}

impl ScyllaLocks {
    /// Connects to a real cluster with the driver (see [`ScyllaConfig`]).
    /// `create`: create lockscope's tables where missing (the client library);
    /// the dashboard only reads the schema.
    pub async fn connect(config: &ScyllaConfig, create: bool) -> Result<ScyllaLocks, StoreError> {
        let cql = driver::DriverCql::connect(config).await?;
        ScyllaLocks::over(Arc::new(cql), &config.keyspace, create).await
    }

    /// A store over any executor (the in-memory one in tests): reads which
    /// schema the keyspace has, creating lockscope's tables first if `create`.
    pub async fn over(cql: Arc<dyn Cql>, keyspace: &str, create: bool) -> Result<ScyllaLocks, StoreError> {
        validate_keyspace(keyspace)?;
        let columns = |table: &'static str| {
            let cql = cql.clone();
            let keyspace = keyspace.to_string();
            async move {
                let rows = cql
                    .run(Stmt::Columns, vec![Value::text(keyspace), Value::text(table)])
                    .await?;
                Ok::<Vec<String>, StoreError>(
                    rows.iter()
                        .filter_map(|r| col(r, "column_name").as_text().map(str::to_string))
                        .collect(),
                )
            }
        };
        let mut tokens = columns("tokens").await?;
        let superset = |cols: &[String]| {
            ["fence", "revision", "record"]
                .iter()
                .all(|c| cols.iter().any(|t| t == c))
        };
        // lockscope's own tables go with its columns; a keyspace with the
        // columns but not the tables (created by hand, half way) gets them
        // too. All `IF NOT EXISTS`: clients starting at once may all run them.
        let missing = tokens.is_empty() || (superset(&tokens) && columns("lockscope_fences").await?.is_empty());
        if create && missing {
            for &stmt in Stmt::ALL.iter().filter(|s| s.template().starts_with("CREATE")) {
                cql.run(stmt, Vec::new()).await?;
            }
            tokens = columns("tokens").await?;
        }
        if tokens.is_empty() {
            return Err(StoreError::Config(format!(
                "keyspace {keyspace} has no tokens table: create the published schema or lockscope's \
                 (docs/protocol.md, \"ScyllaDB and Cassandra\")"
            )));
        }
        if superset(&tokens) && columns("lockscope_fences").await?.is_empty() {
            return Err(StoreError::Config(format!(
                "keyspace {keyspace} has lockscope's columns but not its tables (lockscope_fences, …): \
                 run the CREATE TABLE statements of docs/protocol.md, \"ScyllaDB and Cassandra\""
            )));
        }
        let schema = if superset(&tokens) {
            Schema::Superset
        } else {
            Schema::Published
        };
        if create && schema == Schema::Published {
            return Err(StoreError::Config(format!(
                "keyspace {keyspace} has only the published tables: lockscope's client library needs its \
                 columns too (the ALTER TABLE statements in docs/protocol.md, \"ScyllaDB and Cassandra\"); the dashboard \
                 observes and administers the published tables as they are"
            )));
        }
        Ok(ScyllaLocks {
            cql,
            keyspace: keyspace.to_string(),
            schema,
            page: PAGE_ROWS,
        })
    }

    pub fn schema(&self) -> Schema {
        self.schema
    }

    pub fn keyspace(&self) -> &str {
        &self.keyspace
    }

    /// Statements sent through this store's executor (all its clones).
    pub fn statements(&self) -> u64 {
        self.cql.sent()
    }

    /// Rows per page of the observer's scans.
    pub fn with_page(mut self, rows: i32) -> ScyllaLocks {
        self.page = rows.max(1);
        self
    }

    fn superset(&self, what: &str) -> Result<(), StoreError> {
        match self.schema {
            Schema::Superset => Ok(()),
            Schema::Published => Err(StoreError::Config(format!(
                "{what} needs lockscope's columns; keyspace {} has only the published tables",
                self.keyspace
            ))),
        }
    }

    async fn run(&self, stmt: Stmt, values: Vec<Value>) -> Result<Vec<Row>, StoreError> {
        self.cql.run(stmt, values).await
    }

    async fn lwt(&self, stmt: Stmt, values: Vec<Value>) -> Result<bool, StoreError> {
        Ok(cql::applied(self.run(stmt, values).await?)?.applied)
    }

    async fn blacklisted(&self, session: &str) -> Result<bool, StoreError> {
        if self.schema == Schema::Published {
            return Ok(false);
        }
        Ok(!self
            .run(Stmt::BlacklistGet, vec![Value::text(session)])
            .await?
            .is_empty())
    }

    /// Every held lock (the observer's scan), in pages.
    pub async fn held(&self) -> Result<Vec<LockEntry>, StoreError> {
        let stmt = match self.schema {
            Schema::Superset => Stmt::LocksPage,
            Schema::Published => Stmt::LocksPagePublished,
        };
        let rows = scan(&*self.cql, stmt, self.page).await?;
        let mut sharing = SnapshotSharing::default();
        Ok(rows.iter().filter_map(entry_of).map(|e| sharing.share(e)).collect())
    }

    /// Every `token_times` row, in pages.
    pub(crate) async fn session_rows(&self) -> Result<Vec<Row>, StoreError> {
        let stmt = match self.schema {
            Schema::Superset => Stmt::SessionsPage,
            Schema::Published => Stmt::SessionsPagePublished,
        };
        scan(&*self.cql, stmt, self.page).await
    }

    /// Every blacklist entry (none on the published schema, which keeps none).
    pub(crate) async fn blacklist_rows(&self) -> Result<Vec<(String, String)>, StoreError> {
        if self.schema == Schema::Published {
            return Ok(Vec::new());
        }
        let rows = scan(&*self.cql, Stmt::BlacklistPage, self.page).await?;
        Ok(rows
            .iter()
            .filter_map(|r| {
                let id = col(r, "service_session_id").as_text()?;
                Some((
                    id.to_string(),
                    col(r, "record").as_text().unwrap_or_default().to_string(),
                ))
            })
            .collect())
    }

    /// Writes raw text as lock `name`'s record, held, bypassing the protocol
    /// (tests and demos of malformed records).
    pub async fn put_raw(&self, name: &str, value: &[u8]) -> Result<(), StoreError> {
        self.superset("writing a raw record")?;
        let fence = self.claim_fence(name).await?;
        let text = String::from_utf8_lossy(value).into_owned();
        self.run(
            Stmt::Acquire,
            vec![
                Value::text(name),
                Value::Null,
                Value::Null,
                Value::BigInt(fence),
                Value::BigInt(fence * REVISION_STRIDE),
                Value::Text(text),
            ],
        )
        .await?;
        Ok(())
    }

    /// The next fencing token of counter `token` (a lock's name, or the
    /// unlocker's terms), claimed by compare-and-set: no two callers get the same.
    async fn claim_fence(&self, token: &str) -> Result<i64, StoreError> {
        loop {
            let now = self.fence_now(token).await?;
            let claimed = match now {
                None => {
                    self.lwt(Stmt::FenceInit, vec![Value::text(token), Value::BigInt(1)])
                        .await?
                }
                Some(f) => {
                    self.lwt(
                        Stmt::FenceBump,
                        vec![Value::BigInt(f + 1), Value::text(token), Value::BigInt(f)],
                    )
                    .await?
                }
            };
            if claimed {
                return Ok(now.unwrap_or(0) + 1);
            }
            // Another claim landed first: read the counter again.
        }
    }

    /// The counter's value now (read at SERIAL).
    async fn fence_now(&self, token: &str) -> Result<Option<i64>, StoreError> {
        let rows = self.run(Stmt::FenceGet, vec![Value::text(token)]).await?;
        Ok(rows.first().and_then(|r| col(r, "fence").as_i64()))
    }

    /// A TTL in whole seconds for `ttl_ms`: rounded up, plus one, because
    /// servers expire a cell at its write time truncated to the second plus
    /// the TTL (so the row outlives the ttl, never the reverse).
    fn session_lease_ttl(ttl_ms: i64) -> i32 {
        ((ttl_ms + 999) / 1000 + 1).clamp(1, i32::MAX as i64) as i32
    }

    /// Blacklists `entry.session` if it has no entry yet (`INSERT … IF NOT
    /// EXISTS`: an entry already there is kept as it is, and returned), then
    /// marks its `token_times` row, which its heartbeat LWT checks.
    ///
    /// The entry and the mark are two writes: a blacklisting whose mark failed
    /// (or timed out) after its entry was written left the session heartbeating.
    /// So an existing entry is marked again too (`IF EXISTS`, idempotent), with
    /// the stored entry's text; a retry completes what the first attempt began.
    async fn put_blacklist(&self, entry: &BlacklistRecord) -> Result<Blacklisting, StoreError> {
        self.superset("a blacklist")?;
        let json = serde_json::to_string(entry).expect("records serialise");
        let id = Value::text(&entry.session);
        let put = cql::applied(
            self.run(Stmt::BlacklistPut, vec![id.clone(), Value::text(&json)])
                .await?,
        )?;
        if !put.applied {
            // Both servers return the row that stopped the insert; read it if not.
            let existing = match col(&put.row, "record").as_text() {
                Some(r) => Some(r.to_string()),
                None => self
                    .run(Stmt::BlacklistGet, vec![id])
                    .await?
                    .first()
                    .and_then(|r| col(r, "record").as_text().map(str::to_string)),
            };
            // No entry any more: lifted meanwhile, and lifting clears the mark.
            if let Some(record) = &existing {
                self.lwt(
                    Stmt::SessionMark,
                    vec![Value::text(record), Value::text(&entry.session)],
                )
                .await?;
            }
            return Ok(Blacklisting::Exists(existing.map(|r| Stored::parse(r.as_bytes()))));
        }
        self.lwt(Stmt::SessionMark, vec![Value::Text(json), Value::text(&entry.session)])
            .await?;
        Ok(Blacklisting::Written)
    }

    /// Whether the session's `token_times` row exists (it runs out with its TTL).
    async fn registered(&self, session: &str) -> Result<bool, StoreError> {
        self.superset("a session")?;
        Ok(!self.run(Stmt::SessionGet, vec![Value::text(session)]).await?.is_empty())
    }

    fn session_values(session: &SessionRecord) -> (Value, Value) {
        (
            Value::Timestamp(session.heartbeat_at),
            Value::Text(serde_json::to_string(session).expect("records serialise")),
        )
    }
}

/// A keyspace name: a plain CQL identifier (it is written into statements).
pub fn validate_keyspace(keyspace: &str) -> Result<(), StoreError> {
    let ok = !keyspace.is_empty()
        && keyspace.len() <= 48
        && keyspace.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !keyspace.starts_with(|c: char| c.is_ascii_digit());
    if ok {
        Ok(())
    } else {
        Err(StoreError::Config(format!(
            "keyspace {keyspace:?} is not a plain CQL identifier (letters, digits, _; at most 48)"
        )))
    }
}

/// A `tokens` row as the lock entry it stands for; `None` for a row without a
/// name. Rows written by the published schema's clients (no lockscope record)
/// keep what they have: the holder's session and the row's time.
fn entry_of(row: &Row) -> Option<LockEntry> {
    let name = col(row, "token").as_text()?.to_string();
    let record = col(row, "record").as_text();
    let fence = col(row, "fence").as_i64();
    match (record, fence) {
        (Some(record), Some(fence)) => {
            let revision = col(row, "revision").as_i64().unwrap_or(fence * REVISION_STRIDE);
            Some(LockEntry::from_stored(name, fence, revision, record.as_bytes()))
        }
        _ => Some(foreign_entry(
            name,
            col(row, "service_session_id").as_text(),
            col(row, "timestamp").as_i64(),
        )),
    }
}

/// A row of the published schema: its fencing token and revision are its
/// `timestamp` (the only version it has, see `docs/protocol.md`).
fn foreign_entry(name: String, session: Option<&str>, timestamp: Option<i64>) -> LockEntry {
    let version = timestamp.unwrap_or(0);
    LockEntry::foreign(name, version, version, session.map(str::to_string), timestamp)
}

/// Where a ScyllaDB fleet lives: a real cluster, or an in-memory keyspace of
/// this process (`scylla-memory:NAME`, for tests and demos: not a database).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScyllaTarget {
    Cluster(ScyllaConfig),
    Memory {
        name: String,
        /// Only the published schema's two tables.
        published: bool,
    },
}

impl ScyllaTarget {
    /// Connects (`create`: make lockscope's tables where missing, as the client
    /// library does).
    pub async fn connect(&self, create: bool) -> Result<ScyllaLocks, StoreError> {
        match self {
            ScyllaTarget::Cluster(config) => ScyllaLocks::connect(config, create).await,
            ScyllaTarget::Memory { name, published } => {
                let cql = memory::MemoryCql::named(name, *published);
                let keyspace = cql.keyspace().to_string();
                ScyllaLocks::over(Arc::new(cql), &keyspace, create).await
            }
        }
    }

    /// How often the dashboard's observer scans the tables.
    pub fn scan_interval(&self) -> std::time::Duration {
        match self {
            ScyllaTarget::Cluster(c) => c.scan,
            ScyllaTarget::Memory { .. } => std::time::Duration::from_secs(1),
        }
    }

    /// Where the locks live, for people (no credentials).
    pub fn source(&self) -> String {
        match self {
            ScyllaTarget::Cluster(c) => format!("ScyllaDB {} keyspace {}", c.nodes.join(","), c.keyspace),
            ScyllaTarget::Memory { name, published } => format!(
                "in-memory CQL keyspace {name}{} (an emulation in this process, not a database)",
                if *published { ", published schema" } else { "" }
            ),
        }
    }
}
