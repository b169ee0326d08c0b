//! The one narrow seam between the ScyllaDB lock protocol and a CQL server:
//! every statement lockscope sends ([`Stmt`], with its exact text and how it is
//! sent), the values it binds and reads ([`Value`], [`Row`]), and the executor
//! that runs it ([`Cql`]). The `scylla` driver implements [`Cql`]
//! (`super::driver`), and so does an in-memory emulation of the same tables
//! with lightweight-transaction semantics (`super::memory`), so that everything
//! above the driver (client library, observer, admin, unlocker) runs in tests
//! on machines where no CQL server can.

use std::collections::BTreeMap;

use futures::future::BoxFuture;

use crate::StoreError;

/// A CQL value as lockscope binds and reads them (only the types its tables use).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    Null,
    Text(String),
    BigInt(i64),
    Int(i32),
    /// `timestamp`: unix ms.
    Timestamp(i64),
    Boolean(bool),
    List(Vec<Value>),
}

impl Value {
    pub fn text(s: impl Into<String>) -> Value {
        Value::Text(s.into())
    }

    pub fn as_text(&self) -> Option<&str> {
        match self {
            Value::Text(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::BigInt(v) | Value::Timestamp(v) => Some(*v),
            Value::Int(v) => Some(i64::from(*v)),
            _ => None,
        }
    }
}

/// A result row, by column name (an LWT's `[applied]` included).
pub type Row = BTreeMap<String, Value>;

/// A row's column, `Null` when absent.
pub fn col<'r>(row: &'r Row, name: &str) -> &'r Value {
    static NULL: Value = Value::Null;
    row.get(name).unwrap_or(&NULL)
}

/// What a lightweight transaction answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    pub applied: bool,
    /// The other columns returned with `[applied]`: ScyllaDB returns the row as
    /// it was (all its columns, null when there was no row), on success and
    /// failure alike; Cassandra returns the conditioned columns on failure only.
    /// Never relied on: a caller that must know the current row reads it at
    /// SERIAL.
    pub row: Row,
}

/// Reads an LWT's answer by column name (never by position: the two servers
/// return different columns after it).
pub fn applied(rows: Vec<Row>) -> Result<Applied, StoreError> {
    let Some(mut row) = rows.into_iter().next() else {
        return Err(StoreError::backend_msg("a conditional statement returned no row"));
    };
    match row.remove("[applied]") {
        Some(Value::Boolean(applied)) => Ok(Applied { applied, row }),
        other => Err(StoreError::backend_msg(format!(
            "a conditional statement returned no boolean [applied] column (got {other:?})"
        ))),
    }
}

/// How a statement is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// A lightweight transaction: Paxos at the serial consistency (SERIAL or
    /// LOCAL_SERIAL, [`super::ScyllaConfig::serial`]), committed at QUORUM.
    Lwt,
    /// A read that must see every committed LWT: at the serial consistency.
    SerialRead,
    /// A read at QUORUM. (There are no plain writes: every write is an LWT,
    /// since mixing the two on one partition orders them by two different
    /// clocks.)
    Read,
    /// Schema reads and changes (`system_schema`, `CREATE TABLE`): at ONE, and
    /// the driver waits for schema agreement after a change.
    Schema,
}

/// Which of lockscope's tables a keyspace has (read from `system_schema` at
/// connect): its own superset, or only the published two tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Schema {
    /// `tokens` and `token_times` with lockscope's columns, and lockscope's own tables.
    Superset,
    /// Only `tokens(token, service_session_id, timestamp)` and
    /// `token_times(service_session_id, tokens, timestamp)`.
    Published,
}

/// Declares [`Stmt`] and [`Stmt::ALL`] from one list, so that a statement
/// cannot be left out of the list the tests and the driver go through.
macro_rules! statements {
    ($($(#[$doc:meta])* $name:ident,)*) => {
        /// Every statement lockscope sends. `?` markers bind [`Stmt::cql`]'s values in
        /// order; `KS` is the keyspace.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Stmt {
            $($(#[$doc])* $name,)*
        }

        impl Stmt {
            /// Every statement (the tests check each is documented and runs).
            pub const ALL: &'static [Stmt] = &[$(Stmt::$name,)*];
        }
    };
}

statements! {
    // Schema.
    /// Binds keyspace, table.
    Columns,
    CreateTokens,
    CreateTokenTimes,
    CreateFences,
    CreateBlacklist,
    CreateUnlocker,
    // The fencing counter of a lock (or of the unlocker's terms).
    /// Binds token.
    FenceGet,
    /// Binds token, fence.
    FenceInit,
    /// Binds new fence, token, expected fence.
    FenceBump,
    // Locks.
    /// Binds token, session, timestamp, fence, revision, record.
    Acquire,
    /// Binds token.
    LockGet,
    /// Binds record, new revision, token, fence, expected revision.
    Extend,
    /// Binds new fence, new revision, token, expected fence.
    Refence,
    /// Binds token, fence.
    Release,
    /// Binds token, fence, revision.
    ReleaseExact,
    /// Binds token, session, timestamp.
    ReleasePublished,
    /// Binds token.
    LockGetPublished,
    /// Paged.
    LocksPage,
    LocksPagePublished,
    // Sessions.
    /// Binds session, timestamp, record, ttl_ms, ttl (s).
    SessionOpen,
    /// Binds ttl (s), timestamp, record, ttl_ms, waiting_for, session, ttl_ms.
    SessionBeat,
    /// Binds ttl (s), waiting_for, session, ttl_ms.
    SessionWaiting,
    /// Binds session.
    SessionClose,
    /// Binds session.
    SessionGet,
    /// Binds blacklist record (or null), session.
    SessionMark,
    SessionsPage,
    SessionsPagePublished,
    // Blacklist.
    /// Binds session, record.
    BlacklistPut,
    /// Binds session.
    BlacklistGet,
    /// Binds session.
    BlacklistDelete,
    BlacklistPage,
    // The unlocker election.
    /// Binds candidate, term, ttl (s).
    UnlockerClaim,
    /// Binds ttl (s), candidate, term, term.
    UnlockerRenew,
    /// Binds term.
    UnlockerResign,
    UnlockerGet,
}

impl Stmt {
    /// How this statement is sent.
    pub fn mode(self) -> Mode {
        use Stmt::*;
        match self {
            Columns | CreateTokens | CreateTokenTimes | CreateFences | CreateBlacklist | CreateUnlocker => Mode::Schema,
            FenceGet | LockGet | LockGetPublished | SessionGet | UnlockerGet => Mode::SerialRead,
            FenceInit | FenceBump | Acquire | Extend | Refence | Release | ReleaseExact | ReleasePublished
            | SessionOpen | SessionBeat | SessionWaiting | SessionMark | SessionClose | BlacklistPut
            | BlacklistDelete | UnlockerClaim | UnlockerRenew | UnlockerResign => Mode::Lwt,
            LocksPage | LocksPagePublished | SessionsPage | SessionsPagePublished | BlacklistPage | BlacklistGet => {
                Mode::Read
            }
        }
    }

    /// Whether the statement is read in pages ([`Cql::page`]).
    pub fn paged(self) -> bool {
        use Stmt::*;
        matches!(
            self,
            LocksPage | LocksPagePublished | SessionsPage | SessionsPagePublished | BlacklistPage
        )
    }

    /// The statement's text, with `KS` for the keyspace.
    pub fn template(self) -> &'static str {
        use Stmt::*;
        match self {
            Columns => "SELECT column_name FROM system_schema.columns WHERE keyspace_name = ? AND table_name = ?",
            CreateTokens => {
                "CREATE TABLE IF NOT EXISTS KS.tokens (token text PRIMARY KEY, service_session_id text, \
                 timestamp timestamp, fence bigint, revision bigint, record text)"
            }
            CreateTokenTimes => {
                "CREATE TABLE IF NOT EXISTS KS.token_times (service_session_id text PRIMARY KEY, \
                 tokens list<text>, timestamp timestamp, record text, waiting_for text, ttl_ms bigint, \
                 blacklisted text)"
            }
            CreateFences => "CREATE TABLE IF NOT EXISTS KS.lockscope_fences (token text PRIMARY KEY, fence bigint)",
            CreateBlacklist => {
                "CREATE TABLE IF NOT EXISTS KS.lockscope_blacklist (service_session_id text PRIMARY KEY, record text)"
            }
            CreateUnlocker => {
                "CREATE TABLE IF NOT EXISTS KS.lockscope_unlocker (id int PRIMARY KEY, candidate text, term bigint)"
            }
            FenceGet => "SELECT fence FROM KS.lockscope_fences WHERE token = ?",
            FenceInit => "INSERT INTO KS.lockscope_fences (token, fence) VALUES (?, ?) IF NOT EXISTS",
            FenceBump => "UPDATE KS.lockscope_fences SET fence = ? WHERE token = ? IF fence = ?",
            Acquire => {
                "INSERT INTO KS.tokens (token, service_session_id, timestamp, fence, revision, record) \
                 VALUES (?, ?, ?, ?, ?, ?) IF NOT EXISTS"
            }
            LockGet => {
                "SELECT token, service_session_id, timestamp, fence, revision, record FROM KS.tokens WHERE token = ?"
            }
            Extend => "UPDATE KS.tokens SET record = ?, revision = ? WHERE token = ? IF fence = ? AND revision = ?",
            Refence => "UPDATE KS.tokens SET fence = ?, revision = ? WHERE token = ? IF fence = ?",
            Release => "DELETE FROM KS.tokens WHERE token = ? IF fence = ?",
            ReleaseExact => "DELETE FROM KS.tokens WHERE token = ? IF fence = ? AND revision = ?",
            ReleasePublished => "DELETE FROM KS.tokens WHERE token = ? IF service_session_id = ? AND timestamp = ?",
            LockGetPublished => "SELECT token, service_session_id, timestamp FROM KS.tokens WHERE token = ?",
            LocksPage => "SELECT token, service_session_id, timestamp, fence, revision, record FROM KS.tokens",
            LocksPagePublished => "SELECT token, service_session_id, timestamp FROM KS.tokens",
            SessionOpen => {
                "INSERT INTO KS.token_times (service_session_id, tokens, timestamp, record, ttl_ms) \
                 VALUES (?, [], ?, ?, ?) IF NOT EXISTS USING TTL ?"
            }
            SessionBeat => {
                "UPDATE KS.token_times USING TTL ? SET timestamp = ?, record = ?, ttl_ms = ?, waiting_for = ? \
                 WHERE service_session_id = ? IF ttl_ms = ? AND blacklisted = null"
            }
            SessionWaiting => {
                "UPDATE KS.token_times USING TTL ? SET waiting_for = ? WHERE service_session_id = ? IF ttl_ms = ?"
            }
            SessionClose => "DELETE FROM KS.token_times WHERE service_session_id = ? IF EXISTS",
            SessionGet => {
                "SELECT service_session_id, timestamp, record, ttl_ms, blacklisted FROM KS.token_times \
                 WHERE service_session_id = ?"
            }
            SessionMark => "UPDATE KS.token_times SET blacklisted = ? WHERE service_session_id = ? IF EXISTS",
            SessionsPage => {
                "SELECT service_session_id, tokens, timestamp, record, waiting_for, ttl_ms, blacklisted \
                 FROM KS.token_times"
            }
            SessionsPagePublished => "SELECT service_session_id, tokens, timestamp FROM KS.token_times",
            BlacklistPut => {
                "INSERT INTO KS.lockscope_blacklist (service_session_id, record) VALUES (?, ?) IF NOT EXISTS"
            }
            BlacklistGet => "SELECT record FROM KS.lockscope_blacklist WHERE service_session_id = ?",
            BlacklistDelete => "DELETE FROM KS.lockscope_blacklist WHERE service_session_id = ? IF EXISTS",
            BlacklistPage => "SELECT service_session_id, record FROM KS.lockscope_blacklist",
            UnlockerClaim => {
                "INSERT INTO KS.lockscope_unlocker (id, candidate, term) VALUES (1, ?, ?) IF NOT EXISTS USING TTL ?"
            }
            UnlockerRenew => {
                "UPDATE KS.lockscope_unlocker USING TTL ? SET candidate = ?, term = ? WHERE id = 1 IF term = ?"
            }
            UnlockerResign => "DELETE FROM KS.lockscope_unlocker WHERE id = 1 IF term = ?",
            UnlockerGet => "SELECT candidate, term FROM KS.lockscope_unlocker WHERE id = 1",
        }
    }

    /// The statement's text in keyspace `keyspace` (a validated identifier).
    pub fn cql(self, keyspace: &str) -> String {
        self.template().replace("KS.", &format!("{keyspace}."))
    }
}

/// One page of a paged read, and where the next begins (`None`: the last page).
pub struct Page {
    pub rows: Vec<Row>,
    /// The driver's paging state, opaque.
    pub next: Option<Vec<u8>>,
}

/// Runs lockscope's statements against a CQL server (or its emulation). The
/// one interface everything above the driver goes through.
pub trait Cql: Send + Sync + 'static {
    /// Runs `stmt` with `values` bound in order; the rows it returned (an LWT's
    /// one row with `[applied]`; none for a plain write).
    fn run<'a>(&'a self, stmt: Stmt, values: Vec<Value>) -> BoxFuture<'a, Result<Vec<Row>, StoreError>>;

    /// One page of at most `size` rows of a paged read, from `state` (`None`:
    /// the first page).
    fn page<'a>(&'a self, stmt: Stmt, size: i32, state: Option<Vec<u8>>) -> BoxFuture<'a, Result<Page, StoreError>>;

    /// Statements sent so far (tests and the waiting cost's check).
    fn sent(&self) -> u64;
}

/// Reads every row of a paged statement, page by page with the driver's paging
/// state: never one unbounded read.
pub async fn scan(cql: &dyn Cql, stmt: Stmt, size: i32) -> Result<Vec<Row>, StoreError> {
    let mut rows = Vec::new();
    let mut state = None;
    loop {
        let page = cql.page(stmt, size, state).await?;
        rows.extend(page.rows);
        match page.next {
            Some(next) => state = Some(next),
            None => return Ok(rows),
        }
    }
}

#[cfg(test)]
mod tests;
