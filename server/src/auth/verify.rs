//! Verifying API tokens ([`Auth::verify_token`]): the cache of tokens that
//! verified, the limit on failures per source ([`limit`]), and the password
//! hashing itself ([`Verifier`]).
//!
//! Verifying a token against its Argon2 hash (deliberately slow: ~60 ms and
//! 19 MiB each), on at most `concurrency` dedicated threads: whatever the flood,
//! the hashing takes that many cores and that many times 19 MiB (spread over
//! the async runtime's blocking pool, each thread's allocator would keep its
//! own 19 MiB). Verifications beyond that wait their turn, at most `queue` of
//! them (`[limits] auth_verify_queue`); one more is refused at once
//! ([`TokenRefused::Busy`], `503`).
//!
//! A turn belongs to its job, not to the request that asked: it is given back
//! when the thread is done with the job, after the job's outcome (a failure
//! counted for its source) is recorded, whether or not the request still
//! waits for the answer. A request dropped while its job is queued (the
//! client closed the connection) cannot free its turn early, nor dodge the
//! count: the thread skips hashing for it, and counts it failed.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock};

use std::net::IpAddr;
use std::time::Duration;

use argon2::password_hash::PasswordHash;
use argon2::{Algorithm, Argon2, Block, Params, Version};
use sha2::{Digest, Sha256};
use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore, SemaphorePermit};

use super::limit::{self, Failures};
use super::{constant_time_eq, Auth};
use crate::settings::{Limits, TokenFile};

/// What a client refused for a full queue is told to wait, in seconds.
pub const BUSY_RETRY_SECS: u64 = 1;

/// One verification: the PHC hash, the token, where the answer goes, what to
/// do with the outcome (on the verifying thread, whether or not anyone still
/// waits), and the turn it holds until it is done.
struct Job {
    hash: String,
    token: String,
    answer: oneshot::Sender<bool>,
    outcome: Box<dyn FnOnce(bool) + Send>,
    turn: Turn,
}

/// The verifying threads (started at the first verification) and their numbers.
pub struct Verifier {
    concurrency: usize,
    queue: usize,
    /// Turns: at most `concurrency` jobs are out (queued for or on a thread).
    permits: Arc<Semaphore>,
    /// Places to wait for a turn: at most `queue`.
    places: Semaphore,
    jobs: OnceLock<Mutex<mpsc::Sender<Job>>>,
    counts: Arc<Counts>,
}

/// A turn of [`Verifier::run`]: given back when its job is done (or when
/// dropped unused).
pub struct Turn {
    _permit: Option<OwnedSemaphorePermit>,
}

/// A place in the queue for a turn ([`Verifier::place`]).
pub struct Place<'a> {
    _permit: SemaphorePermit<'a>,
}

/// How many verifications ran, were skipped, were refused, and how many ran at once at most.
#[derive(Debug, Default)]
pub struct Counts {
    pub runs: AtomicU64,
    /// Jobs whose request was gone before their turn came: not hashed, counted failed.
    pub skipped: AtomicU64,
    /// Verifications refused because `queue` already waited.
    pub refused: AtomicU64,
    running: AtomicUsize,
    pub most_at_once: AtomicUsize,
}

impl Verifier {
    pub fn new(concurrency: usize, queue: usize) -> Verifier {
        let (concurrency, queue) = (concurrency.max(1), queue.max(1));
        Verifier {
            concurrency,
            queue,
            permits: Arc::new(Semaphore::new(concurrency)),
            places: Semaphore::new(queue),
            jobs: OnceLock::new(),
            counts: Arc::default(),
        }
    }

    /// A place to wait for a turn, or `None` (counted) when `queue` already wait.
    pub fn place(&self) -> Option<Place<'_>> {
        match self.places.try_acquire() {
            Ok(permit) => Some(Place { _permit: permit }),
            Err(_) => {
                self.counts.refused.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// A turn to verify: at most `concurrency` are out at once. The place
    /// is given back once the turn is had.
    pub async fn turn(&self, place: Place<'_>) -> Turn {
        let turn = Turn {
            _permit: self.permits.clone().acquire_owned().await.ok(),
        };
        drop(place);
        turn
    }

    /// Whether `token` is the one `hash` was made from (`false` for a hash
    /// that is not an Argon2 PHC string): one Argon2 run, in `turn`.
    /// `outcome` gets the answer on the verifying thread before the turn is
    /// given back, even when this future is dropped first (then the job is
    /// not hashed and its outcome is `false`).
    pub async fn run(&self, turn: Turn, hash: &str, token: &str, outcome: impl FnOnce(bool) + Send + 'static) -> bool {
        let (tx, rx) = oneshot::channel();
        let job = Job {
            hash: hash.to_string(),
            token: token.to_string(),
            answer: tx,
            outcome: Box::new(outcome),
            turn,
        };
        if let Err(mpsc::SendError(job)) = self.sender().lock().unwrap().send(job) {
            tracing::error!("the token verifying threads are gone");
            (job.outcome)(false);
            return false;
        }
        rx.await.unwrap_or(false)
    }

    /// Argon2 verifications run so far.
    pub fn runs(&self) -> u64 {
        self.counts.runs.load(Ordering::Relaxed)
    }

    /// Verifications refused so far for a full queue.
    pub fn refused(&self) -> u64 {
        self.counts.refused.load(Ordering::Relaxed)
    }

    /// The turns out now (jobs queued or running), and the requests waiting for one.
    #[cfg(test)]
    pub fn out_and_waiting(&self) -> (usize, usize) {
        (
            self.concurrency - self.permits.available_permits(),
            self.queue - self.places.available_permits(),
        )
    }

    /// The most verifications that ran at once.
    #[cfg(test)]
    pub fn most_at_once(&self) -> usize {
        self.counts.most_at_once.load(Ordering::Relaxed)
    }

    fn sender(&self) -> &Mutex<mpsc::Sender<Job>> {
        self.jobs.get_or_init(|| {
            let (tx, rx) = mpsc::channel::<Job>();
            let rx = Arc::new(Mutex::new(rx));
            for i in 0..self.concurrency {
                let (rx, counts) = (rx.clone(), self.counts.clone());
                let spawned = std::thread::Builder::new()
                    .name(format!("lockscope-verify-{i}"))
                    .spawn(move || run(&rx, &counts));
                if let Err(e) = spawned {
                    tracing::error!(error = %e, "starting a token verifying thread");
                }
            }
            Mutex::new(tx)
        })
    }
}

/// A verifying thread: until the [`Verifier`] is dropped.
fn run(jobs: &Mutex<mpsc::Receiver<Job>>, counts: &Counts) {
    // The hash's working memory (19 MiB with the default parameters), taken
    // once and kept: taken and given back per run, the allocator would keep
    // some of it anyway, and more with every run that overlaps another.
    let mut memory: Vec<Block> = Vec::new();
    loop {
        let job = jobs.lock().unwrap().recv();
        let Ok(job) = job else { return };
        // Nobody waits for it any more: no hashing, but its outcome is still
        // a failure, so dropping requests cannot dodge the count.
        let ok = if job.answer.is_closed() {
            counts.skipped.fetch_add(1, Ordering::Relaxed);
            false
        } else {
            counts.runs.fetch_add(1, Ordering::Relaxed);
            let now = counts.running.fetch_add(1, Ordering::SeqCst) + 1;
            counts.most_at_once.fetch_max(now, Ordering::SeqCst);
            let ok = verify(&job.hash, &job.token, &mut memory);
            counts.running.fetch_sub(1, Ordering::SeqCst);
            ok
        };
        (job.outcome)(ok);
        let _ = job.answer.send(ok);
        // Only now is the turn given back.
        drop(job.turn);
    }
}

/// Whether `token` hashes to `phc` (an Argon2 PHC string, with its own
/// algorithm, version and parameters), in `memory`: what `verify_password`
/// does, without allocating the working memory each time.
fn verify(phc: &str, token: &str, memory: &mut Vec<Block>) -> bool {
    let Ok(hash) = PasswordHash::new(phc) else { return false };
    let (Some(salt), Some(expected)) = (hash.salt, hash.hash) else {
        return false;
    };
    let version = hash.version.map_or(Ok(Version::default()), Version::try_from);
    let (Ok(algorithm), Ok(version), Ok(params)) =
        (Algorithm::try_from(hash.algorithm), version, Params::try_from(&hash))
    else {
        return false;
    };
    let mut salt_bytes = [0u8; 64];
    let Ok(salt) = salt.decode_b64(&mut salt_bytes) else {
        return false;
    };
    let blocks = params.block_count();
    if memory.len() < blocks {
        memory.resize(blocks, Block::default());
    }
    let mut out = vec![0u8; expected.len()];
    Argon2::new(algorithm, version, params)
        .hash_password_into_with_memory(token.as_bytes(), salt, &mut out, &mut memory[..blocks])
        .is_ok()
        && constant_time_eq(&out, expected.as_bytes())
}

impl Auth {
    /// The same, with these limits on failed authentication and hashing.
    pub fn with_limits(mut self, limits: &Limits) -> Auth {
        self.verifier = Verifier::new(limits.auth_verify_concurrency, limits.auth_verify_queue);
        self.failures = failures(limits);
        self.proxies = limits.proxies.clone();
        self
    }

    /// The address a request comes from, as the limits count it: the peer's,
    /// or behind a proxy of `[limits] proxies` the client it forwarded
    /// ([`limit::client`]).
    pub fn client(&self, headers: &axum::http::HeaderMap, peer: Option<IpAddr>) -> Option<IpAddr> {
        limit::client(headers, peer, &self.proxies)
    }

    /// Password hash verifications run so far (each one Argon2 run).
    pub fn verifications(&self) -> u64 {
        self.verifier.runs()
    }

    /// Failed token checks a source may make in a minute.
    pub fn failures_per_minute(&self) -> u32 {
        self.failures.per_minute()
    }

    /// Counts a request answered `429` for its source's failures.
    pub fn count_rate_limited(&self) {
        self.failures.count_limited();
    }

    /// For `/metrics`: failed token checks, requests answered `429`, Argon2
    /// verifications run, checks refused for a full queue (`503`), so far.
    pub fn counts(&self) -> (u64, u64, u64, u64) {
        let (failed, limited) = self.failures.totals();
        (failed, limited, self.verifier.runs(), self.verifier.refused())
    }

    /// For `/metrics`: the limits in force, as `([limits] key, value)`.
    pub fn limits(&self) -> [(&'static str, u64); 4] {
        [
            ("auth_failures_per_minute", u64::from(self.failures.per_minute())),
            ("auth_sources", self.failures.capacity() as u64),
            ("auth_verify_concurrency", self.verifier.concurrency as u64),
            ("auth_verify_queue", self.verifier.queue as u64),
        ]
    }

    /// When `client`'s source has used up its failed token checks for this
    /// minute: how long until it may try again (`429` with `Retry-After`).
    pub fn retry_after(&self, client: Option<IpAddr>) -> Option<Duration> {
        self.failures.blocked(limit::source(client))
    }

    /// The configured token `token` is, if it is one, sent by `client`
    /// ([`Auth::client`]).
    ///
    /// Every token checked costs exactly one Argon2 verification, whether its
    /// id is configured or not (an unknown id is checked against a configured
    /// token's hash, which it cannot match: that hash is of a token with
    /// another id), so the answer's timing does not tell which ids exist. A
    /// token that verified before is recognised by its SHA-256 without one.
    /// A source over its failures for the minute ([`Auth::retry_after`]) gets
    /// [`TokenRefused::TooMany`] without any hashing; a check that finds
    /// `[limits] auth_verify_queue` others waiting for a hash,
    /// [`TokenRefused::Busy`]. A failure is counted when the hash is done
    /// (or skipped), even if this future was dropped meanwhile.
    pub(super) async fn verify_token(&self, token: &str, client: Option<IpAddr>) -> Result<&TokenFile, TokenRefused> {
        let config = self.config.as_ref().ok_or(TokenRefused::Invalid)?;
        let id = token.split_once('.').map_or("", |(id, _)| id);
        let entry = config.tokens.iter().find(|t| t.id == id);
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(entry) = entry {
            let seen = self.verified.lock().unwrap().get(id).copied();
            if seen.is_some_and(|d| constant_time_eq(&d, &digest)) {
                return Ok(entry);
            }
        }
        let source = limit::source(client);
        let too_many = |wait: Duration| TokenRefused::TooMany {
            per_minute: self.failures.per_minute(),
            retry_after: limit::secs(wait),
        };
        if let Some(wait) = self.failures.blocked(source) {
            return Err(too_many(wait));
        }
        // No configured token at all (a proxy-only setup): no ids to learn.
        let hash = &entry.or(config.tokens.first()).ok_or(TokenRefused::Invalid)?.hash;
        let place = self.verifier.place().ok_or(TokenRefused::Busy {
            waiting: self.verifier.queue,
            retry_after: BUSY_RETRY_SECS,
        })?;
        // Checked again once it is this one's turn (and the failure counted
        // before the turn is given back): a burst from one source waiting
        // together stops hashing when the source is over its limit.
        let turn = self.verifier.turn(place).await;
        if let Some(wait) = self.failures.blocked(source) {
            return Err(too_many(wait));
        }
        let (failures, known) = (self.failures.clone(), entry.is_some());
        let outcome = move |ok: bool| {
            if !(ok && known) {
                failures.failed(source);
            }
        };
        let ok = self.verifier.run(turn, hash, token, outcome).await && known;
        match entry.filter(|_| ok) {
            Some(entry) => {
                self.verified.lock().unwrap().insert(id.to_string(), digest);
                Ok(entry)
            }
            None => Err(TokenRefused::Invalid),
        }
    }
}

/// Why a token was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenRefused {
    #[error("the API token is not valid")]
    Invalid,
    /// The source used up its failed checks for the minute (`429`).
    #[error("too many failed token checks from this address ({per_minute} a minute): try again in {retry_after} s")]
    TooMany { per_minute: u32, retry_after: u64 },
    /// `waiting` checks already wait for a password hash (`503`).
    #[error("too many token checks are waiting ({waiting}, [limits] auth_verify_queue): try again in {retry_after} s")]
    Busy { waiting: usize, retry_after: u64 },
}

pub(super) fn failures(limits: &Limits) -> Arc<Failures> {
    Arc::new(Failures::new(limits.auth_failures_per_minute, limits.auth_sources))
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockscope_model::admin::Role;

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn verifications_run_at_most_concurrency_at_once() {
        let (token, entry) = crate::auth::new_token("a", Role::Viewer);
        let file = crate::settings::FileConfig::parse(&entry).unwrap();
        let hash = file.auth.unwrap().tokens[0].hash.clone();
        let v = Arc::new(Verifier::new(2, 8));
        let tries: Vec<_> = (0..6)
            .map(|i| {
                let (v, hash, token) = (v.clone(), hash.clone(), token.clone());
                let token = if i == 0 { token } else { format!("x{i}") };
                tokio::spawn(async move {
                    let turn = v.turn(v.place().unwrap()).await;
                    v.run(turn, &hash, &token, |_| {}).await
                })
            })
            .collect();
        let mut ok = Vec::new();
        for t in tries {
            ok.push(t.await.unwrap());
        }
        assert_eq!(ok, [true, false, false, false, false, false]);
        assert_eq!(v.runs(), 6);
        assert_eq!(v.most_at_once(), 2, "six at once were asked for, two ran at a time");
    }

    #[test]
    fn a_hash_is_checked_with_its_own_algorithm_version_and_parameters() {
        use argon2::password_hash::{PasswordHasher, SaltString};
        let salt = SaltString::encode_b64(b"0123456789abcdef").unwrap();
        let params = Params::new(64, 1, 1, Some(20)).unwrap();
        let mut memory = Vec::new();
        for (algorithm, version) in [
            (Algorithm::Argon2id, Version::V0x13),
            (Algorithm::Argon2i, Version::V0x10),
            (Algorithm::Argon2d, Version::V0x13),
        ] {
            let phc = Argon2::new(algorithm, version, params.clone())
                .hash_password(b"s3cret", &salt)
                .unwrap()
                .to_string();
            assert!(verify(&phc, "s3cret", &mut memory), "{phc}");
            assert!(!verify(&phc, "s3creT", &mut memory), "{phc}");
        }
        let (token, entry) = crate::auth::new_token("a", Role::Viewer);
        let phc = crate::settings::FileConfig::parse(&entry).unwrap().auth.unwrap().tokens[0]
            .hash
            .clone();
        assert!(verify(&phc, &token, &mut memory));
        assert_eq!(memory.len(), 19 * 1024, "the default parameters' 19 MiB, kept");
        assert!(!verify("$argon2id$v=19$m=65536,t=2,p=1$bm9zYWx0$", &token, &mut memory));
        assert!(!verify("plain", &token, &mut memory));
    }
}
