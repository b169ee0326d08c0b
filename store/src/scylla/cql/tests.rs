use super::*;
use crate::scylla::memory::{MemoryCql, Shape};

/// The statements whose text the protocol document quotes, exactly.
#[test]
fn the_protocols_statements_read_as_documented() {
    let cases = [
        (
            Stmt::Acquire,
            "INSERT INTO ks.tokens (token, service_session_id, timestamp, fence, revision, record) \
             VALUES (?, ?, ?, ?, ?, ?) IF NOT EXISTS",
        ),
        (Stmt::Release, "DELETE FROM ks.tokens WHERE token = ? IF fence = ?"),
        (
            Stmt::ReleasePublished,
            "DELETE FROM ks.tokens WHERE token = ? IF service_session_id = ? AND timestamp = ?",
        ),
        (
            Stmt::Extend,
            "UPDATE ks.tokens SET record = ?, revision = ? WHERE token = ? IF fence = ? AND revision = ?",
        ),
        (
            Stmt::FenceBump,
            "UPDATE ks.lockscope_fences SET fence = ? WHERE token = ? IF fence = ?",
        ),
        (
            Stmt::SessionBeat,
            "UPDATE ks.token_times USING TTL ? SET timestamp = ?, record = ?, ttl_ms = ?, waiting_for = ? \
             WHERE service_session_id = ? IF ttl_ms = ? AND blacklisted = null",
        ),
        (
            Stmt::UnlockerClaim,
            "INSERT INTO ks.lockscope_unlocker (id, candidate, term) VALUES (1, ?, ?) IF NOT EXISTS USING TTL ?",
        ),
    ];
    for (stmt, want) in cases {
        assert_eq!(stmt.cql("ks"), want, "{stmt:?}");
    }
    // The protocol document quotes every statement: none is sent undocumented.
    let doc = include_str!("../../../../docs/protocol.md");
    for &stmt in Stmt::ALL {
        let text = stmt.template().replace("KS.", "");
        let flat = doc.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(flat.contains(&text), "docs/protocol.md does not quote {stmt:?}: {text}");
    }
}

/// Every conditional write is a lightweight transaction and every LWT has an
/// IF; reads that must see the latest LWT are SERIAL; the scans are paged.
#[test]
fn each_statement_is_sent_as_its_text_says() {
    for &stmt in Stmt::ALL {
        let text = stmt.template();
        let conditional = text.contains(" IF ") && !text.starts_with("CREATE");
        assert_eq!(stmt.mode() == Mode::Lwt, conditional, "{stmt:?}: {text}");
        if stmt.paged() {
            assert!(text.starts_with("SELECT") && !text.contains("WHERE"), "{stmt:?}");
            assert_eq!(stmt.mode(), Mode::Read);
        }
        if stmt.mode() == Mode::SerialRead {
            assert!(text.starts_with("SELECT") && text.contains("WHERE"), "{stmt:?}");
        }
    }
}

/// Every statement runs on a keyspace with lockscope's tables: the columns it
/// names exist and its values bind with the types the tables declare.
#[tokio::test]
async fn every_statement_runs_on_lockscopes_tables() {
    let db = MemoryCql::superset("ks", Shape::Scylla);
    for &stmt in Stmt::ALL {
        let values = sample_values(stmt);
        let run = if stmt.paged() {
            db.page(stmt, 10, None).await.map(|p| p.rows)
        } else {
            db.run(stmt, values).await
        };
        run.unwrap_or_else(|e| panic!("{stmt:?}: {}", e.describe()));
    }
}

/// Values of the right types for each statement's markers.
fn sample_values(stmt: Stmt) -> Vec<Value> {
    use Stmt::*;
    let t = || Value::text("x");
    let b = || Value::BigInt(1);
    match stmt {
        Columns => vec![Value::text("ks"), Value::text("tokens")],
        FenceGet | LockGet | LockGetPublished | SessionClose | SessionGet | BlacklistGet | BlacklistDelete => {
            vec![t()]
        }
        FenceInit | Release => vec![t(), b()],
        FenceBump => vec![b(), t(), b()],
        Acquire => vec![t(), t(), Value::Timestamp(1), b(), b(), t()],
        Extend => vec![t(), b(), t(), b(), b()],
        Refence => vec![b(), b(), t(), b()],
        ReleaseExact => vec![t(), b(), b()],
        ReleasePublished => vec![t(), t(), Value::Timestamp(1)],
        SessionOpen => vec![t(), Value::Timestamp(1), t(), b(), Value::Int(5)],
        SessionBeat => vec![Value::Int(5), Value::Timestamp(1), t(), b(), Value::Null, t(), b()],
        SessionWaiting => vec![Value::Int(5), t(), t(), b()],
        SessionMark => vec![Value::Null, t()],
        BlacklistPut => vec![t(), t()],
        UnlockerClaim => vec![t(), b(), Value::Int(5)],
        UnlockerRenew => vec![Value::Int(5), t(), b(), b()],
        UnlockerResign => vec![b()],
        _ => Vec::new(),
    }
}

fn row(cols: &[(&str, Value)]) -> Row {
    cols.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
}

/// `[applied]` is read by name whatever else the server returns: ScyllaDB's
/// whole row before and after it, Cassandra's conditioned columns or nothing.
#[test]
fn applied_is_read_by_name_in_both_servers_shapes() {
    let scylla_failed = row(&[
        ("[applied]", Value::Boolean(false)),
        ("fence", Value::BigInt(7)),
        ("record", Value::text("{}")),
        ("token", Value::text("x")),
    ]);
    let scylla_applied_on_a_missing_row = row(&[
        ("[applied]", Value::Boolean(true)),
        ("fence", Value::Null),
        ("token", Value::Null),
    ]);
    let cassandra_applied = row(&[("[applied]", Value::Boolean(true))]);
    let cassandra_failed = row(&[("[applied]", Value::Boolean(false)), ("fence", Value::BigInt(7))]);
    for (rows, want) in [
        (vec![scylla_failed], false),
        (vec![scylla_applied_on_a_missing_row], true),
        (vec![cassandra_applied], true),
        (vec![cassandra_failed], false),
    ] {
        assert_eq!(applied(rows).unwrap().applied, want);
    }
    assert!(applied(Vec::new()).is_err(), "no row");
    assert!(
        applied(vec![row(&[("applied", Value::Boolean(true))])]).is_err(),
        "wrong name"
    );
    assert!(
        applied(vec![row(&[("[applied]", Value::text("true"))])]).is_err(),
        "not a boolean"
    );
}

/// The scan follows the paging state to the last page, and asks for no more.
#[tokio::test]
async fn a_scan_reads_every_page_and_stops() {
    let db = MemoryCql::superset("ks", Shape::Scylla);
    for i in 0..7 {
        db.execute(
            "INSERT INTO ks.lockscope_blacklist (service_session_id, record) VALUES (?, ?)",
            vec![Value::text(format!("s{i}")), Value::text("{}")],
        )
        .unwrap();
    }
    let before = db.sent();
    let rows = scan(&db, Stmt::BlacklistPage, 3).await.unwrap();
    let ids: Vec<&str> = rows
        .iter()
        .filter_map(|r| col(r, "service_session_id").as_text())
        .collect();
    assert_eq!(ids, ["s0", "s1", "s2", "s3", "s4", "s5", "s6"]);
    assert_eq!(db.sent() - before, 3, "pages of 3, 3 and 1");
    let exact = scan(&db, Stmt::BlacklistPage, 7).await.unwrap();
    assert_eq!(exact.len(), 7);
}
