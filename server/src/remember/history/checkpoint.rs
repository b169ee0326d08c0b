//! Checkpoints: a fleet's table at an instant, stored so that time travel
//! replays only the events after it ([`History::table_at`]).
//!
//! A checkpoint is written and read in parts: rows of
//! `history_checkpoint_parts`, each at most [`PART_BYTES`] of JSON (plus its
//! last lock's), in lock-name order, and a row in `history_checkpoints`,
//! written last, naming them. Taking one holds a part, not the fleet: the new
//! table is the previous checkpoint merged, lock by lock, with the events
//! since it read in lock-name order (each lock's events only ever change that
//! lock's entry and waiters, so a lock at a time gives the table a replay of
//! every event in time order gives). A checkpoint written before version 4 of
//! the tables is one body: read whole (once: the next is in parts).

use std::collections::VecDeque;

use futures::{Stream, StreamExt};
use lockscope_model::fleet::{LockEntry, Waiter};
use lockscope_model::history::{HistoryEvent, HistoryQuery, Replay, TableAt};
use lockscope_model::time::Millis;
use lockscope_store::sql::Dialect;
use serde::{Deserialize, Serialize};
use sqlx::Row;

use super::{sql, History, HistoryError, REPLAY_OVERLAP_MS};

/// The JSON a checkpoint's part holds, at most, plus its last lock's (a lock
/// record is at most 256 KiB): what taking a checkpoint holds of the table at
/// once, however large the fleet (a million locks are ~500 MB of JSON).
pub const PART_BYTES: usize = 1 << 20;

/// One part of a checkpoint: the locks and waiters of a range of lock names.
#[derive(Default, Deserialize, Serialize)]
struct Part {
    locks: Vec<LockEntry>,
    waiters: Vec<Waiter>,
}

/// A checkpoint's row in `history_checkpoints`.
pub(super) struct Stored {
    pub at: Millis,
    body: Body,
}

enum Body {
    /// Written before version 4: the whole table (`None` once read).
    Whole(Option<String>),
    /// `parts` rows of `history_checkpoint_parts` written by `run`.
    Parts { run: String, parts: i64 },
}

impl History {
    /// The newest checkpoint of `fleet` at or before `at`.
    pub(super) async fn stored_before(&self, fleet: &str, at: Millis) -> Result<Option<Stored>, HistoryError> {
        let what = "reading a checkpoint";
        let q = self.sql(
            "SELECT at, body, run, parts FROM history_checkpoints WHERE fleet = $1 AND at <= $2 ORDER BY at DESC LIMIT 1",
        );
        let row = sqlx::query(&q)
            .bind(fleet)
            .bind(at)
            .fetch_optional(&self.inner.pool)
            .await
            .map_err(|e| self.error(what, e))?;
        let Some(row) = row else { return Ok(None) };
        let read = || -> Result<Stored, sqlx::Error> {
            let run: Option<String> = row.try_get("run")?;
            let body = match run {
                Some(run) => Body::Parts {
                    run,
                    parts: row.try_get::<Option<i64>, _>("parts")?.unwrap_or(0),
                },
                None => Body::Whole(Some(row.try_get("body")?)),
            };
            Ok(Stored {
                at: row.try_get("at")?,
                body,
            })
        };
        read().map(Some).map_err(|e| self.error(what, e))
    }

    /// Fills `replay` with the table of checkpoint `stored`, a part at a time.
    pub(super) async fn load(&self, fleet: &str, stored: Stored, replay: &mut Replay) -> Result<(), HistoryError> {
        let mut parts = Parts::new(self, fleet, stored);
        while parts.next_part().await? {
            replay.locks.extend(parts.locks.drain(..).map(|e| (e.name.clone(), e)));
            replay.waiters.extend(parts.waiters.drain(..));
        }
        Ok(())
    }

    /// Stores `fleet`'s table at `at` as a checkpoint (computed from history),
    /// in parts of at most [`PART_BYTES`]: the number of locks and waiters in it.
    pub async fn checkpoint(&self, fleet: &str, at: Millis) -> Result<usize, HistoryError> {
        self.checkpoint_in(fleet, at, PART_BYTES).await
    }

    /// [`History::checkpoint`] in parts of at most `part_bytes`.
    pub(super) async fn checkpoint_in(
        &self,
        fleet: &str,
        at: Millis,
        part_bytes: usize,
    ) -> Result<usize, HistoryError> {
        self.check_floor(fleet, at).await?;
        let run = format!("{:016x}", fastrand::u64(..));
        let taken = self.merge(fleet, at, &run, part_bytes).await;
        if !matches!(taken, Ok(Some(_))) {
            // Failed, or another took a checkpoint at the same instant first:
            // this run's parts go (best effort: the retention removes them later).
            let q = self.sql("DELETE FROM history_checkpoint_parts WHERE fleet = $1 AND at = $2 AND run = $3");
            let _ = sqlx::query(&q)
                .bind(fleet)
                .bind(at)
                .bind(&run)
                .execute(&self.inner.pool)
                .await;
        }
        Ok(taken?.unwrap_or(0))
    }

    /// Writes the checkpoint of `fleet` at `at` as `run`'s parts, then its row
    /// (`None`: a checkpoint at `at` was there already).
    async fn merge(
        &self,
        fleet: &str,
        at: Millis,
        run: &str,
        part_bytes: usize,
    ) -> Result<Option<usize>, HistoryError> {
        let before = self.stored_before(fleet, at).await?;
        let q = HistoryQuery {
            fleet: fleet.to_string(),
            from: before.as_ref().map(|c| c.at - REPLAY_OVERLAP_MS),
            to: Some(at),
            ..HistoryQuery::default()
        };
        let mut previous = match before {
            Some(stored) => Some(Parts::new(self, fleet, stored)),
            None => None,
        };
        let mut events = std::pin::pin!(self.events_by_lock(&q));
        let mut next = events.next().await.transpose()?;
        let mut out = Writer::new(self, fleet, at, run);

        loop {
            let old = match &mut previous {
                Some(p) => p.head().await?,
                None => None,
            };
            let new = next.as_ref().and_then(|e| e.lock.clone());
            let Some(name) = [old, new].into_iter().flatten().min() else {
                break;
            };
            let mut replay = Replay::default();
            if let Some(p) = &mut previous {
                p.take(&name, &mut replay);
            }
            while let Some(ev) = next.take_if(|e| e.lock.as_deref() == Some(name.as_str())) {
                replay.apply(&ev);
                next = events.next().await.transpose()?;
            }
            if next.as_ref().is_some_and(|e| e.lock.as_deref() < Some(name.as_str())) {
                return Err(self.error(
                    "writing a checkpoint",
                    sqlx::Error::Protocol("the events did not come in lock-name order".into()),
                ));
            }
            for e in replay.locks.values() {
                out.lock(e);
            }
            for w in &replay.waiters {
                out.waiter(w);
            }
            if out.bytes() >= part_bytes {
                out.write_part().await?;
            }
        }
        out.finish().await
    }

    /// The events (with a lock) matching `q`, in lock-name order (bytewise,
    /// as Rust orders strings), then time and insertion, streamed.
    fn events_by_lock(
        &self,
        q: &HistoryQuery,
    ) -> impl Stream<Item = Result<HistoryEvent, HistoryError>> + Send + 'static {
        let (clause, binds) = sql::filter(q);
        let order = match self.inner.dialect {
            // BINARY: bytewise, the index's own order.
            Dialect::Sqlite => "lock, at, seq",
            // Not the database's collation, which is not bytewise.
            Dialect::Postgres => "lock COLLATE \"C\", at, seq",
        };
        self.event_rows(&format!("WHERE {clause} AND lock IS NOT NULL ORDER BY {order}"), binds)
    }
}

/// A stored checkpoint read a part at a time, in lock-name order.
struct Parts<'h> {
    history: &'h History,
    fleet: String,
    stored: Stored,
    /// The next part to read.
    next: i64,
    locks: VecDeque<LockEntry>,
    waiters: VecDeque<Waiter>,
}

impl<'h> Parts<'h> {
    fn new(history: &'h History, fleet: &str, stored: Stored) -> Parts<'h> {
        Parts {
            history,
            fleet: fleet.to_string(),
            stored,
            next: 0,
            locks: VecDeque::new(),
            waiters: VecDeque::new(),
        }
    }

    /// Reads the next part (false: there is none).
    async fn next_part(&mut self) -> Result<bool, HistoryError> {
        let what = "reading a checkpoint";
        let decode = |e: serde_json::Error| self.history.error(what, sqlx::Error::Decode(e.into()));
        let part: Part = match &mut self.stored.body {
            Body::Whole(body) => {
                let Some(body) = body.take() else { return Ok(false) };
                let t: TableAt = serde_json::from_str(&body).map_err(decode)?;
                let mut part = Part {
                    locks: t.locks,
                    waiters: t.waiters,
                };
                part.locks.sort_by(|a, b| a.name.cmp(&b.name));
                part.waiters.sort();
                part
            }
            Body::Parts { run, parts } => {
                if self.next >= *parts {
                    return Ok(false);
                }
                let q = self.history.sql(
                    "SELECT body FROM history_checkpoint_parts WHERE fleet = $1 AND at = $2 AND run = $3 AND part = $4",
                );
                let row = sqlx::query(&q)
                    .bind(&self.fleet)
                    .bind(self.stored.at)
                    .bind(run.as_str())
                    .bind(self.next)
                    .fetch_optional(&self.history.inner.pool)
                    .await
                    .map_err(|e| self.history.error(what, e))?;
                let Some(row) = row else {
                    let missing = format!(
                        "part {} of {parts} of the checkpoint at {} is missing",
                        self.next, self.stored.at
                    );
                    return Err(self.history.error(what, sqlx::Error::Protocol(missing)));
                };
                let body: String = row.try_get("body").map_err(|e| self.history.error(what, e))?;
                serde_json::from_str(&body).map_err(decode)?
            }
        };
        self.next += 1;
        self.locks = part.locks.into();
        self.waiters = part.waiters.into();
        Ok(true)
    }

    /// The first lock name it still holds something for.
    async fn head(&mut self) -> Result<Option<String>, HistoryError> {
        while self.locks.is_empty() && self.waiters.is_empty() {
            if !self.next_part().await? {
                return Ok(None);
            }
        }
        let lock = self.locks.front().map(|e| e.name.as_str());
        let waiter = self.waiters.front().map(|w| w.lock.as_str());
        Ok([lock, waiter].into_iter().flatten().min().map(str::to_string))
    }

    /// Moves what it holds for `name` (at its head) into `replay`.
    fn take(&mut self, name: &str, replay: &mut Replay) {
        while let Some(e) = self.locks.pop_front_if(|e| e.name == name) {
            replay.locks.insert(e.name.clone(), e);
        }
        while let Some(w) = self.waiters.pop_front_if(|w| w.lock == name) {
            replay.waiters.insert(w);
        }
    }
}

/// A checkpoint being written: the part being filled, as JSON.
struct Writer<'h> {
    history: &'h History,
    fleet: &'h str,
    at: Millis,
    run: &'h str,
    /// Parts written so far.
    parts: i64,
    locks: String,
    waiters: String,
    /// Locks and waiters in the checkpoint.
    size: usize,
}

impl<'h> Writer<'h> {
    fn new(history: &'h History, fleet: &'h str, at: Millis, run: &'h str) -> Writer<'h> {
        Writer {
            history,
            fleet,
            at,
            run,
            parts: 0,
            locks: String::new(),
            waiters: String::new(),
            size: 0,
        }
    }

    fn lock(&mut self, e: &LockEntry) {
        push_json(&mut self.locks, e);
        self.size += 1;
    }

    fn waiter(&mut self, w: &Waiter) {
        push_json(&mut self.waiters, w);
        self.size += 1;
    }

    /// The JSON of the part being filled.
    fn bytes(&self) -> usize {
        self.locks.len() + self.waiters.len()
    }

    async fn write_part(&mut self) -> Result<(), HistoryError> {
        let body = format!(r#"{{"locks":[{}],"waiters":[{}]}}"#, self.locks, self.waiters);
        (self.locks.clear(), self.waiters.clear());
        let q = self
            .history
            .sql("INSERT INTO history_checkpoint_parts (fleet, at, run, part, body) VALUES ($1, $2, $3, $4, $5)");
        sqlx::query(&q)
            .bind(self.fleet)
            .bind(self.at)
            .bind(self.run)
            .bind(self.parts)
            .bind(body)
            .execute(&self.history.inner.pool)
            .await
            .map_err(|e| self.history.error("writing a checkpoint", e))?;
        self.parts += 1;
        Ok(())
    }

    /// Writes the last part and the checkpoint's row, which makes it one
    /// (`None`: a checkpoint at that instant was there already).
    async fn finish(mut self) -> Result<Option<usize>, HistoryError> {
        if self.bytes() > 0 {
            self.write_part().await?;
        }
        let q = self.history.sql(
            "INSERT INTO history_checkpoints (fleet, at, body, run, parts) VALUES ($1, $2, '', $3, $4) \
             ON CONFLICT (fleet, at) DO NOTHING",
        );
        let added = sqlx::query(&q)
            .bind(self.fleet)
            .bind(self.at)
            .bind(self.run)
            .bind(self.parts)
            .execute(&self.history.inner.pool)
            .await
            .map_err(|e| self.history.error("writing a checkpoint", e))?
            .rows_affected();
        Ok((added > 0).then_some(self.size))
    }
}

/// Appends `value`'s JSON to the array's items in `out`.
fn push_json(out: &mut String, value: &impl Serialize) {
    if !out.is_empty() {
        out.push(',');
    }
    out.push_str(&serde_json::to_string(value).expect("locks and waiters serialise"));
}
