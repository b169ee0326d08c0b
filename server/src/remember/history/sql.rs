//! The history's tables, as sqlx migrations, and rows back to [`HistoryEvent`]s.
//!
//! SQLite: a file of its own (beside the embedded store's), so its migrations
//! table is its own. PostgreSQL: the schema `lockscope_history` (every
//! connection's `search_path`), so the history can share a database with the
//! lock store and the audit log without the two sets of migrations meeting.

use std::borrow::Cow;

use lockscope_model::history::{HistoryEvent, HistoryQuery, Kind};
use lockscope_store::sql::Dialect;
use sqlx::any::AnyRow;
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::Row;

/// PostgreSQL's schema for the history's tables.
pub const PG_SCHEMA: &str = "lockscope_history";

/// Version 1, both dialects but for `{seq}`, the insertion order.
const V1: &str = r#"
CREATE TABLE history_events (
    {seq},
    id       TEXT NOT NULL UNIQUE,
    fleet    TEXT NOT NULL,
    at       BIGINT NOT NULL,
    kind     TEXT NOT NULL,
    lock     TEXT,
    session  TEXT,
    owner    TEXT,
    fence    BIGINT,
    revision BIGINT,
    service  TEXT,
    host     TEXT,
    actor    TEXT,
    detail   TEXT NOT NULL,
    record   TEXT
);
CREATE INDEX history_events_at ON history_events (fleet, at);
CREATE INDEX history_events_lock ON history_events (fleet, lock, at);
CREATE TABLE history_checkpoints (
    fleet TEXT NOT NULL,
    at    BIGINT NOT NULL,
    body  TEXT NOT NULL,
    PRIMARY KEY (fleet, at)
);
CREATE TABLE history_floor (
    fleet TEXT PRIMARY KEY NOT NULL,
    at    BIGINT NOT NULL
);
"#;

/// Version 2: the charts' hold times find an end's acquisition by (lock, fence).
const V2: &str = "CREATE INDEX history_events_hold ON history_events (fleet, lock, fence);";

/// Version 3: how far each fleet's history goes ([`super::Cursor`]), written
/// in the transaction of the events it counts.
const V3: &str = "CREATE TABLE history_cursor (
    fleet    TEXT PRIMARY KEY NOT NULL,
    revision BIGINT,
    at       BIGINT NOT NULL
);";

/// Version 4: a checkpoint in parts (`super::checkpoint`): its row in
/// `history_checkpoints` says which run wrote it and how many parts it has
/// (`run` NULL: a checkpoint written before, its table whole in `body`).
const V4: &str = "ALTER TABLE history_checkpoints ADD COLUMN run TEXT;
ALTER TABLE history_checkpoints ADD COLUMN parts BIGINT;
CREATE TABLE history_checkpoint_parts (
    fleet TEXT NOT NULL,
    at    BIGINT NOT NULL,
    run   TEXT NOT NULL,
    part  BIGINT NOT NULL,
    body  TEXT NOT NULL,
    PRIMARY KEY (fleet, at, run, part)
);";

/// Moves a fleet's cursor forward to `$2` (revision) and `$3` (time), never back.
pub const ADVANCE_CURSOR: &str = "INSERT INTO history_cursor (fleet, revision, at) VALUES ($1, $2, $3) \
    ON CONFLICT (fleet) DO UPDATE SET \
    revision = CASE WHEN COALESCE(excluded.revision, -1) > COALESCE(history_cursor.revision, -1) \
        THEN excluded.revision ELSE history_cursor.revision END, \
    at = CASE WHEN excluded.at > history_cursor.at THEN excluded.at ELSE history_cursor.at END";

pub fn migrator(dialect: Dialect) -> Migrator {
    let seq = match dialect {
        Dialect::Sqlite => "seq      INTEGER PRIMARY KEY AUTOINCREMENT",
        Dialect::Postgres => "seq      BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
    };
    Migrator {
        migrations: Cow::Owned(vec![
            Migration::new(
                1,
                Cow::Borrowed("lock history"),
                MigrationType::Simple,
                Cow::Owned(V1.replace("{seq}", seq)),
                false,
            ),
            Migration::new(
                2,
                Cow::Borrowed("holds by lock and fence"),
                MigrationType::Simple,
                Cow::Borrowed(V2),
                false,
            ),
            Migration::new(
                3,
                Cow::Borrowed("how far each fleet's history goes"),
                MigrationType::Simple,
                Cow::Borrowed(V3),
                false,
            ),
            Migration::new(
                4,
                Cow::Borrowed("checkpoints in parts"),
                MigrationType::Simple,
                Cow::Borrowed(V4),
                false,
            ),
        ]),
        ..Migrator::DEFAULT
    }
}

pub const COLUMNS: &str =
    "id, fleet, at, kind, lock, session, owner, fence, revision, service, host, actor, detail, record";

/// Rows per multi-row INSERT (14 parameters each, far below both databases' limits).
pub const INSERT_ROWS: usize = 200;

/// `INSERT … VALUES (…), (…) … ON CONFLICT (id) …` for `rows` rows, its
/// parameters bound in order. SQLite's are anonymous (`?`): sqlx asks the
/// name of each numbered one (`?14`), which SQLite finds by a walk through
/// all of them, so a statement of n numbered parameters cost n² (2,800 of
/// them: more than half of the writer's time, issue 26).
pub fn insert(dialect: Dialect, rows: usize) -> String {
    let mut q = format!("INSERT INTO history_events ({COLUMNS}) VALUES ");
    for r in 0..rows {
        if r > 0 {
            q.push(',');
        }
        q.push('(');
        for c in 0..14 {
            if c > 0 {
                q.push(',');
            }
            match dialect {
                Dialect::Sqlite => q.push('?'),
                Dialect::Postgres => q.push_str(&format!("${}", r * 14 + c + 1)),
            }
        }
        q.push(')');
    }
    // An event already there stays as it is, except that an end recorded
    // without its actor (a replica that was not told of the force-release)
    // takes the actor, kind and reason of one that has them.
    q.push_str(
        " ON CONFLICT (id) DO UPDATE SET kind = excluded.kind, actor = excluded.actor, detail = excluded.detail \
         WHERE history_events.actor IS NULL AND excluded.actor IS NOT NULL",
    );
    q
}

/// One value to bind.
pub enum Bind {
    Text(String),
    Int(i64),
    NullText,
    NullInt,
}

/// The WHERE clause and its values for `q` (events of `q.fleet` in its range
/// and filters), with `$n` parameters starting at 1.
pub fn filter(q: &HistoryQuery) -> (String, Vec<Bind>) {
    let mut clauses = vec!["fleet = $1".to_string()];
    let mut binds = vec![Bind::Text(q.fleet.clone())];
    // Each `?` in `clause` becomes the next `$n`, bound to the next of `values`.
    let mut push_all = |clause: &str, values: Vec<Bind>| {
        let mut out = String::new();
        let mut values = values.into_iter();
        for (i, part) in clause.split('?').enumerate() {
            if i > 0 {
                binds.push(values.next().expect("a value per placeholder"));
                out.push_str(&format!("${}", binds.len()));
            }
            out.push_str(part);
        }
        clauses.push(out);
    };
    if let Some(from) = q.from {
        push_all("at >= ?", vec![Bind::Int(from)]);
    }
    if let Some(to) = q.to {
        push_all("at <= ?", vec![Bind::Int(to)]);
    }
    match q.lock_filter() {
        // Not LIKE (names may hold `%` and `_`) and not a range (PostgreSQL
        // orders text by its collation, not by code point).
        Some((prefix, true)) => push_all(
            "substr(lock, 1, length(?)) = ?",
            vec![Bind::Text(prefix.to_string()), Bind::Text(prefix.to_string())],
        ),
        Some((name, false)) => push_all("lock = ?", vec![Bind::Text(name.to_string())]),
        None => {}
    }
    if let Some(s) = &q.session {
        push_all("session = ?", vec![Bind::Text(s.clone())]);
    }
    if let Some(s) = &q.service {
        push_all("service = ?", vec![Bind::Text(s.clone())]);
    }
    if let Some(a) = &q.actor {
        push_all("actor = ?", vec![Bind::Text(a.clone())]);
    }
    if !q.kinds.is_empty() {
        let mut ors = Vec::new();
        for k in &q.kinds {
            binds.push(Bind::Text(k.as_str().to_string()));
            ors.push(format!("kind = ${}", binds.len()));
        }
        clauses.push(format!("({})", ors.join(" OR ")));
    }
    (clauses.join(" AND "), binds)
}

pub fn bind<'q>(
    mut query: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
    binds: Vec<Bind>,
) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>> {
    for b in binds {
        query = match b {
            Bind::Text(t) => query.bind(t),
            Bind::Int(i) => query.bind(i),
            Bind::NullText => query.bind(None::<String>),
            Bind::NullInt => query.bind(None::<i64>),
        };
    }
    query
}

/// An event's values in [`COLUMNS`] order.
pub fn values(e: HistoryEvent) -> [Bind; 14] {
    let text = |v: Option<String>| v.map_or(Bind::NullText, Bind::Text);
    let int = |v: Option<i64>| v.map_or(Bind::NullInt, Bind::Int);
    [
        Bind::Text(e.id),
        Bind::Text(e.fleet),
        Bind::Int(e.at),
        Bind::Text(e.kind.as_str().to_string()),
        text(e.lock),
        text(e.session),
        text(e.owner),
        int(e.fence),
        int(e.revision),
        text(e.service),
        text(e.host),
        text(e.actor),
        Bind::Text(e.detail),
        text(e.record),
    ]
}

/// A row of [`COLUMNS`] as an event; a kind this build does not know (written
/// by a newer lockscope) is an error naming it.
pub fn event(row: &AnyRow) -> Result<HistoryEvent, sqlx::Error> {
    let kind: String = row.try_get("kind")?;
    Ok(HistoryEvent {
        id: row.try_get("id")?,
        fleet: row.try_get("fleet")?,
        at: row.try_get("at")?,
        kind: Kind::parse(&kind).ok_or_else(|| sqlx::Error::Decode(format!("unknown event kind {kind:?}").into()))?,
        lock: row.try_get("lock")?,
        session: row.try_get("session")?,
        owner: row.try_get("owner")?,
        fence: row.try_get("fence")?,
        revision: row.try_get("revision")?,
        service: row.try_get("service")?,
        host: row.try_get("host")?,
        actor: row.try_get("actor")?,
        detail: row.try_get("detail")?,
        record: row.try_get("record")?,
    })
}
