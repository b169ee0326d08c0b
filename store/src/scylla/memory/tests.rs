use super::*;

fn ks(shape: Shape) -> MemoryCql {
    let db = MemoryCql::new("ks", shape);
    db.execute(
        "CREATE TABLE IF NOT EXISTS ks.t (k text PRIMARY KEY, v bigint, s text, at timestamp)",
        Vec::new(),
    )
    .unwrap();
    db
}

fn t(s: &str) -> Value {
    Value::text(s)
}

fn applied_of(rows: &[Row]) -> bool {
    rows[0]["[applied]"] == Value::Boolean(true)
}

const INSERT: &str = "INSERT INTO ks.t (k, v, s) VALUES (?, ?, ?) IF NOT EXISTS";

#[test]
fn insert_if_not_exists_answers_with_the_row_as_each_server_does() {
    let scylla = ks(Shape::Scylla);
    let first = scylla.execute(INSERT, vec![t("a"), Value::BigInt(1), t("x")]).unwrap();
    assert!(applied_of(&first));
    assert_eq!(first[0]["v"], Value::Null, "ScyllaDB: the row before (none)");
    let second = scylla.execute(INSERT, vec![t("a"), Value::BigInt(2), t("y")]).unwrap();
    assert!(!applied_of(&second));
    assert_eq!(second[0]["v"], Value::BigInt(1), "the existing row");

    let cassandra = ks(Shape::Cassandra);
    let first = cassandra
        .execute(INSERT, vec![t("a"), Value::BigInt(1), t("x")])
        .unwrap();
    assert_eq!(first[0].len(), 1, "Cassandra: [applied] alone on success");
    let second = cassandra
        .execute(INSERT, vec![t("a"), Value::BigInt(2), t("y")])
        .unwrap();
    assert_eq!(second[0]["v"], Value::BigInt(1), "the existing row on failure");
    let cond = cassandra
        .execute(
            "UPDATE ks.t SET s = ? WHERE k = ? IF v = ?",
            vec![t("z"), t("a"), Value::BigInt(9)],
        )
        .unwrap();
    assert!(!applied_of(&cond));
    assert_eq!(
        cond[0].keys().collect::<Vec<_>>(),
        ["[applied]", "v"],
        "the conditioned column"
    );
}

#[test]
fn conditions_compare_and_write_in_one_step() {
    let db = ks(Shape::Scylla);
    db.execute(INSERT, vec![t("a"), Value::BigInt(1), t("x")]).unwrap();
    let cas = |expect: i64, new: i64| {
        applied_of(
            &db.execute(
                "UPDATE ks.t SET v = ? WHERE k = ? IF v = ?",
                vec![Value::BigInt(new), t("a"), Value::BigInt(expect)],
            )
            .unwrap(),
        )
    };
    assert!(cas(1, 2));
    assert!(!cas(1, 3), "the compared value moved on");
    assert!(cas(2, 3));
    let del = |s: &str| {
        applied_of(
            &db.execute(
                "DELETE FROM ks.t WHERE k = ? IF s = ? AND v = ?",
                vec![t("a"), t(s), Value::BigInt(3)],
            )
            .unwrap(),
        )
    };
    assert!(!del("other"));
    assert!(del("x"));
    assert!(db
        .execute("SELECT k FROM ks.t WHERE k = ?", vec![t("a")])
        .unwrap()
        .is_empty());
    // A condition on a missing row sees nulls: `IF v = ?` fails, `IF EXISTS` fails.
    assert!(!cas(3, 4));
    let exists = db
        .execute(
            "UPDATE ks.t SET v = ? WHERE k = ? IF EXISTS",
            vec![Value::BigInt(1), t("a")],
        )
        .unwrap();
    assert!(!applied_of(&exists));
    let null = db
        .execute(
            "UPDATE ks.t SET v = ? WHERE k = ? IF s = null",
            vec![Value::BigInt(1), t("a")],
        )
        .unwrap();
    assert!(applied_of(&null), "IF s = null holds on a missing row, and creates it");
}

#[test]
fn wrong_types_unknown_columns_and_tables_are_errors() {
    let db = ks(Shape::Scylla);
    let wrong_type = db.execute(INSERT, vec![t("a"), t("not a number"), t("x")]);
    assert!(wrong_type
        .unwrap_err()
        .to_string()
        .contains("cannot be written to column v"));
    let ts_as_bigint = db.execute("INSERT INTO ks.t (k, at) VALUES (?, ?)", vec![t("a"), Value::BigInt(5)]);
    assert!(ts_as_bigint.is_err(), "a timestamp is bound as a timestamp");
    let unknown = db.execute("SELECT nope FROM ks.t", Vec::new());
    assert!(unknown.unwrap_err().to_string().contains("Undefined column name nope"));
    assert!(db.execute("SELECT k FROM ks.missing", Vec::new()).is_err());
    assert!(db.execute("SELECT k FROM other.t", Vec::new()).is_err());
    assert!(db.execute("DROP TABLE ks.t", Vec::new()).is_err(), "outside the subset");
    assert!(db.execute(INSERT, vec![t("a")]).is_err(), "too few values");
}

#[tokio::test(start_paused = true)]
async fn ttls_expire_on_tokios_clock_cell_by_cell() {
    let db = ks(Shape::Scylla);
    db.execute(
        "INSERT INTO ks.t (k, v) VALUES (?, ?) IF NOT EXISTS USING TTL ?",
        vec![t("a"), Value::BigInt(1), Value::Int(10)],
    )
    .unwrap();
    tokio::time::advance(Duration::from_secs(6)).await;
    // Rewriting v with a new TTL keeps the row alive past the insert's TTL.
    db.execute(
        "UPDATE ks.t USING TTL ? SET v = ? WHERE k = ? IF EXISTS",
        vec![Value::Int(10), Value::BigInt(2), t("a")],
    )
    .unwrap();
    tokio::time::advance(Duration::from_secs(6)).await;
    let rows = db.execute("SELECT k, v FROM ks.t WHERE k = ?", vec![t("a")]).unwrap();
    assert_eq!(rows[0]["v"], Value::BigInt(2), "alive on the rewritten cell");
    tokio::time::advance(Duration::from_secs(5)).await;
    assert!(db
        .execute("SELECT k FROM ks.t WHERE k = ?", vec![t("a")])
        .unwrap()
        .is_empty());
    // An expired row is absent for IF NOT EXISTS.
    let again = db.execute(INSERT, vec![t("a"), Value::BigInt(3), t("x")]).unwrap();
    assert!(applied_of(&again));
}

#[test]
fn the_published_schema_has_only_its_columns() {
    let db = MemoryCql::published("ks", Shape::Scylla);
    let cols = db
        .execute(
            "SELECT column_name FROM system_schema.columns WHERE keyspace_name = ? AND table_name = ?",
            vec![t("ks"), t("tokens")],
        )
        .unwrap();
    let names: Vec<&str> = cols.iter().filter_map(|r| r["column_name"].as_text()).collect();
    assert_eq!(names, ["token", "service_session_id", "timestamp"]);
    let six = vec![
        t("x"),
        t("s"),
        Value::Timestamp(1),
        Value::BigInt(1),
        Value::BigInt(1),
        t("{}"),
    ];
    let superset_insert = db.execute(&Stmt::Acquire.cql("ks"), six);
    assert!(superset_insert
        .unwrap_err()
        .to_string()
        .contains("Undefined column name"));
}

#[test]
fn a_statement_takes_exactly_as_many_values_as_markers() {
    let db = ks(Shape::Scylla);
    let extra = db.execute("SELECT k FROM ks.t WHERE k = ?", vec![t("a"), t("unused")]);
    assert!(extra
        .unwrap_err()
        .to_string()
        .contains("2 values bound to a statement with 1 markers"));
    let wrong_key = db.execute("SELECT k FROM ks.t WHERE k = ?", vec![Value::BigInt(1)]);
    assert!(wrong_key.is_err(), "the key is typed too");
}

#[tokio::test(start_paused = true)]
async fn nulls_and_empty_lists_are_no_cells() {
    let db = MemoryCql::published("ks", Shape::Scylla);
    db.execute(
        "INSERT INTO ks.token_times (service_session_id, tokens, timestamp) VALUES (?, [], ?) USING TTL ?",
        vec![t("s"), Value::Null, Value::Int(5)],
    )
    .unwrap();
    let rows = db
        .execute(
            "SELECT service_session_id, tokens FROM ks.token_times WHERE service_session_id = ?",
            vec![t("s")],
        )
        .unwrap();
    assert_eq!(rows[0]["tokens"], Value::Null, "an empty list reads as null");
    // Only the row marker keeps the row: it goes with the marker's TTL.
    tokio::time::advance(Duration::from_secs(6)).await;
    assert!(db
        .execute(
            "SELECT service_session_id FROM ks.token_times WHERE service_session_id = ?",
            vec![t("s")]
        )
        .unwrap()
        .is_empty());
}
