//! Checkpoints in parts (issue 26): a checkpoint is rows of at most
//! `PART_BYTES` (here a few KiB, so a small fleet takes many), merged lock by
//! lock with the events since the previous one, and reads back as the table a
//! replay of every event gives; one written whole before version 4 still reads.
//!
//! docs/operations.md, "Time travel": "A checkpoint is stored in parts of at
//! most 1 MiB of JSON each (plus one lock's record; table
//! `history_checkpoint_parts`, in lock-name order) under a row in
//! `history_checkpoints` written last" (`in_parts`: the bound, the parts the
//! row names, the table they read back as, on SQLite and on PostgreSQL with
//! a collation that is not bytewise).

use lockscope_model::history::Replay;

use super::*;

/// Bytewise order is not most collations': case, punctuation, accents.
fn names() -> Vec<String> {
    let stems = ["a", "A", "a-b", "a_b", "a.b", "é", "z", "Z", "b/x", "b-x", "b_x", "ü/1"];
    (0..60)
        .map(|i| format!("{}{}", stems[i % stems.len()], i / stems.len()))
        .collect()
}

fn lock_events_at(fleet: &str, at: Millis, before: Option<&LockEntry>, after: Option<&LockEntry>) -> Vec<HistoryEvent> {
    lock_events(before, after, None, Holder::Alive)
        .into_iter()
        .map(|d| HistoryEvent::new(fleet, at, d))
        .collect()
}

fn wait(fleet: &str, at: Millis, lock: &str, session: &str, started: bool) -> HistoryEvent {
    let w = Waiter {
        lock: lock.into(),
        session: session.into(),
    };
    HistoryEvent::new(fleet, at, wait_event(&w, started, Some(1)))
}

/// Three rounds of events, 100 s apart (more than the replay's overlap, so a
/// checkpoint between two rounds is what the table after it starts from):
/// acquisitions, waits, re-acquisitions, releases.
fn rounds(fleet: &str) -> [Vec<HistoryEvent>; 3] {
    let names = names();
    let (mut one, mut two, mut three) = (Vec::new(), Vec::new(), Vec::new());
    for (i, n) in names.iter().enumerate() {
        let at = i as Millis;
        let (a1, a2) = (held(n, 1, "s1"), held(n, 2, "s2"));
        one.extend(lock_events_at(fleet, 100_000 + at, None, Some(&a1)));
        if i % 3 == 0 {
            one.push(wait(fleet, 100_000 + at, n, "w", true));
        }
        let now = match (i % 4, i % 5) {
            (0, _) => {
                two.extend(lock_events_at(fleet, 200_000 + at, Some(&a1), Some(&a2)));
                Some(a2)
            }
            (_, 0) => {
                two.extend(lock_events_at(fleet, 200_000 + at, Some(&a1), None));
                None
            }
            _ => Some(a1),
        };
        if i % 6 == 0 {
            two.push(wait(fleet, 200_000 + at, n, "w", false));
        }
        if let Some(now) = now.filter(|_| i % 7 == 0) {
            three.extend(lock_events_at(fleet, 300_000 + at, Some(&now), None));
        }
        if i % 2 == 1 {
            three.push(wait(fleet, 300_000 + at, n, "v", true));
        }
    }
    [one, two, three]
}

/// The table at `at` from a replay of every event up to it, in time order.
async fn replayed(h: &History, fleet: &str, at: Millis) -> (Vec<LockEntry>, Vec<Waiter>) {
    let q = HistoryQuery {
        fleet: fleet.into(),
        to: Some(at),
        ..HistoryQuery::default()
    };
    let mut replay = Replay::default();
    let mut events = std::pin::pin!(h.events(&q, None));
    while let Some(ev) = events.next().await {
        replay.apply(&ev.unwrap());
    }
    (
        replay.locks.into_values().collect(),
        replay.waiters.into_iter().collect(),
    )
}

/// `table_at(at)` starts from the checkpoint `from` and equals the replay of everything.
async fn same_table(h: &History, fleet: &str, at: Millis, from: Option<Millis>) {
    let t = h.table_at(fleet, at).await.unwrap();
    assert_eq!(t.checkpoint, from, "{fleet} at {at}: the checkpoint used");
    let (locks, waiters) = replayed(h, fleet, at).await;
    assert!(
        !locks.is_empty() && !waiters.is_empty(),
        "{fleet} at {at}: a table to compare"
    );
    assert_eq!((t.locks, t.waiters), (locks, waiters), "{fleet} at {at}");
}

/// The parts of `fleet`'s checkpoint at `at`: (part, bytes), in order, and
/// the number its row names.
async fn parts(h: &History, fleet: &str, at: Millis) -> (Vec<(i64, usize)>, i64) {
    let q = h.sql("SELECT part, body FROM history_checkpoint_parts WHERE fleet = $1 AND at = $2 ORDER BY part");
    let rows = sqlx::query(&q)
        .bind(fleet)
        .bind(at)
        .fetch_all(&h.inner.pool)
        .await
        .unwrap();
    let parts = rows
        .iter()
        .map(|r| (r.get::<i64, _>("part"), r.get::<String, _>("body").len()))
        .collect();
    let q = h.sql("SELECT parts FROM history_checkpoints WHERE fleet = $1 AND at = $2");
    let named = sqlx::query(&q)
        .bind(fleet)
        .bind(at)
        .fetch_one(&h.inner.pool)
        .await
        .unwrap();
    (parts, named.get::<Option<i64>, _>("parts").unwrap())
}

/// Part size for the tests: a few locks' JSON.
const SMALL: usize = 2_000;

async fn in_parts(h: &History) {
    let [one, two, three] = rounds("f");
    h.write(one.into_iter().chain(two).collect()).await.unwrap();
    let size = h.checkpoint_in("f", 250_000, SMALL).await.unwrap();
    let (t, _) = (h.table_at("f", 250_000).await.unwrap(), ());
    assert_eq!(size, t.locks.len() + t.waiters.len());
    let (written, named) = parts(h, "f", 250_000).await;
    assert!(written.len() > 5, "many parts: {written:?}");
    assert_eq!(written.len() as i64, named, "the checkpoint's row names its parts");
    let entry = serde_json::to_string(&t.locks[0]).unwrap().len();
    for (i, (part, bytes)) in written.iter().enumerate() {
        assert_eq!(*part, i as i64);
        // A part is cut once it holds `part_bytes`: at most one lock's entry
        // and its waiters past it.
        assert!(*bytes <= SMALL + 2 * entry, "part {part}: {bytes} bytes");
    }
    same_table(h, "f", 250_000, Some(250_000)).await;
    // The next from this one's parts and the third round's events only.
    h.write(three).await.unwrap();
    h.checkpoint_in("f", 350_000, SMALL).await.unwrap();
    same_table(h, "f", 350_000, Some(350_000)).await;
    same_table(h, "f", 300_030, Some(250_000)).await;
    // docs/operations.md, "Time travel": "a checkpoint that failed
    // half-written is never used, and its parts go with the retention".
    let q = h.sql(
        "INSERT INTO history_checkpoint_parts (fleet, at, run, part, body) VALUES ('f', 320000, 'dead', 0, 'not json')",
    );
    sqlx::query(&q).execute(&h.inner.pool).await.unwrap();
    same_table(h, "f", 330_000, Some(250_000)).await;
    // Retention at the second (whose checkpoint is there: the retention's
    // own, at the same instant, is dropped): the first and its parts go, the
    // second's stay, and the table at the cut reads the same from them alone.
    let before = h.table_at("f", 350_000).await.unwrap();
    let kept = Retention {
        max_age: Duration::from_millis(10),
        max_events: u64::MAX / 2,
    };
    h.retain(&kept, 350_011).await.unwrap();
    assert!(parts(h, "f", 350_000).await.0.len() > 5);
    let q = h.sql("SELECT COUNT(*) AS n FROM history_checkpoint_parts WHERE fleet = 'f' AND at < 350000");
    let n: i64 = sqlx::query(&q).fetch_one(&h.inner.pool).await.unwrap().get("n");
    assert_eq!(n, 0, "the parts of the checkpoints removed go with them");
    let after = h.table_at("f", 350_000).await.unwrap();
    assert_eq!(after.replayed, 0, "no event left before the cut");
    assert_eq!((after.locks, after.waiters), (before.locks, before.waiters));
}

/// docs/operations.md, "Time travel": "A checkpoint written whole by an
/// earlier version (before the history's table version 4) is still read,
/// whole, and the next one is in parts".
async fn whole(h: &History) {
    let [one, two, three] = rounds("g");
    h.write(one).await.unwrap();
    let mut t = h.table_at("g", 170_000).await.unwrap();
    // Stored as it was, and not in name order: it is sorted when read.
    t.locks.reverse();
    let q = h.sql("INSERT INTO history_checkpoints (fleet, at, body) VALUES ($1, $2, $3)");
    let body = serde_json::to_string(&t).unwrap();
    sqlx::query(&q)
        .bind("g")
        .bind(170_000i64)
        .bind(body)
        .execute(&h.inner.pool)
        .await
        .unwrap();
    h.write(two).await.unwrap();
    // The first round (at 100 s) is older than the replay's overlap: only the
    // whole checkpoint holds it.
    same_table(h, "g", 250_000, Some(170_000)).await;
    h.checkpoint_in("g", 260_000, SMALL).await.unwrap();
    h.write(three).await.unwrap();
    same_table(h, "g", 300_100, Some(260_000)).await;
}

#[tokio::test]
async fn sqlite_checkpoints_in_parts() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("history.db").display());
    let h = History::open(&url, None).await.unwrap();
    in_parts(&h).await;
    whole(&h).await;
}

#[tokio::test]
async fn postgres_checkpoints_in_parts() {
    use sqlx::Connection;
    sqlx::any::install_default_drivers();
    let pg = PgServer::start().await;
    // A collation that is not bytewise (ICU's root: "a" before "A", "_"
    // before "-"), as most databases have: the merge reads the events in
    // bytewise order all the same.
    let mut admin = sqlx::AnyConnection::connect(&pg.url()).await.unwrap();
    sqlx::query("CREATE DATABASE icu TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'und' ENCODING 'UTF8'")
        .execute(&mut admin)
        .await
        .unwrap();
    let h = History::open(&pg.url().replace("/postgres", "/icu"), None)
        .await
        .unwrap();
    in_parts(&h).await;
    whole(&h).await;
}
