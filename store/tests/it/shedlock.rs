//! `ShedLockObserver` against a real PostgreSQL (started on a free port) and a
//! SQLite file: the table is created with ShedLock's DDL and written with exactly
//! the statements ShedLock's JDBC provider sends (timestamps in UTC). What the
//! observer reports goes through the hub's reducer, as on the dashboard.

use std::time::Duration;

use lockscope_model::{FleetState, LockBody, LockEntry, StoreStatus};
use lockscope_store::backoff::Backoff;
use lockscope_store::sql::ShedLockObserver;
use lockscope_store::testing::PgServer;
use lockscope_store::{now_ms, Observer, ObserverEvent};
use sqlx::{AnyPool, Row};
use tokio::sync::mpsc;

const DDL: &str = "CREATE TABLE shedlock(name VARCHAR(64) NOT NULL, lock_until TIMESTAMP NOT NULL, \
                   locked_at TIMESTAMP NOT NULL, locked_by VARCHAR(255) NOT NULL, PRIMARY KEY (name))";
const INSERT: &str = "INSERT INTO shedlock(name, lock_until, locked_at, locked_by) VALUES(?, ?, ?, ?)";
const TAKE: &str =
    "UPDATE shedlock SET lock_until = ?, locked_at = ?, locked_by = ? WHERE name = ? AND lock_until <= ?";
const UNLOCK: &str = "UPDATE shedlock SET lock_until = ? WHERE name = ?";
const EXTEND: &str = "UPDATE shedlock SET lock_until = ? WHERE name = ? AND locked_by = ? AND lock_until > ?";

const POLL: Duration = Duration::from_millis(100);

enum Keep {
    Pg(#[allow(dead_code)] PgServer),
    Dir(#[allow(dead_code)] tempfile::TempDir),
}

/// A database as a ShedLock deployment uses it.
struct Db {
    pool: AnyPool,
    pg: bool,
    /// What the dashboard is configured with.
    observer_url: String,
    _keep: Keep,
}

async fn new_postgres() -> Db {
    sqlx::any::install_default_drivers();
    let server = PgServer::start().await;
    let url = server.url();
    Db {
        pool: AnyPool::connect(&url).await.unwrap(),
        pg: true,
        observer_url: url,
        _keep: Keep::Pg(server),
    }
}

async fn new_sqlite() -> Db {
    sqlx::any::install_default_drivers();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.db");
    let pool = AnyPool::connect(&format!("sqlite://{}?mode=rwc", path.display()))
        .await
        .unwrap();
    Db {
        pool,
        pg: false,
        // No mode=rwc: the observer must not create anything.
        observer_url: format!("sqlite://{}", path.display()),
        _keep: Keep::Dir(dir),
    }
}

/// `YYYY-MM-DD HH:MM:SS.SSS` in UTC, as ShedLock's JDBC provider writes it.
fn ts(ms: i64) -> String {
    let (days, rem) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    // Days since 1970-01-01 to a civil date (H. Hinnant's algorithm).
    let z = days + 719_468;
    let (era, doe) = (z.div_euclid(146_097), z.rem_euclid(146_097));
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{:03}",
        rem / 3_600_000,
        rem / 60_000 % 60,
        rem / 1000 % 60,
        rem % 1000
    )
}

/// A timestamp parameter: text, which PostgreSQL is told is a timestamp.
enum P<'a> {
    S(&'a str),
    T(i64),
}

impl Db {
    /// Runs one of ShedLock's statements, `?` parameters in order.
    async fn run(&self, statement: &str, params: &[P<'_>]) -> u64 {
        let mut sql = String::new();
        let mut n = 0;
        for c in statement.chars() {
            if c != '?' {
                sql.push(c);
                continue;
            }
            n += 1;
            match (self.pg, &params[n - 1]) {
                (false, _) => sql.push('?'),
                (true, P::S(_)) => sql.push_str(&format!("${n}")),
                (true, P::T(_)) => sql.push_str(&format!("CAST(${n} AS TIMESTAMP)")),
            }
        }
        assert_eq!(n, params.len(), "{statement}");
        let mut q = sqlx::query(&sql);
        for p in params {
            q = match p {
                P::S(s) => q.bind(s.to_string()),
                P::T(ms) => q.bind(ts(*ms)),
            };
        }
        q.execute(&self.pool).await.unwrap().rows_affected()
    }

    async fn exec(&self, sql: &str) {
        sqlx::query(sql).execute(&self.pool).await.unwrap();
    }

    /// Every row, as text, in name order.
    async fn dump(&self) -> Vec<[Option<String>; 4]> {
        sqlx::query(
            "SELECT CAST(name AS TEXT), CAST(lock_until AS TEXT), CAST(locked_at AS TEXT), CAST(locked_by AS TEXT) \
             FROM shedlock ORDER BY name",
        )
        .fetch_all(&self.pool)
        .await
        .unwrap()
        .iter()
        .map(|r| [0, 1, 2, 3].map(|i| r.get::<Option<String>, _>(i)))
        .collect()
    }

    async fn lockscope_tables(&self) -> i64 {
        let sql = if self.pg {
            "SELECT COUNT(*) FROM information_schema.tables WHERE table_name LIKE 'lockscope%'"
        } else {
            "SELECT COUNT(*) FROM sqlite_master WHERE name LIKE 'lockscope%'"
        };
        sqlx::query(sql).fetch_one(&self.pool).await.unwrap().get::<i64, _>(0)
    }
}

/// The dashboard's view: the hub's state fed by the observer (its reducer drops
/// changes with stale revisions, so every change must carry a newer one).
#[derive(Default)]
struct View {
    hub: FleetState,
    status: Option<StoreStatus>,
}

impl View {
    fn live(&self) -> bool {
        matches!(self.status, Some(StoreStatus::Live { .. }))
    }

    fn handle(&mut self, ev: ObserverEvent) {
        match ev {
            ObserverEvent::Status(s) => self.status = Some(s),
            ObserverEvent::Events(evs) => {
                for e in evs {
                    self.hub.apply(e);
                }
            }
            ObserverEvent::Missed { .. } => panic!("a ShedLock observer replays no history"),
            ObserverEvent::Looked(_) => {}
        }
    }

    /// Applies events until `done` holds for the live view.
    async fn until(&mut self, rx: &mut mpsc::Receiver<ObserverEvent>, what: &str, done: impl Fn(&FleetState) -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while !(self.live() && done(&self.hub)) {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(ev) => self.handle(ev.expect("observer stopped")),
                Err(_) => panic!(
                    "timed out waiting for {what}; status {:?}, shown {:?}",
                    self.status,
                    self.hub.locks().collect::<Vec<_>>()
                ),
            }
        }
    }

    /// Applies what arrives for `d`.
    async fn wait(&mut self, rx: &mut mpsc::Receiver<ObserverEvent>, d: Duration) {
        let deadline = tokio::time::Instant::now() + d;
        while let Ok(ev) = tokio::time::timeout_at(deadline, rx.recv()).await {
            self.handle(ev.expect("observer stopped"));
        }
    }
}

fn start(db: &Db) -> mpsc::Receiver<ObserverEvent> {
    let mut observer = ShedLockObserver::new(&db.observer_url, None).unwrap();
    observer.poll = POLL;
    observer.backoff = Backoff::new(Duration::from_millis(50), Duration::from_millis(300));
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(Box::new(observer).run(tx));
    rx
}

fn holder(e: &LockEntry) -> &str {
    &e.record().expect("a held record").session
}

fn until_ms(s: &FleetState, name: &str) -> Option<i64> {
    s.get(name).and_then(|e| e.record()).map(|r| r.auto_unlock_at)
}

fn near(a: Option<i64>, b: i64) -> bool {
    a.is_some_and(|a| (a - b).abs() < 1000)
}

/// Everything ShedLock does to a lock, seen through the dashboard. Leaves the
/// observer running for the caller's dialect-specific checks.
async fn follows_shedlock(db: &Db) -> (mpsc::Receiver<ObserverEvent>, View) {
    let mut rx = start(db);
    let mut view = View::default();

    // No table yet: unreachable, with the reason.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let ev = tokio::time::timeout_at(deadline, rx.recv())
            .await
            .expect("no status")
            .unwrap();
        view.handle(ev);
        if let Some(StoreStatus::Unreachable { error, .. }) = &view.status {
            assert!(error.contains("shedlock"), "{error}");
            break;
        }
        assert!(!view.live(), "live without a table");
    }
    db.exec(DDL).await;

    // A first lock, and a row whose lock is long over.
    let now = now_ms();
    let report_until = now + 30_000;
    db.run(INSERT, &[P::S("report"), P::T(report_until), P::T(now), P::S("host-a")])
        .await;
    db.run(
        INSERT,
        &[P::S("old"), P::T(now - 10_000), P::T(now - 20_000), P::S("host-z")],
    )
    .await;
    view.until(&mut rx, "the first lock", |s| near(until_ms(s, "report"), report_until))
        .await;
    let e = view.hub.get("report").unwrap();
    let r = e.record().unwrap();
    assert_eq!(
        (&*r.session, &*r.host, r.owner.as_str()),
        ("host-a", "host-a", "host-a")
    );
    assert_eq!(&*r.service, "shedlock");
    assert_eq!(r.purpose, "ShedLock report");
    assert_eq!(e.fence, 0);
    assert!(
        (r.acquired_at - now).abs() < 1000,
        "acquired_at {} vs {now}",
        r.acquired_at
    );
    assert_eq!(r.heartbeat_at, r.acquired_at);
    assert_eq!(r.alert_at, r.auto_unlock_at);
    assert_eq!(r.expected_runtime_ms as i64, r.auto_unlock_at - r.acquired_at);
    assert!(view.hub.get("old").is_none(), "an expired lock is shown");

    // Extended.
    let now = now_ms();
    let extended = now + 60_000;
    assert_eq!(
        db.run(EXTEND, &[P::T(extended), P::S("report"), P::S("host-a"), P::T(now)])
            .await,
        1
    );
    view.until(&mut rx, "the extension", |s| near(until_ms(s, "report"), extended))
        .await;

    // Unlocked before lockAtLeastFor is over: lock_until moves back, still held.
    let at_least = now_ms() + 20_000;
    assert_eq!(db.run(UNLOCK, &[P::T(at_least), P::S("report")]).await, 1);
    view.until(&mut rx, "the earlier lock_until", |s| {
        near(until_ms(s, "report"), at_least)
    })
    .await;

    // Unlocked.
    assert_eq!(db.run(UNLOCK, &[P::T(now_ms()), P::S("report")]).await, 1);
    view.until(&mut rx, "the unlock", |s| s.get("report").is_none()).await;

    // Taken again by another host, briefly: it goes away by itself.
    let now = now_ms();
    let brief = now + 1500;
    assert_eq!(
        db.run(
            TAKE,
            &[P::T(brief), P::T(now), P::S("host-b"), P::S("report"), P::T(now)]
        )
        .await,
        1
    );
    view.until(&mut rx, "the new holder", |s| {
        s.get("report").is_some_and(|e| holder(e) == "host-b")
    })
    .await;
    assert!(near(until_ms(&view.hub, "report"), brief));
    // Taking a held lock fails, as in ShedLock.
    let now = now_ms();
    assert_eq!(
        db.run(
            TAKE,
            &[P::T(now + 9000), P::T(now), P::S("host-c"), P::S("report"), P::T(now)]
        )
        .await,
        0
    );
    view.until(&mut rx, "the expiry", |s| s.get("report").is_none()).await;
    assert!(
        now_ms() >= brief - 200,
        "shown as released {} ms early",
        brief - now_ms()
    );

    (rx, view)
}

/// The observer wrote nothing: the rows are exactly ShedLock's, unchanged over
/// several polls, and no lockscope table exists.
async fn wrote_nothing(db: &Db, names: &[&str]) {
    let before = db.dump().await;
    tokio::time::sleep(POLL * 4).await;
    assert_eq!(db.dump().await, before);
    let got: Vec<_> = before.iter().map(|r| r[0].clone().unwrap()).collect();
    assert_eq!(got, names);
    assert_eq!(db.lockscope_tables().await, 0);
}

#[tokio::test]
async fn postgres_follows_shedlock() {
    let db = new_postgres().await;
    let (mut rx, mut view) = follows_shedlock(&db).await;

    // A timestamp that does not convert (infinity) is shown, not fatal.
    let now = now_ms();
    db.exec(&format!(
        "INSERT INTO shedlock(name, lock_until, locked_at, locked_by) VALUES('forever', 'infinity', '{}', 'host-f')",
        ts(now)
    ))
    .await;
    let fine = now + 30_000;
    db.run(INSERT, &[P::S("fine"), P::T(fine), P::T(now), P::S("host-g")])
        .await;
    view.until(&mut rx, "the infinite row", |s| {
        s.get("forever").is_some() && s.get("fine").is_some()
    })
    .await;
    match &view.hub.get("forever").unwrap().body {
        LockBody::Malformed { raw, error } => {
            assert!(String::from_utf8_lossy(raw).contains("infinity"), "{raw:?}");
            assert!(error.contains("lock_until"), "{error}");
        }
        other => panic!("shown as {other:?}"),
    }
    assert!(near(until_ms(&view.hub, "fine"), fine));

    wrote_nothing(&db, &["fine", "forever", "old", "report"]).await;
    view.wait(&mut rx, POLL * 2).await;
    assert!(view.live(), "{:?}", view.status);
}

#[tokio::test]
async fn sqlite_follows_shedlock() {
    let db = new_sqlite().await;
    let (mut rx, mut view) = follows_shedlock(&db).await;

    // Rows ShedLock did not write this way: garbage text, an integer (unix ms,
    // what sqlite-jdbc stores by default), strftime text from SQLite itself.
    let now = now_ms();
    db.run(
        INSERT,
        &[P::S("garbage"), P::S("next tuesday"), P::T(now), P::S("host-x")],
    )
    .await;
    db.run(INSERT, &[P::S("half"), P::T(now + 30_000), P::S("??"), P::S("host-y")])
        .await;
    let millis = now + 40_000;
    sqlx::query(INSERT)
        .bind("millis")
        .bind(millis)
        .bind(now)
        .bind("host-m")
        .execute(&db.pool)
        .await
        .unwrap();
    db.exec(
        "INSERT INTO shedlock(name, lock_until, locked_at, locked_by) VALUES('native', \
         strftime('%Y-%m-%d %H:%M:%f', 'now', '+30 seconds'), strftime('%Y-%m-%d %H:%M:%f', 'now'), 'host-n')",
    )
    .await;
    view.until(&mut rx, "the odd rows", |s| {
        ["garbage", "half", "millis", "native"]
            .iter()
            .all(|n| s.get(n).is_some())
    })
    .await;
    for (name, column, raw) in [("garbage", "lock_until", "next tuesday"), ("half", "locked_at", "??")] {
        match &view.hub.get(name).unwrap().body {
            LockBody::Malformed { raw: bytes, error } => {
                assert!(String::from_utf8_lossy(bytes).contains(raw), "{name}: {bytes:?}");
                assert!(error.contains(column), "{name}: {error}");
            }
            other => panic!("{name} shown as {other:?}"),
        }
    }
    assert_eq!(until_ms(&view.hub, "millis"), Some(millis));
    assert!(near(until_ms(&view.hub, "native"), now + 30_000));

    wrote_nothing(&db, &["garbage", "half", "millis", "native", "old", "report"]).await;
    view.wait(&mut rx, POLL * 2).await;
    assert!(view.live(), "{:?}", view.status);
}

#[tokio::test]
async fn refuses_table_names_that_are_not_identifiers() {
    for bad in [
        "shedlock; DROP TABLE shedlock",
        "",
        "a.b.c",
        "shed lock",
        "\"shedlock\"",
    ] {
        let err = ShedLockObserver::new("sqlite:///tmp/x.db", Some(bad)).err().expect(bad);
        assert!(err.to_string().contains("identifier"), "{err}");
    }
    assert_eq!(
        ShedLockObserver::new("sqlite:///tmp/x.db", Some("jobs.shedlock"))
            .unwrap()
            .table(),
        "jobs.shedlock"
    );
}

#[test]
fn timestamps_are_written_in_utc() {
    assert_eq!(ts(0), "1970-01-01 00:00:00.000");
    assert_eq!(ts(1_700_000_000_123), "2023-11-14 22:13:20.123");
    assert_eq!(ts(951_782_400_000), "2000-02-29 00:00:00.000");
}
