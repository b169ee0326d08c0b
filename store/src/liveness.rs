//! How an observer notices a store that went away without saying so: a store
//! killed at once (PostgreSQL's immediate stop), restarted, or behind a link
//! that drops packets (no reset, nothing more arrives). Waiting for its next
//! event can take as long as the store is quiet, and a client's own reconnect
//! may wait for its pool's timeout; so every observer runs a bounded liveness
//! probe beside its session ([`while_alive`]): one trivial request every
//! [`PROBE_EVERY`], each answered within [`PROBE_TIMEOUT`], or the session
//! ends with that failure and the store is reported unreachable
//! (`docs/operations.md`, "When a store goes away"). The observer then
//! reconnects by itself, with its backoff, and reports it live again.
//!
//! A busy store is not a dead one: a probe's answer can wait behind a large
//! snapshot (etcd's probe shares the observer's connection) or a loaded host.
//! So the session reports what it receives ([`Heartbeat::saw`]: a snapshot
//! page, a watch event or progress notification, a poll's answer), and a probe
//! fails by timeout only once [`PROBE_TIMEOUT`] has passed with neither its
//! answer nor anything else from the store since it was sent. A silent store is
//! still reported within `PROBE_EVERY + PROBE_TIMEOUT` of its last word. What
//! counts is a whole response or message: one that takes longer than
//! `PROBE_TIMEOUT` to arrive, with nothing else arriving, still reads as silence.
//!
//! Each store kind says what its probe is ([`Probe`]): etcd a linearizable
//! count of one key on the observer's own connection (a member cut off from
//! its quorum cannot answer it), PostgreSQL `SELECT 1` on a connection of the
//! probe's own (a server at `max_connections` refusing it is alive), SQLite
//! that the file at the configured path is still the one the observer opened,
//! ScyllaDB a read of `system_schema` at consistency ONE.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;

use crate::StoreError;

/// How often an observer asks its store whether it is there: a store that goes
/// away is noticed within `PROBE_EVERY + PROBE_TIMEOUT` (2.5 s), under the 3 s
/// the page promises, at one trivial request a second per dashboard.
pub const PROBE_EVERY: Duration = Duration::from_secs(1);

/// How long a probe may take: a healthy store answers it in milliseconds; 1.5 s
/// leaves room for a loaded store or host without calling it down.
pub const PROBE_TIMEOUT: Duration = Duration::from_millis(1500);

/// One store kind's liveness check.
pub(crate) trait Probe: Send {
    /// `Ok` if the store answered as it should.
    fn probe(&mut self) -> BoxFuture<'_, Result<(), StoreError>>;
}

/// When the session last received something from its store: a sign of life
/// as good as a probe's answer. Shared by reference between the session (which
/// marks it) and [`while_alive`] (which reads it); marking is one atomic store.
#[derive(Debug)]
pub(crate) struct Heartbeat {
    /// The clock's origin (tokio's, so paused-time tests see the same time).
    origin: tokio::time::Instant,
    /// Nanoseconds from `origin` to the last mark.
    last: AtomicU64,
}

impl Default for Heartbeat {
    fn default() -> Heartbeat {
        Heartbeat {
            origin: tokio::time::Instant::now(),
            last: AtomicU64::new(0),
        }
    }
}

impl Heartbeat {
    /// The session received something from its store just now.
    pub(crate) fn saw(&self) {
        let nanos = u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.last.fetch_max(nanos, Ordering::Relaxed);
    }

    /// When the session last received something (the origin if never).
    fn last(&self) -> tokio::time::Instant {
        self.origin + Duration::from_nanos(self.last.load(Ordering::Relaxed))
    }
}

/// Probes every [`PROBE_EVERY`]; returns the first failure. A probe not answered
/// fails ([`StoreError::Timeout`]) once [`PROBE_TIMEOUT`] has passed since the
/// later of its sending and the session's last receipt ([`Heartbeat`]).
async fn until_dead(probe: &mut dyn Probe, beat: &Heartbeat) -> StoreError {
    loop {
        tokio::time::sleep(PROBE_EVERY).await;
        let sent = tokio::time::Instant::now();
        let mut answer = probe.probe();
        let answered = loop {
            let deadline = sent.max(beat.last()) + PROBE_TIMEOUT;
            // `timeout_at` polls the answer before the clock: an answer already
            // delivered when the deadline is seen still counts.
            match tokio::time::timeout_at(deadline, &mut answer).await {
                Ok(r) => break r,
                // The session heard from the store meanwhile: wait on.
                Err(_) if sent.max(beat.last()) + PROBE_TIMEOUT > deadline => continue,
                Err(_) => return StoreError::Timeout(PROBE_TIMEOUT),
            }
        };
        if let Err(e) = answered {
            return e;
        }
    }
}

/// Runs `session` while `probe` says the store is there: the session's own
/// result, or the probe's failure (the session is then dropped where it
/// waits; the caller reconnects). The session marks `beat` whenever it
/// receives something from the store, so a probe stuck behind its data is not
/// taken for a dead store.
pub(crate) async fn while_alive<T>(
    session: impl Future<Output = Result<T, StoreError>>,
    probe: &mut dyn Probe,
    beat: &Heartbeat,
) -> Result<T, StoreError> {
    tokio::select! {
        biased;
        r = session => r,
        e = until_dead(probe, beat) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fails(usize);

    impl Probe for Fails {
        fn probe(&mut self) -> BoxFuture<'_, Result<(), StoreError>> {
            Box::pin(async move {
                self.0 = self.0.saturating_sub(1);
                match self.0 {
                    0 => Err(StoreError::unreachable_msg("gone")),
                    _ => Ok(()),
                }
            })
        }
    }

    struct Hangs;

    impl Probe for Hangs {
        fn probe(&mut self) -> BoxFuture<'_, Result<(), StoreError>> {
            Box::pin(std::future::pending())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_or_unanswered_probe_ends_the_session_in_bounded_time() {
        let beat = &Heartbeat::default();
        let start = tokio::time::Instant::now();
        let r = while_alive(std::future::pending::<Result<(), StoreError>>(), &mut Fails(3), beat).await;
        assert!(matches!(r, Err(StoreError::Unreachable { .. })), "{r:?}");
        assert_eq!(start.elapsed(), PROBE_EVERY * 3);
        let start = tokio::time::Instant::now();
        let r = while_alive(std::future::pending::<Result<(), StoreError>>(), &mut Hangs, beat).await;
        assert!(matches!(r, Err(StoreError::Timeout(t)) if t == PROBE_TIMEOUT), "{r:?}");
        assert_eq!(start.elapsed(), PROBE_EVERY + PROBE_TIMEOUT);
        assert!(PROBE_EVERY + PROBE_TIMEOUT < Duration::from_secs(3), "the page's 3 s");
        // The session's own end wins.
        assert!(while_alive(async { Ok(7) }, &mut Hangs, beat).await.is_ok());
    }

    /// A session that receives something from its store every `every`, `times`
    /// times, then hears nothing more (a link that went silent).
    async fn delivers(beat: &Heartbeat, every: Duration, times: u32) -> Result<(), StoreError> {
        for _ in 0..times {
            tokio::time::sleep(every).await;
            beat.saw();
        }
        std::future::pending().await
    }

    #[tokio::test(start_paused = true)]
    async fn a_store_delivering_data_is_alive_though_its_probe_waits_behind_it() {
        // The module's rule: "a probe fails by timeout only once PROBE_TIMEOUT
        // has passed with neither its answer nor anything else from the store
        // since it was sent" -- a probe queued behind a large snapshot (etcd's
        // shares the observer's connection) is no sign of a dead store.
        let beat = &Heartbeat::default();
        let start = tokio::time::Instant::now();
        // Snapshot pages every 1.2 s (each longer apart than a probe may take)
        // for a minute, while no probe is ever answered.
        let every = Duration::from_millis(1200);
        let r = while_alive(delivers(beat, every, 50), &mut Hangs, beat).await;
        assert!(matches!(r, Err(StoreError::Timeout(_))), "{r:?}");
        assert_eq!(
            start.elapsed(),
            every * 50 + PROBE_TIMEOUT,
            "alive while it delivered; called down one PROBE_TIMEOUT after its last word"
        );

        // A session that delivers and then finishes is never cut short.
        let beat = &Heartbeat::default();
        let done = async {
            for _ in 0..20 {
                tokio::time::sleep(Duration::from_millis(1400)).await;
                beat.saw();
            }
            Ok("snapshot sent")
        };
        assert_eq!(while_alive(done, &mut Hangs, beat).await.unwrap(), "snapshot sent");

        // A store that goes silent mid-snapshot, just after a probe was sent, is
        // still reported within the page's 3 s of its last word.
        let beat = &Heartbeat::default();
        let start = tokio::time::Instant::now();
        let last_word = PROBE_EVERY + Duration::from_millis(1);
        let r = while_alive(delivers(beat, last_word, 1), &mut Hangs, beat).await;
        assert!(matches!(r, Err(StoreError::Timeout(_))), "{r:?}");
        assert_eq!(start.elapsed() - last_word, PROBE_TIMEOUT);
        assert!(start.elapsed() - last_word < Duration::from_secs(3), "the page's 3 s");
    }
}
