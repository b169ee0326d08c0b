use lockscope_model::admin::{Action, Outcome, Role};
use lockscope_model::time::Millis;
use lockscope_store::testing::PgServer;
use sha2::{Digest, Sha256};

use super::*;

fn entry(at: Millis, actor: &str, action: Action, fleet: &str, outcome: Outcome) -> AuditEntry {
    AuditEntry {
        id: 0,
        at,
        actor: actor.into(),
        role: Some(Role::Operator),
        via: "api".into(),
        action: Some(action),
        fleet: fleet.into(),
        target: format!("{fleet}/lock-{at}"),
        fence: Some(at / 10),
        reason: format!("reason {at}"),
        outcome: Some(outcome),
        detail: String::new(),
    }
}

/// A log in a fresh SQLite file, in a directory that does not exist yet.
async fn sqlite() -> (tempfile::TempDir, String, AuditLog) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(".lockscope").join("lockscope.db");
    let url = format!("sqlite:{}", path.display());
    let log = AuditLog::open(&url).await.unwrap();
    (dir, url, log)
}

fn ids(entries: &[AuditEntry]) -> Vec<i64> {
    entries.iter().map(|e| e.id).collect()
}

async fn count(log: &AuditLog, table: &str) -> i64 {
    let q = format!("SELECT COUNT(*) FROM {table}");
    sqlx::query(&q)
        .fetch_one(&log.inner.pool)
        .await
        .unwrap()
        .try_get(0)
        .unwrap()
}

/// Appends, gets back every field, filters, orders and limits.
async fn append_query_get(log: &AuditLog) {
    let mut first = entry(1000, "alice", Action::Release, "prod", Outcome::Done);
    first.id = 999; // ignored
    first.via = "browser".into();
    first.reason = "stuck since 02:10, \"worker\" gone; ünïcödé, 'quotes', $1 ?1".into();
    first.detail = "released fence 100".into();
    let unauthenticated = AuditEntry {
        id: 0,
        at: 4000,
        actor: "(unauthenticated)".into(),
        role: None,
        via: "api".into(),
        action: None,
        fleet: "prod".into(),
        target: String::new(),
        fence: None,
        reason: String::new(),
        outcome: None,
        detail: "no credentials".into(),
    };
    let wanted = [
        first,
        entry(2000, "bob", Action::Blacklist, "prod", Outcome::Refused),
        entry(3000, "alice", Action::Unblacklist, "dev", Outcome::Changed),
        entry(3000, "Alice", Action::Release, "dev", Outcome::Done),
        unauthenticated,
        entry(5000, "carol", Action::Release, "prod", Outcome::Done),
    ];
    let mut stored = Vec::new();
    for w in &wanted {
        let s = log.append(w).await.unwrap();
        assert_eq!(AuditEntry { id: s.id, ..w.clone() }, s);
        assert!(stored.last().is_none_or(|p: &AuditEntry| p.id < s.id), "ids increase");
        stored.push(s);
    }
    for s in &stored {
        assert_eq!(
            log.get(s.id).await.unwrap().as_ref(),
            Some(s),
            "every field round-trips"
        );
    }
    assert_eq!(log.get(stored[5].id + 1).await.unwrap(), None);

    let [e1, e2, e3, e4, e5, e6] = [0, 1, 2, 3, 4, 5].map(|i| stored[i].id);
    let q = |f: fn(&mut AuditQuery)| {
        let mut q = AuditQuery::default();
        f(&mut q);
        q
    };
    let cases: Vec<(AuditQuery, Vec<i64>)> = vec![
        (AuditQuery::default(), vec![e6, e5, e4, e3, e2, e1]),
        (q(|q| q.fleet = Some("prod".into())), vec![e6, e5, e2, e1]),
        (q(|q| q.fleet = Some("staging".into())), vec![]),
        (q(|q| q.actor = Some("alice".into())), vec![e3, e1]),
        (q(|q| q.actor = Some("ali".into())), vec![]),
        (q(|q| q.action = Some(Action::Release)), vec![e6, e4, e1]),
        (q(|q| q.action = Some(Action::Unblacklist)), vec![e3]),
        (q(|q| q.outcome = Some(Outcome::Done)), vec![e6, e4, e1]),
        (q(|q| q.outcome = Some(Outcome::Refused)), vec![e2]),
        (q(|q| q.from = Some(3000)), vec![e6, e5, e4, e3]),
        (q(|q| q.to = Some(3000)), vec![e2, e1]),
        (
            q(|q| {
                q.from = Some(2000);
                q.to = Some(4000)
            }),
            vec![e4, e3, e2],
        ),
        (
            q(|q| {
                q.fleet = Some("prod".into());
                q.action = Some(Action::Release);
                q.outcome = Some(Outcome::Done)
            }),
            vec![e6, e1],
        ),
        (q(|q| q.limit = Some(2)), vec![e6, e5]),
        (
            q(|q| {
                q.actor = Some("alice".into());
                q.limit = Some(1)
            }),
            vec![e3],
        ),
        (q(|q| q.limit = Some(0)), vec![]),
        (q(|q| q.limit = Some(u32::MAX)), vec![e6, e5, e4, e3, e2, e1]),
    ];
    for (query, want) in cases {
        let got = log.query(&query).await.unwrap();
        assert_eq!(ids(&got), want, "{query:?}");
        for g in &got {
            assert_eq!(Some(g), stored.iter().find(|s| s.id == g.id));
        }
    }

    // Written by a newer lockscope (or by hand): unknown words read as None.
    let raw = log.sql(
        "INSERT INTO lockscope_audit (at, actor, role, via, action, fleet, target, fence, reason, outcome, detail) \
         VALUES (9000, 'future', 'root', 'cli', 'evict', 'prod', 'x', NULL, '', 'maybe', '')",
    );
    sqlx::query(&raw).execute(&log.inner.pool).await.unwrap();
    let newest = log.query(&AuditQuery::default()).await.unwrap().remove(0);
    assert!(newest.id > e6);
    assert_eq!((newest.role, newest.action, newest.outcome), (None, None, None));
    assert_eq!(newest.via, "cli");
    assert_eq!(log.get(newest.id).await.unwrap(), Some(newest));
    let released = log.query(&q(|q| q.action = Some(Action::Release))).await.unwrap();
    assert_eq!(ids(&released), vec![e6, e4, e1]);
}

/// Creates, finds, expires, deletes; stores the hash, not the secret.
async fn sessions(log: &AuditLog) {
    let now = 1_000_000;
    let a = log.create_session("alice", Duration::from_secs(60), now).await.unwrap();
    let b = log.create_session("bob", Duration::from_secs(600), now).await.unwrap();
    for secret in [&a.cookie, &a.csrf, &b.cookie, &b.csrf] {
        assert_eq!(secret.len(), 64);
        assert!(secret.bytes().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
    }
    assert!(a.cookie != a.csrf && a.cookie != b.cookie && a.csrf != b.csrf);
    assert_eq!(a.expires_at, now + 60_000);
    assert!(!format!("{a:?}").contains(&a.cookie) && !format!("{a:?}").contains(&a.csrf));

    let found = log.session(&a.cookie, now + 1).await.unwrap();
    assert_eq!(
        found,
        Some(WebSession {
            actor: "alice".into(),
            csrf: a.csrf.clone(),
            expires_at: a.expires_at,
        })
    );
    assert_eq!(log.session(&b.cookie, now).await.unwrap().unwrap().actor, "bob");
    for wrong in [a.csrf.as_str(), "", &a.cookie.to_uppercase(), &a.cookie[1..]] {
        assert_eq!(log.session(wrong, now).await.unwrap(), None, "{wrong:?}");
    }
    // Live until (not at) its expiry.
    assert!(log.session(&a.cookie, a.expires_at - 1).await.unwrap().is_some());
    assert_eq!(log.session(&a.cookie, a.expires_at).await.unwrap(), None);

    // The table holds the secret's SHA-256, never the secret itself.
    let rows = sqlx::query(
        "SELECT secret_sha256, actor, csrf, created_at, expires_at FROM lockscope_web_sessions ORDER BY actor",
    )
    .fetch_all(&log.inner.pool)
    .await
    .unwrap();
    assert_eq!(rows.len(), 2);
    let hash: String = rows[0].try_get(0).unwrap();
    assert_eq!(hash, hex::encode(Sha256::digest(a.cookie.as_bytes())));
    assert_ne!(hash, a.cookie);
    for r in &rows {
        for i in 0..3 {
            let v: String = r.try_get(i).unwrap();
            assert!(v != a.cookie && v != b.cookie);
        }
        assert_eq!(r.try_get::<i64, _>(3).unwrap(), now);
    }

    // Creating a session removes the expired ones (a's).
    let c = log
        .create_session("carol", Duration::from_secs(60), a.expires_at)
        .await
        .unwrap();
    assert_eq!(count(log, "lockscope_web_sessions").await, 2);
    assert!(log.session(&c.cookie, a.expires_at).await.unwrap().is_some());

    // Signing out.
    assert!(log.delete_session(&b.cookie).await.unwrap());
    assert_eq!(log.session(&b.cookie, now).await.unwrap(), None);
    assert!(!log.delete_session(&b.cookie).await.unwrap());
    assert!(log.session(&c.cookie, a.expires_at).await.unwrap().is_some());
    assert_eq!(count(log, "lockscope_web_sessions").await, 1);
}

#[tokio::test]
async fn sqlite_appends_queries_and_gets() {
    let (_dir, _, log) = sqlite().await;
    append_query_get(&log).await;
}

#[tokio::test]
async fn sqlite_sessions() {
    let (_dir, _, log) = sqlite().await;
    sessions(&log).await;
}

#[tokio::test]
async fn sqlite_file_is_shared_with_the_lock_store_and_reopened() {
    let (dir, url, log) = sqlite().await;
    let e = log
        .append(&entry(1, "alice", Action::Release, "prod", Outcome::Done))
        .await
        .unwrap();
    let store_url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join(".lockscope").join("lockscope.db").display()
    );
    // The store's migrations accept a file with the audit tables in it, and
    // the audit log opens a file with the store's tables in it.
    let store = lockscope_store::sql::SqlLocks::connect(&store_url).await.unwrap();
    assert!(store.held().await.unwrap().is_empty());
    let again = AuditLog::open(&url).await.unwrap();
    assert_eq!(again.get(e.id).await.unwrap(), Some(e.clone()));
    let mode: String = sqlx::query("PRAGMA journal_mode")
        .fetch_one(&again.inner.pool)
        .await
        .unwrap()
        .try_get(0)
        .unwrap();
    assert_eq!(mode, "wal");
    let next = again
        .append(&entry(2, "bob", Action::Blacklist, "prod", Outcome::Done))
        .await
        .unwrap();
    assert!(next.id > e.id);
    assert_eq!(count(&log, "lockscope_audit").await, 2);
}

#[tokio::test]
async fn postgres_appends_queries_gets_and_keeps_sessions() {
    let pg = PgServer::start().await;
    // Two servers starting at once both create the tables without failing.
    let url = pg.url();
    let (a, b) = tokio::join!(AuditLog::open(&url), AuditLog::open(&url));
    let (log, other) = (a.unwrap(), b.unwrap());
    append_query_get(&log).await;
    sessions(&log).await;
    let reopened = AuditLog::open(&url).await.unwrap();
    assert_eq!(
        ids(&reopened.query(&AuditQuery::default()).await.unwrap()),
        ids(&other.query(&AuditQuery::default()).await.unwrap())
    );
    assert_eq!(count(&reopened, "lockscope_audit").await, 7);
}

#[tokio::test]
async fn errors_never_show_the_password() {
    let e = AuditLog::open("postgres://lockscope:hunter2@127.0.0.1:1/audit?password=hunter2")
        .await
        .unwrap_err();
    let shown = e.to_string();
    assert!(shown.contains("postgres://lockscope@127.0.0.1:1/audit"), "{shown}");
    assert!(matches!(e, AuditError::Unreachable { .. }), "{e:?}");
    let mut source = std::error::Error::source(&e);
    assert!(source.is_some(), "keeps sqlx's error");
    let mut chain = shown;
    while let Some(s) = source {
        chain.push_str(&s.to_string());
        source = s.source();
    }
    assert!(!chain.contains("hunter2"), "{chain}");
    for bad in ["mysql://u:hunter2@db/x", "sqlite:"] {
        let e = AuditLog::open(bad).await.unwrap_err();
        assert!(matches!(e, AuditError::Config(_)), "{e:?}");
        assert!(!e.to_string().contains("hunter2"), "{e}");
    }
}

/// A log made before entries had keys takes keyed entries (the column and its
/// unique index are added at open), and an entry written twice under one key
/// is one row.
#[tokio::test]
async fn a_log_made_before_keys_gets_them_and_a_key_is_written_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    let url = format!("sqlite:{}", path.display());
    {
        let mut conn =
            <sqlx::SqliteConnection as sqlx::Connection>::connect(&format!("sqlite://{}?mode=rwc", path.display()))
                .await
                .unwrap();
        sqlx::query(
            "CREATE TABLE lockscope_audit (id INTEGER PRIMARY KEY AUTOINCREMENT, at BIGINT NOT NULL, \
             actor TEXT NOT NULL, role TEXT, via TEXT NOT NULL, action TEXT, fleet TEXT NOT NULL, \
             target TEXT NOT NULL, fence BIGINT, reason TEXT NOT NULL, outcome TEXT, detail TEXT NOT NULL)",
        )
        .execute(&mut conn)
        .await
        .unwrap();
    }
    let log = AuditLog::open(&url).await.unwrap();
    let e = entry(1, "alice", Action::Release, "prod", Outcome::Done);
    assert!(log.append_keyed(&e, Some("k1")).await.is_ok());
    assert!(
        log.append_keyed(&e, Some("k1")).await.is_err(),
        "the key is there: nothing written"
    );
    log.append(&e).await.unwrap();
    log.append(&e).await.unwrap();
    assert_eq!(
        count(&log, "lockscope_audit").await,
        3,
        "unkeyed entries are each written"
    );
    // Opening again changes nothing.
    drop(log);
    assert_eq!(count(&AuditLog::open(&url).await.unwrap(), "lockscope_audit").await, 3);
}
