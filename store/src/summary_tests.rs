//! The summary line of real errors, made by the real clients: connecting to a
//! closed port (etcd, PostgreSQL, ScyllaDB), opening a SQLite file that cannot
//! be opened.

use super::*;
use crate::etcd::{EtcdConfig, EtcdLocks};
use crate::protocol::LockStore;
use crate::sql::SqlLocks;

/// A loopback port nothing listens on.
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

#[tokio::test]
async fn etcd_refused_is_one_line_naming_the_endpoint() {
    let port = closed_port();
    let endpoints = vec![format!("http://127.0.0.1:{port}")];
    // etcd-client connects lazily: the first request meets the closed port.
    let err = match EtcdLocks::connect(EtcdConfig::new(endpoints.clone(), "/x")).await {
        Err(e) => e,
        Ok(locks) => locks.get("a").await.unwrap_err(),
    };
    let s = err.summary(&address_of_endpoints(&endpoints));
    // The words: "cannot connect to 127.0.0.1:24379: connection refused".
    assert_eq!(
        s.line,
        format!("cannot connect to 127.0.0.1:{port}: connection refused"),
        "{s:?}"
    );
    assert!(!s.line.contains("tonic"), "no driver internals in the line");
    // The detail keeps what etcd-client said, down to the OS's words.
    assert!(
        s.detail.contains("grpc request error") || s.detail.contains("transport error"),
        "{s:?}"
    );
    assert!(s.detail.lines().last().unwrap().contains("refused"), "{s:?}");
    // No level repeated: a cause its parent already prints in full is left out.
    let lines: Vec<&str> = s.detail.lines().collect();
    for pair in lines.windows(2) {
        assert!(!pair[0].contains(pair[1]), "{pair:?} in {s:?}");
    }
    assert_eq!(err.describe(), lines.join(": "), "the log says the same chain");
}

#[tokio::test]
async fn postgres_refused_names_host_and_database_never_the_password() {
    let port = closed_port();
    let url = format!("postgres://lockscope:s3cret@127.0.0.1:{port}/locks");
    let Err(err) = SqlLocks::connect(&url).await else {
        panic!("nothing listens on {port}")
    };
    let s = err.summary(&address_of_url(&url));
    assert_eq!(
        s.line,
        format!("cannot connect to 127.0.0.1:{port}/locks: connection refused")
    );
    assert!(!format!("{s:?}").contains("s3cret"), "never credentials: {s:?}");
    assert!(s.detail.contains("error communicating with database"), "{s:?}");
}

#[tokio::test]
async fn sqlite_in_a_missing_directory_cannot_be_opened() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("not-mounted").join("locks.db");
    let url = format!("sqlite://{}?mode=rwc", path.display());
    let Err(err) = SqlLocks::connect(&url).await else {
        panic!("{} has no directory", path.display())
    };
    let s = err.summary(&address_of_url(&url));
    assert_eq!(
        s.line,
        format!("cannot open {}: unable to open database file", path.display())
    );
}

#[tokio::test]
async fn sqlite_over_a_file_that_is_not_a_database() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locks.db");
    std::fs::write(
        &path,
        "this is not a database, it is a text file long enough to have a header\n".repeat(20),
    )
    .unwrap();
    let url = format!("sqlite://{}?mode=rwc", path.display());
    let Err(err) = SqlLocks::connect(&url).await else {
        panic!("a text file opened as a database")
    };
    let s = err.summary(&address_of_url(&url));
    assert_eq!(
        s.line,
        format!("cannot open {}: file is not a database", path.display())
    );
}

#[tokio::test]
async fn scylla_refused_names_the_contact_point() {
    let port = closed_port();
    let target = ScyllaTarget::Cluster(crate::scylla::ScyllaConfig::new(
        vec![format!("127.0.0.1:{port}")],
        "ks",
    ));
    let Err(err) = target.connect(false).await else {
        panic!("nothing listens on {port}")
    };
    let s = err.summary(&address_of_scylla(&target));
    assert_eq!(
        s.line,
        format!("cannot connect to 127.0.0.1:{port}: connection refused"),
        "{s:?}"
    );
}

#[test]
fn lockscopes_own_failures_read_as_they_are() {
    let s = StoreError::Timeout(Duration::from_secs(3)).summary("10.0.0.1:2379");
    assert_eq!(s.line, "no answer from 10.0.0.1:2379 within 3 s");
    let s = StoreError::unreachable_msg("etcd watch stream ended").summary("10.0.0.1:2379");
    assert_eq!(s.line, "10.0.0.1:2379: etcd watch stream ended");
    let s = StoreError::Config("store \"x\": nope".into()).summary("x");
    assert_eq!(s.line, "store \"x\": nope");
    // A long root message is cut, and a message of several lines is one line.
    let long = std::io::Error::other(format!("first\nsecond {}", "x".repeat(500)));
    let s = StoreError::backend("reading locks", long).summary("db");
    assert!(s.line.starts_with("cannot connect to db: first second xxx"), "{s:?}");
    assert_eq!(s.line.chars().count(), MAX_LINE + 1);
    assert!(s.line.ends_with('…') && !s.line.contains('\n'));
}

#[test]
fn addresses_never_carry_credentials() {
    assert_eq!(
        address_of_url("postgres://u:p%40ss@db.internal:5433/locks?sslmode=require"),
        "db.internal:5433/locks"
    );
    assert_eq!(address_of_url("postgresql://db/locks"), "db/locks");
    assert_eq!(
        address_of_url("sqlite:///var/lib/lockscope/l.db?mode=rwc"),
        "/var/lib/lockscope/l.db"
    );
    assert_eq!(address_of_url("sqlite://data/l.db"), "data/l.db");
    // A password with an unencoded ?, / or # (not valid URL syntax, but typed):
    // everything before the last @ is hidden.
    for url in [
        "postgres://u:p?x@h:5/db",
        "postgres://u:p/x@h:5/db",
        "postgres://u:p#x@h:5/db?sslmode=on",
    ] {
        assert_eq!(address_of_url(url), "h:5/db", "{url}");
        assert_eq!(crate::spec::redact(url), "postgres://u@h:5/db", "{url}");
    }
    assert_eq!(crate::spec::redact("postgres://h/db?password=s3cret@x"), "postgres://x");
    assert_eq!(
        address_of_endpoints(&["http://10.0.0.1:2379".into(), "https://10.0.0.2:2379".into()]),
        "10.0.0.1:2379, https://10.0.0.2:2379"
    );
}
