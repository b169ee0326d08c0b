//! What a store failure says to people: one line an on-call engineer can act on
//! — what was tried (an endpoint, a host and database, a file; never
//! credentials) and what went wrong at the root ("connection refused", "timed
//! out", "database is locked", "role … does not exist", "unable to open
//! database file") — and the whole chain of errors behind it as the detail. The
//! page shows the line ([`lockscope_model::StoreStatus::Unreachable`]'s `error`)
//! and keeps the detail behind a disclosure; logs get the whole chain
//! ([`StoreError::describe`]).
//!
//! The root is found by walking `Error::source()` down the chain, looking
//! through the client errors that keep their cause without reporting it as
//! their source (etcd-client's, the ScyllaDB driver's pool and connection
//! errors), and reading the few values that say more than their text: an I/O
//! error's kind, a database's error code, a gRPC status's message.

use std::error::Error;
use std::io::ErrorKind;
use std::time::Duration;

use crate::scylla::ScyllaTarget;
use crate::StoreError;

/// A store failure, said for people.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    /// One line: "cannot connect to 127.0.0.1:2379: connection refused".
    pub line: String,
    /// The whole chain, outermost first, one error a line.
    pub detail: String,
}

/// The longest summary line, in characters (a longer root message is cut).
pub const MAX_LINE: usize = 200;

/// `what` of the errors the clients' `From` conversions build: they name the
/// store kind, which the address already says.
const GENERIC: [&str; 2] = ["etcd", "database"];

impl StoreError {
    /// This failure said in one line, `address` being what was tried (see
    /// [`address_of_url`], [`address_of_endpoints`], [`address_of_scylla`]),
    /// and the whole chain as the detail.
    pub fn summary(&self, address: &str) -> Summary {
        let chain = chain(self);
        let detail = texts(&chain).join("\n");
        let line = match self {
            StoreError::Timeout(limit) => format!("no answer from {address} within {}", seconds(*limit)),
            StoreError::Unreachable { what, .. } | StoreError::Backend { what, .. } => {
                let context = (!GENERIC.contains(&what.as_str())).then_some(what.as_str());
                match root_cause(&chain[1..]) {
                    Some((Verb::Open, why)) => format!("cannot open {address}: {why}"),
                    Some((Verb::Connect, why)) => format!("cannot connect to {address}: {why}"),
                    Some((Verb::Lost, why)) => format!("lost the connection to {address}: {why}"),
                    Some((Verb::Said, why)) => match context {
                        Some(c) => format!("{address}: {c}: {why}"),
                        None => format!("{address}: {why}"),
                    },
                    None => match (context, chain.last().filter(|_| chain.len() > 1)) {
                        (Some(c), Some(root)) => format!("{address}: {c}: {}", bare(&root.to_string())),
                        (None, Some(root)) => format!("{address}: {}", bare(&root.to_string())),
                        (Some(c), None) => format!("{address}: {c}"),
                        (None, None) => format!("{address}: {self}"),
                    },
                }
            }
            // A sentence of lockscope's own, with nothing below it.
            other => other.to_string(),
        };
        Summary {
            line: cut(&one_line(&line)),
            detail,
        }
    }
}

/// What a `sqlite:`/`postgres:` URL connects to, for people: a SQLite file's
/// path; PostgreSQL's `host:port/database` (no user, no password, no options).
pub fn address_of_url(url: &str) -> String {
    if let Some(path) = url.strip_prefix("sqlite:") {
        let path = path.split('?').next().unwrap_or(path);
        return path.trim_start_matches("//").to_string();
    }
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let (_, host) = crate::spec::credentials(rest);
    host.split('?').next().unwrap_or(host).to_string()
}

/// What an etcd client connects to: its endpoints, `http://` left out.
pub fn address_of_endpoints(endpoints: &[String]) -> String {
    endpoints
        .iter()
        .map(|e| e.strip_prefix("http://").unwrap_or(e))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What a ScyllaDB session connects to: its contact points.
pub fn address_of_scylla(target: &ScyllaTarget) -> String {
    match target {
        ScyllaTarget::Cluster(c) => c.nodes.join(", "),
        ScyllaTarget::Memory { name, .. } => format!("in-memory CQL keyspace {name}"),
    }
}

/// The errors from `err` down to its root, looking through the client errors
/// that keep their cause without reporting it as their source.
pub(crate) fn chain<'a>(err: &'a (dyn Error + 'static)) -> Vec<&'a (dyn Error + 'static)> {
    let mut out = vec![err];
    while let Some(next) = inner(out[out.len() - 1]) {
        // A cycle, or a chain no person reads to the end.
        if out.len() >= 32 {
            break;
        }
        out.push(next);
    }
    out
}

/// Each error's text, one line each, outermost first; a text the error above
/// already says in full (most clients print their cause in their own text) is
/// left out.
pub(crate) fn texts(chain: &[&(dyn Error + 'static)]) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(chain.len());
    for e in chain {
        let text = one_line(&e.to_string());
        if !text.is_empty() && !out.last().is_some_and(|above| above.contains(&text)) {
            out.push(text);
        }
    }
    out
}

fn inner<'a>(e: &'a (dyn Error + 'static)) -> Option<&'a (dyn Error + 'static)> {
    use scylla::errors::{ConnectionError, ConnectionPoolError};
    // etcd-client's errors implement `Error` without `source`.
    if let Some(e) = e.downcast_ref::<etcd_client::Error>() {
        return match e {
            etcd_client::Error::GRpcStatus(s) => Some(s),
            etcd_client::Error::TransportError(t) => Some(t),
            etcd_client::Error::IoError(io) => Some(io),
            _ => None,
        };
    }
    // The driver's pool names its last connection error in a field of its own,
    // and its I/O errors are transparent (their source is the I/O error's own).
    if let Some(ConnectionPoolError::Broken { last_connection_error }) = e.downcast_ref::<ConnectionPoolError>() {
        return Some(last_connection_error);
    }
    if let Some(ConnectionError::IoError(io)) = e.downcast_ref::<ConnectionError>() {
        return Some(&**io);
    }
    e.source()
}

/// How the line starts.
#[derive(Debug, PartialEq, Eq)]
enum Verb {
    /// A file could not be opened.
    Open,
    /// No connection could be made.
    Connect,
    /// A connection was made and then broken.
    Lost,
    /// The store answered, with an error.
    Said,
}

/// The most precise cause in `chain`, looked for from the root up.
fn root_cause(chain: &[&(dyn Error + 'static)]) -> Option<(Verb, String)> {
    chain.iter().rev().find_map(|e| cause(*e))
}

fn cause(e: &(dyn Error + 'static)) -> Option<(Verb, String)> {
    if let Some(io) = e.downcast_ref::<std::io::Error>() {
        return Some(io_cause(io));
    }
    if let Some(e) = e.downcast_ref::<sqlx::Error>() {
        return sql_cause(e);
    }
    if let Some(s) = e.downcast_ref::<tonic::Status>() {
        let why = match s.message() {
            "" => s.code().description().to_string(),
            m => m.to_string(),
        };
        return Some(match s.code() {
            tonic::Code::Unavailable => (Verb::Connect, why),
            tonic::Code::DeadlineExceeded => (Verb::Said, format!("timed out ({why})")),
            _ => (Verb::Said, why),
        });
    }
    if let Some(scylla::errors::ConnectionError::ConnectTimeout) = e.downcast_ref() {
        return Some((Verb::Connect, "timed out".into()));
    }
    None
}

fn io_cause(io: &std::io::Error) -> (Verb, String) {
    let said = |s: &str| s.to_string();
    match io.kind() {
        ErrorKind::ConnectionRefused => (Verb::Connect, said("connection refused")),
        ErrorKind::TimedOut => (Verb::Connect, said("timed out")),
        ErrorKind::HostUnreachable => (Verb::Connect, said("host unreachable")),
        ErrorKind::NetworkUnreachable => (Verb::Connect, said("network unreachable")),
        ErrorKind::AddrNotAvailable => (Verb::Connect, said("address not available")),
        ErrorKind::NotFound => (Verb::Open, said("no such file or directory")),
        ErrorKind::PermissionDenied => (Verb::Open, said("permission denied")),
        ErrorKind::ConnectionReset => (Verb::Lost, said("connection reset")),
        ErrorKind::ConnectionAborted | ErrorKind::BrokenPipe | ErrorKind::NotConnected => {
            (Verb::Lost, said("connection closed"))
        }
        ErrorKind::UnexpectedEof => (Verb::Lost, said("connection closed by the store")),
        // A failed name lookup, among others: its own words.
        _ => (Verb::Connect, bare(&io.to_string())),
    }
}

fn sql_cause(e: &sqlx::Error) -> Option<(Verb, String)> {
    match e {
        sqlx::Error::Database(db) => {
            let why = db.message().to_string();
            let code = db.code().unwrap_or_default();
            let sqlite = db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some();
            Some(if sqlite {
                // An extended result code; its low byte is the primary one.
                match code.parse::<i32>().unwrap_or_default() & 0xff {
                    // SQLITE_CANTOPEN, SQLITE_NOTADB
                    14 | 26 => (Verb::Open, why),
                    _ => (Verb::Said, why),
                }
            } else if code.starts_with("28") || code == "3D000" || code == "57P03" {
                // PostgreSQL: authentication, a missing database, a server
                // starting up or shutting down: no session was made.
                (Verb::Connect, why)
            } else if code.starts_with("57P") {
                // An administrator's or crash shutdown ended the session.
                (Verb::Lost, why)
            } else {
                (Verb::Said, why)
            })
        }
        sqlx::Error::PoolTimedOut => Some((Verb::Connect, "no connection could be made in time".into())),
        sqlx::Error::PoolClosed => Some((Verb::Lost, "the connection pool was closed".into())),
        _ => None,
    }
}

/// "3 s", "250 ms".
fn seconds(d: Duration) -> String {
    if d.as_millis() % 1000 == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{} ms", d.as_millis())
    }
}

/// An I/O error's text without the OS's error number.
fn bare(s: &str) -> String {
    match s.rfind(" (os error ") {
        Some(i) if s.ends_with(')') => s[..i].to_string(),
        _ => s.to_string(),
    }
}

/// Whitespace (newlines included) folded to single spaces.
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn cut(s: &str) -> String {
    match s.char_indices().nth(MAX_LINE) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

#[cfg(test)]
#[path = "summary_tests.rs"]
mod tests;
