//! The `advisory+postgres://` fleet against a real PostgreSQL (one server per
//! test, each test in a database of its own), with locks taken by `psql`
//! sessions and by sqlx connections: what the observer shows through the
//! hub's reducer (key, holder backend, level, waiters with their blockers),
//! waits-for cycles (a real deadlock before `deadlock_timeout`, and the
//! `CREATE INDEX CONCURRENTLY` cycle), and the guarded terminate and cancel.

use std::time::{Duration, Instant};

use lockscope_model::fleet::pg_advisory::{AdvisoryKey, LockLevel, PgAdvisoryLock};
use lockscope_model::fleet::FamilyDetail;
use lockscope_model::{FleetState, LockBody, StoreStatus};
use lockscope_store::fleet::Release;
use lockscope_store::pg_advisory::{fence_of, PgAdvisoryFleet, Signal};
use lockscope_store::spec::StoreSpec;
use lockscope_store::testing::{PgServer, Psql};
use lockscope_store::ObserverEvent;
use sqlx::Connection;
use tokio::sync::mpsc;

/// A new database on `server`; its URL.
async fn database(server: &PgServer, name: &str) -> String {
    let mut admin = sqlx::PgConnection::connect(&server.url()).await.unwrap();
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut admin)
        .await
        .unwrap();
    server.url().replace("/postgres", &format!("/{name}"))
}

/// An observer feeding a reducer, as the hub runs it.
struct Watch {
    state: FleetState,
    status: Option<StoreStatus>,
    rx: mpsc::Receiver<ObserverEvent>,
}

impl Watch {
    fn start(spec: &StoreSpec) -> Watch {
        let (tx, rx) = mpsc::channel(64);
        tokio::spawn(spec.open().unwrap().observer().run(tx));
        Watch {
            state: FleetState::default(),
            status: None,
            rx,
        }
    }

    /// Applies what the observer sends until `done` holds; panics after `max`.
    async fn until(&mut self, what: &str, max: Duration, done: impl Fn(&Watch) -> bool) -> Duration {
        let t0 = Instant::now();
        while !done(self) {
            let left = max.checked_sub(t0.elapsed()).unwrap_or_default();
            match tokio::time::timeout(left, self.rx.recv()).await {
                Ok(Some(ObserverEvent::Events(events))) => {
                    for e in events {
                        self.state.apply(e);
                    }
                }
                Ok(Some(ObserverEvent::Status(s))) => self.status = Some(s),
                Ok(Some(ObserverEvent::Missed { .. })) => panic!("history replay sent unasked"),
                Ok(Some(ObserverEvent::Looked(_))) => {}
                Ok(None) => panic!("the observer stopped"),
                Err(_) => panic!(
                    "not within {max:?}: {what} (status {:?}, locks {:#?})",
                    self.status,
                    self.state.locks().collect::<Vec<_>>()
                ),
            }
        }
        t0.elapsed()
    }

    fn detail(&self, name: &str) -> Option<PgAdvisoryLock> {
        match &self.state.get(name)?.body {
            LockBody::Foreign { detail: Some(d), .. } => match &**d {
                FamilyDetail::PgAdvisory(pg) => Some(pg.clone()),
                _ => None,
            },
            _ => None,
        }
    }

    fn holder_app(&self, name: &str) -> Option<String> {
        Some(self.detail(name)?.holder()?.application_name.clone())
    }
}

fn spec(url: &str, options: &str) -> StoreSpec {
    StoreSpec::parse(&format!("advisory+{url}#{options}")).unwrap()
}

fn fleet(spec: &StoreSpec) -> PgAdvisoryFleet {
    match spec {
        StoreSpec::PgAdvisory(t) => PgAdvisoryFleet::new(t.clone()),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn psql_and_sqlx_holders_waiters_and_the_guarded_levers() {
    let server = PgServer::start().await;
    let url = database(&server, "adv_hold").await;
    let fleet_spec = spec(&url, "poll=200ms&idle=1s&name.1:2=jobs&hashtext=nightly");
    let mut w = Watch::start(&fleet_spec);

    // docs/operations.md: "An advisory lock taken in a `psql` session is shown with its
    // backend (pid, application_name, backend start) within one poll".
    let mut holder = Psql::open(&url, "migrate");
    holder.send("SELECT pg_advisory_lock(42);");
    let took = w
        .until("psql's lock 42", Duration::from_secs(5), |w| {
            w.holder_app("42").as_deref() == Some("migrate")
        })
        .await;
    let d = w.detail("42").unwrap();
    let h = d.holder().unwrap().clone();
    assert_eq!(d.key, AdvisoryKey::Bigint(42));
    assert_eq!(d.mode, "ExclusiveLock");
    assert!(h.pid > 0 && h.backend_start_us > 0, "{h:?}");
    assert_eq!(h.usename.as_deref(), Some("lockscope"));
    assert_eq!(w.state.get("42").unwrap().fence, fence_of(h.pid, h.backend_start_us));
    assert!(
        matches!(d.level, LockLevel::Session { .. }),
        "held by an idle psql outside a transaction: {:?}",
        d.level
    );
    eprintln!("lock 42 shown after {took:?}");

    // docs/operations.md: "**Possibly stranded**, with the reason: a session-level lock whose
    // holder has been `idle` (not in a transaction) longer than `idle`, or whose holder's
    // `application_name` is a pooler's".
    w.until("42 possibly stranded (idle past 1 s)", Duration::from_secs(5), |w| {
        w.detail("42")
            .and_then(|d| d.stranded)
            .is_some_and(|why| why.contains("idle (not in a transaction) longer than the 1 s threshold"))
    })
    .await;
    let mut pooled = Psql::open(&url, "pgbouncer");
    pooled.send("SELECT pg_advisory_lock(99);");
    w.until("99 possibly stranded (a pooler's)", Duration::from_secs(5), |w| {
        w.detail("99")
            .and_then(|d| d.stranded)
            .is_some_and(|why| why.contains("connection pooler's"))
    })
    .await;
    drop(pooled);
    w.until("99 gone with its session", Duration::from_secs(5), |w| {
        w.detail("99").is_none()
    })
    .await;

    // A second client library: sqlx, a transaction-level lock on a two-int4 key
    // (named by the spec) and a hashtext-named one; level unknown while in its transaction.
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    let mut tx = conn.begin().await.unwrap();
    sqlx::query("SELECT pg_advisory_xact_lock(1, 2), pg_advisory_xact_lock(hashtext('nightly'))")
        .execute(&mut *tx)
        .await
        .unwrap();
    w.until("sqlx's locks", Duration::from_secs(5), |w| {
        w.detail("jobs").is_some() && w.detail("nightly").is_some()
    })
    .await;
    let jobs = w.detail("jobs").unwrap();
    assert_eq!(jobs.key, AdvisoryKey::Pair(1, 2));
    // docs/operations.md: "lockscope shows a lock as **session-level** once it has seen its holder
    // hold it outside a transaction [...]; until then, as **unknown**".
    assert_eq!(jobs.level, LockLevel::Unknown, "only seen inside one transaction");
    assert!(jobs.holder().unwrap().xact_start.is_some());
    tx.commit().await.unwrap();
    w.until("sqlx's locks gone with its transaction", Duration::from_secs(5), |w| {
        w.detail("jobs").is_none() && w.detail("nightly").is_none()
    })
    .await;

    // Waiters: two psql sessions blocked on 42, with who blocks them.
    let mut waiter = Psql::open(&url, "worker-a");
    waiter.send("SELECT pg_advisory_lock(42);");
    let mut waiter2 = Psql::open(&url, "worker-b");
    waiter2.send("SELECT pg_advisory_lock(42);");
    w.until("two waiters on 42", Duration::from_secs(5), |w| {
        w.detail("42").is_some_and(|d| d.waiters.len() == 2) && w.state.waiters_of("42").count() == 2
    })
    .await;
    let d = w.detail("42").unwrap();
    let a = d
        .waiters
        .iter()
        .find(|b| b.application_name == "worker-a")
        .unwrap()
        .clone();
    assert!(a.blocked_by.contains(&h.pid), "pg_blocking_pids: {a:?}");
    assert!(a.waiting_since.is_some(), "{a:?}");
    assert!(w.state.deadlocks().locks.is_empty(), "a queue is no deadlock");

    // Cancel a waiter: a stale backend start does nothing; the right one ends its wait.
    let f = fleet(&fleet_spec);
    assert_eq!(f.cancel(a.pid, a.backend_start_us - 1).await.unwrap(), Signal::Gone);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        w.detail("42").unwrap().waiters.len(),
        2,
        "a stale start cancels nothing"
    );
    assert_eq!(f.cancel(a.pid, a.backend_start_us).await.unwrap(), Signal::Sent);
    w.until("worker-a no longer waits", Duration::from_secs(5), |w| {
        w.detail("42").is_some_and(|d| d.waiters.len() == 1)
    })
    .await;

    // Terminate the holder: a stale fence (a reused pid) is refused, nothing
    // terminated; the fence shown ends the backend, and the lock passes on.
    let fleet_store = fleet_spec.open().unwrap();
    let stale = fence_of(h.pid, h.backend_start_us + 1);
    match fleet_store.release("42", stale).await.unwrap() {
        Release::Changed(now) => assert_eq!(now.fence, fence_of(h.pid, h.backend_start_us)),
        other => panic!("{other:?}"),
    }
    let alive: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE pid = $1")
        .bind(h.pid)
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(alive, 1, "a stale fence terminates nothing");
    let fence = fence_of(h.pid, h.backend_start_us);
    assert!(matches!(
        fleet_store.release("42", fence).await.unwrap(),
        Release::Released(_)
    ));
    w.until("42 passes to worker-b", Duration::from_secs(5), |w| {
        w.holder_app("42").as_deref() == Some("worker-b")
    })
    .await;
    let alive: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE pid = $1")
        .bind(h.pid)
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(alive, 0, "the holder's backend ended");
    // psql learns it at its next statement, and exits (a script's connection is not re-made).
    holder.send("SELECT 1;");
    let t0 = Instant::now();
    while !holder.exited() {
        assert!(t0.elapsed() < Duration::from_secs(5), "psql still runs");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(waiter);
    drop(waiter2);
    w.until("no lock left", Duration::from_secs(5), |w| {
        w.state.locks().next().is_none()
    })
    .await;

    // A names table, and the row limit: docs/operations.md: "Past the limit, the lock pages
    // say **"more than N advisory locks: only the first N read are shown"**".
    sqlx::query("CREATE TABLE lock_names (key text, name text)")
        .execute(&mut conn)
        .await
        .unwrap();
    sqlx::query("INSERT INTO lock_names VALUES ('5', 'reports')")
        .execute(&mut conn)
        .await
        .unwrap();
    let mut many = Psql::open(&url, "many");
    many.send("SELECT pg_advisory_lock(5), pg_advisory_lock(6), pg_advisory_lock(7);");
    let mut named = Watch::start(&spec(&url, "poll=200ms&names=lock_names"));
    named
        .until("5 named by the table", Duration::from_secs(5), |w| {
            w.detail("reports").is_some() && w.detail("6").is_some() && w.detail("7").is_some()
        })
        .await;
    assert_eq!(named.detail("reports").unwrap().truncated_at, None);
    let mut capped = Watch::start(&spec(&url, "poll=200ms&limit=2"));
    capped
        .until("two of three locks, said to be cut", Duration::from_secs(5), |w| {
            w.state.locks().count() == 2
        })
        .await;
    for e in capped.state.locks() {
        let d = capped.detail(&e.name).unwrap();
        assert_eq!(d.truncated_at, Some(2), "{d:?}");
    }
    // docs/operations.md: "`holds=N` (default 50, 1 to 10000): the most entries a holder's
    // **also holds** lists". The backend holding 5, 6 and 7: all listed by default, 1 with holds=1.
    let also = |w: &Watch, name: &str| w.detail(name).and_then(|d| d.holder().map(|h| h.also_holds.clone()));
    assert!(
        also(&named, "reports").is_some_and(|a| a.len() >= 3),
        "{:?}",
        also(&named, "reports")
    );
    let mut one = Watch::start(&spec(&url, "poll=200ms&holds=1"));
    one.until("5 read", Duration::from_secs(5), |w| w.detail("5").is_some())
        .await;
    assert_eq!(also(&one, "5").map(|a| a.len()), Some(1), "{:?}", also(&one, "5"));
}

#[tokio::test]
async fn deadlocks_are_shown_as_cycles_before_postgres_breaks_them() {
    let server = PgServer::start().await;
    let url = database(&server, "adv_cycles").await;
    let mut w = Watch::start(&spec(&url, "poll=200ms"));

    // issue 28: "A real deadlock between two advisory-lock sessions is shown as a cycle
    // before PostgreSQL's `deadlock_timeout` resolves it (set it to a few seconds in the test)."
    let mut a = Psql::open(&url, "a");
    let mut b = Psql::open(&url, "b");
    for s in [&mut a, &mut b] {
        s.send("SET deadlock_timeout = '5s';");
    }
    a.send("SELECT pg_advisory_lock(1);");
    b.send("SELECT pg_advisory_lock(2);");
    w.until("1 and 2 held", Duration::from_secs(5), |w| {
        w.detail("1").is_some() && w.detail("2").is_some()
    })
    .await;
    a.send("SELECT pg_advisory_lock(2);");
    b.send("SELECT pg_advisory_lock(1);");
    let t0 = Instant::now();
    w.until("the deadlock", Duration::from_secs(4), |w| {
        let d = w.state.deadlocks();
        d.locks.contains("1") && d.locks.contains("2") && w.detail("1").is_some_and(|d| d.cycle.len() == 2)
    })
    .await;
    assert!(t0.elapsed() < Duration::from_secs(5), "before deadlock_timeout");
    let cycle = w.detail("1").unwrap().cycle;
    assert!(cycle.iter().all(|s| s.waits_on == "advisory"), "{cycle:?}");
    // PostgreSQL breaks it after deadlock_timeout: one of them errors out, the other gets it.
    w.until("the deadlock broken", Duration::from_secs(15), |w| {
        w.state.deadlocks().locks.is_empty()
    })
    .await;
    drop((a, b));

    // issue 28: "a `CREATE INDEX CONCURRENTLY` in the holder's migration waiting for the
    // snapshot of a backend that is itself blocked in `pg_advisory_lock` [...]. A test
    // reproduces exactly that and expects it shown as a cycle."
    let mut setup = sqlx::PgConnection::connect(&url).await.unwrap();
    sqlx::query("CREATE TABLE t (x int)").execute(&mut setup).await.unwrap();
    let mut migration = Psql::open(&url, "migration");
    migration.send("SET deadlock_timeout = '30s';");
    migration.send("SELECT pg_advisory_lock(7);");
    w.until("the migration holds 7", Duration::from_secs(5), |w| {
        w.detail("7").is_some()
    })
    .await;
    let mut app = Psql::open(&url, "app");
    app.send("SET deadlock_timeout = '30s';");
    app.send("SELECT pg_advisory_lock(7);");
    w.until("app waits for 7", Duration::from_secs(5), |w| {
        w.detail("7").is_some_and(|d| d.waiters.len() == 1)
    })
    .await;
    migration.send("CREATE INDEX CONCURRENTLY t_x ON t (x);");
    w.until("the CREATE INDEX CONCURRENTLY cycle", Duration::from_secs(10), |w| {
        w.state.deadlocks().locks.contains("7") && w.detail("7").is_some_and(|d| d.cycle.len() == 2)
    })
    .await;
    let d = w.detail("7").unwrap();
    let waits: Vec<&str> = d.cycle.iter().map(|s| s.waits_on.as_str()).collect();
    assert!(
        waits.contains(&"virtualxid") && waits.contains(&"advisory"),
        "{:?}",
        d.cycle
    );
    assert_eq!(d.holder().unwrap().waits_for, vec![d.waiters[0].session.clone()]);
}
