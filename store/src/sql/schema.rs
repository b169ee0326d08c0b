//! The SQL schema, per dialect, as sqlx migrations embedded in the binary. They run
//! on start; a database that has migrations this build does not know (written by a
//! newer lockscope) is refused rather than used.

use std::borrow::Cow;

use sqlx::migrate::{Migration, MigrationType, Migrator};

use super::Dialect;

const SQLITE_V1: &str = r#"
CREATE TABLE lockscope_locks (
    name     TEXT PRIMARY KEY NOT NULL,
    fence    INTEGER NOT NULL,
    owner    TEXT,
    session  TEXT,
    record   TEXT,
    revision INTEGER NOT NULL
);
CREATE TABLE lockscope_sessions (
    session     TEXT PRIMARY KEY NOT NULL,
    record      TEXT NOT NULL,
    waiting_for TEXT,
    expires_at  INTEGER NOT NULL
);
CREATE TABLE lockscope_blacklist (
    session TEXT PRIMARY KEY NOT NULL,
    record  TEXT NOT NULL
);
CREATE TABLE lockscope_changes (
    id      INTEGER PRIMARY KEY CHECK (id = 1),
    counter INTEGER NOT NULL
);
INSERT INTO lockscope_changes (id, counter) VALUES (1, 0);
CREATE TRIGGER lockscope_locks_ins AFTER INSERT ON lockscope_locks
BEGIN UPDATE lockscope_changes SET counter = counter + 1 WHERE id = 1; END;
CREATE TRIGGER lockscope_locks_upd AFTER UPDATE ON lockscope_locks
BEGIN UPDATE lockscope_changes SET counter = counter + 1 WHERE id = 1; END;
CREATE TRIGGER lockscope_locks_del AFTER DELETE ON lockscope_locks
BEGIN UPDATE lockscope_changes SET counter = counter + 1 WHERE id = 1; END;
"#;

const POSTGRES_V1: &str = r#"
CREATE TABLE lockscope_locks (
    name     TEXT PRIMARY KEY,
    fence    BIGINT NOT NULL,
    owner    TEXT,
    session  TEXT,
    record   TEXT,
    revision BIGINT NOT NULL
);
CREATE TABLE lockscope_sessions (
    session     TEXT PRIMARY KEY,
    record      TEXT NOT NULL,
    waiting_for TEXT,
    expires_at  BIGINT NOT NULL
);
CREATE TABLE lockscope_blacklist (
    session TEXT PRIMARY KEY,
    record  TEXT NOT NULL
);
CREATE FUNCTION lockscope_notify() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('lockscope_locks', COALESCE(NEW.name, OLD.name));
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER lockscope_locks_notify AFTER INSERT OR UPDATE OR DELETE ON lockscope_locks
FOR EACH ROW EXECUTE FUNCTION lockscope_notify();
"#;

// Waiters: the observer learns when a session starts or stops waiting.
const SQLITE_V2: &str = r#"
CREATE TRIGGER lockscope_sessions_wait AFTER UPDATE OF waiting_for ON lockscope_sessions
BEGIN UPDATE lockscope_changes SET counter = counter + 1 WHERE id = 1; END;
CREATE TRIGGER lockscope_sessions_del AFTER DELETE ON lockscope_sessions
BEGIN UPDATE lockscope_changes SET counter = counter + 1 WHERE id = 1; END;
"#;

const POSTGRES_V2: &str = r#"
CREATE FUNCTION lockscope_notify_waiting() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('lockscope_waiters', COALESCE(NEW.waiting_for, OLD.waiting_for, ''));
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER lockscope_sessions_notify AFTER UPDATE OF waiting_for OR DELETE ON lockscope_sessions
FOR EACH ROW EXECUTE FUNCTION lockscope_notify_waiting();
"#;

// A change sequence, so the observer reads only what changed since its last read.
// SQLite: every write to a lock row stamps it with the next value of
// `lockscope_changes.counter`, inside the writing transaction. SQLite runs one
// writer at a time, so stamps follow commit order and a reader that has seen
// stamp S has seen every commit up to S. A deleted row leaves nothing to read,
// so deletions (never done by the protocol, only by hand) count `removals` and
// the observer re-reads the table; waiter changes count `waiters`.
// (`UPDATE OF` lists the protocol's columns, so stamping `seq` fires nothing.)
const SQLITE_V3: &str = r#"
ALTER TABLE lockscope_locks ADD COLUMN seq INTEGER NOT NULL DEFAULT 0;
CREATE INDEX lockscope_locks_seq ON lockscope_locks (seq);
ALTER TABLE lockscope_changes ADD COLUMN removals INTEGER NOT NULL DEFAULT 0;
ALTER TABLE lockscope_changes ADD COLUMN waiters INTEGER NOT NULL DEFAULT 0;
DROP TRIGGER lockscope_locks_ins;
DROP TRIGGER lockscope_locks_upd;
DROP TRIGGER lockscope_locks_del;
DROP TRIGGER lockscope_sessions_wait;
DROP TRIGGER lockscope_sessions_del;
CREATE TRIGGER lockscope_locks_ins AFTER INSERT ON lockscope_locks
BEGIN
    UPDATE lockscope_changes SET counter = counter + 1 WHERE id = 1;
    UPDATE lockscope_locks SET seq = (SELECT counter FROM lockscope_changes WHERE id = 1) WHERE name = NEW.name;
END;
CREATE TRIGGER lockscope_locks_upd AFTER UPDATE OF name, fence, owner, session, record, revision ON lockscope_locks
BEGIN
    UPDATE lockscope_changes SET counter = counter + 1 WHERE id = 1;
    UPDATE lockscope_locks SET seq = (SELECT counter FROM lockscope_changes WHERE id = 1) WHERE name = NEW.name;
END;
CREATE TRIGGER lockscope_locks_del AFTER DELETE ON lockscope_locks
BEGIN UPDATE lockscope_changes SET counter = counter + 1, removals = removals + 1 WHERE id = 1; END;
CREATE TRIGGER lockscope_sessions_wait AFTER UPDATE OF waiting_for ON lockscope_sessions
BEGIN UPDATE lockscope_changes SET counter = counter + 1, waiters = waiters + 1 WHERE id = 1; END;
CREATE TRIGGER lockscope_sessions_del AFTER DELETE ON lockscope_sessions
BEGIN UPDATE lockscope_changes SET counter = counter + 1, waiters = waiters + 1 WHERE id = 1; END;
"#;

// PostgreSQL needs no sequence: `NOTIFY lockscope_locks, '<name>'` (v1) is
// delivered at commit, in commit order, and names the row to re-read. Version 3
// is empty there so that both dialects count versions alike.
const POSTGRES_V3: &str = "SELECT 1;";

// Sessions and the blacklist for the observer: every session write (register,
// heartbeat, waiting, close) and every blacklist change is signalled, so the
// observer sees heartbeats (liveness, skew) and blacklisting as they happen.
// SQLite: one more counter, `sessions`; the observer re-reads the sessions and
// blacklist tables when it moved. PostgreSQL: `NOTIFY lockscope_sessions`.
const SQLITE_V4: &str = r#"
ALTER TABLE lockscope_changes ADD COLUMN sessions INTEGER NOT NULL DEFAULT 0;
DROP TRIGGER lockscope_sessions_wait;
DROP TRIGGER lockscope_sessions_del;
CREATE TRIGGER lockscope_sessions_ins AFTER INSERT ON lockscope_sessions
BEGIN UPDATE lockscope_changes SET counter = counter + 1, sessions = sessions + 1 WHERE id = 1; END;
CREATE TRIGGER lockscope_sessions_upd AFTER UPDATE ON lockscope_sessions
BEGIN UPDATE lockscope_changes SET counter = counter + 1, sessions = sessions + 1 WHERE id = 1; END;
CREATE TRIGGER lockscope_sessions_del AFTER DELETE ON lockscope_sessions
BEGIN UPDATE lockscope_changes SET counter = counter + 1, sessions = sessions + 1 WHERE id = 1; END;
CREATE TRIGGER lockscope_blacklist_ins AFTER INSERT ON lockscope_blacklist
BEGIN UPDATE lockscope_changes SET counter = counter + 1, sessions = sessions + 1 WHERE id = 1; END;
CREATE TRIGGER lockscope_blacklist_upd AFTER UPDATE ON lockscope_blacklist
BEGIN UPDATE lockscope_changes SET counter = counter + 1, sessions = sessions + 1 WHERE id = 1; END;
CREATE TRIGGER lockscope_blacklist_del AFTER DELETE ON lockscope_blacklist
BEGIN UPDATE lockscope_changes SET counter = counter + 1, sessions = sessions + 1 WHERE id = 1; END;
"#;

const POSTGRES_V4: &str = r#"
DROP TRIGGER lockscope_sessions_notify ON lockscope_sessions;
DROP FUNCTION lockscope_notify_waiting();
CREATE FUNCTION lockscope_notify_sessions() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('lockscope_sessions', '');
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER lockscope_sessions_notify AFTER INSERT OR UPDATE OR DELETE ON lockscope_sessions
FOR EACH STATEMENT EXECUTE FUNCTION lockscope_notify_sessions();
CREATE TRIGGER lockscope_blacklist_notify AFTER INSERT OR UPDATE OR DELETE ON lockscope_blacklist
FOR EACH STATEMENT EXECUTE FUNCTION lockscope_notify_sessions();
"#;

// The unlocker role (`super::unlocker`): one row, never deleted, naming the
// elected dashboard replica, its term (bumped by every election) and when its
// lease runs out, in unix ms on the database's own clock.
const SQLITE_V5: &str = r#"
CREATE TABLE lockscope_unlocker (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    candidate  TEXT,
    term       INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
);
"#;

const POSTGRES_V5: &str = r#"
CREATE TABLE lockscope_unlocker (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    candidate  TEXT,
    term       BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);
"#;

/// The newest schema version this build knows.
pub const SCHEMA_VERSION: i64 = 5;

/// Every migration this build knows, in order.
pub fn migrator(dialect: Dialect) -> Migrator {
    migrator_up_to(dialect, SCHEMA_VERSION)
}

/// The migrations up to `version` (tests of upgrading an older database).
pub fn migrator_up_to(dialect: Dialect, version: i64) -> Migrator {
    let (v1, v2, v3, v4, v5) = match dialect {
        Dialect::Sqlite => (SQLITE_V1, SQLITE_V2, SQLITE_V3, SQLITE_V4, SQLITE_V5),
        Dialect::Postgres => (POSTGRES_V1, POSTGRES_V2, POSTGRES_V3, POSTGRES_V4, POSTGRES_V5),
    };
    let migration = |version, description, sql| {
        Migration::new(
            version,
            Cow::Borrowed(description),
            MigrationType::Simple,
            Cow::Borrowed(sql),
            false,
        )
    };
    let migrations = vec![
        migration(1, "lockscope tables", v1),
        migration(2, "waiter notifications", v2),
        migration(3, "change sequence", v3),
        migration(4, "session and blacklist signals", v4),
        migration(5, "unlocker role", v5),
    ];
    let migrations = migrations.into_iter().filter(|m| m.version <= version).collect();
    Migrator {
        migrations: Cow::Owned(migrations),
        ..Migrator::DEFAULT
    }
}
