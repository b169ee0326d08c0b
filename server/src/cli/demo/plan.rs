//! The demo's pure decisions: which lock a worker takes, how long it holds it,
//! whether it stalls, hangs or dies, what it says the lock is for, and who the worker
//! process is. All functions of a seeded [`Rng`].

use std::time::Duration;

use fastrand::Rng;
use lockscope_store::client::SessionConfig;

use super::DemoConfig;

/// Readable lock names after the keyspace's prefix (with what taking them is
/// for), used first; the hot locks are the first `hot_keys` of the keyspace, so
/// they are these.
const NAMED_LOCKS: [(&str, &str); 5] = [
    ("payments/settlement-eu", "settle EU card payments"),
    ("search/reindex-catalog", "rebuild the product catalog index"),
    ("billing/invoice-run", "monthly invoice run"),
    ("reports/nightly-export", "nightly warehouse export"),
    ("billing/dunning", "send payment reminders for overdue invoices"),
];

/// Normal holds are cut at this fraction of the expected runtime: only stalling
/// workers make a lock overdue.
const NORMAL_HOLD_CAP: f64 = 0.9;
/// A stalling worker holds for this many times the expected runtime (uniform).
const STALL_FACTOR: (f64, f64) = (1.5, 3.0);
/// How long the "supervisor" takes to restart a dead worker (uniform).
pub(super) const RESTART_PAUSE: (Duration, Duration) = (Duration::from_millis(500), Duration::from_millis(1500));

/// One lock of the demo keyspace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Key {
    pub name: String,
    /// Fixed purpose of a named lock; `None` for `demo/jobs/<n>`, whose purpose
    /// depends on the service taking it.
    pub purpose: Option<String>,
    /// `n` of `demo/jobs/<n>` (0 for named locks).
    pub job: usize,
}

/// The lock names the fleet uses, each after one prefix (`demo/` by default): a
/// few readable ones, then `<prefix>jobs/<n>`. The first `hot` of them are hot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Keyspace {
    pub keys: Vec<Key>,
    pub hot: usize,
}

/// Whether every name a keyspace under `prefix` can have (the readable ones,
/// and `<prefix>jobs/<n>` for any `n` the CLI takes) is a valid lock name.
pub fn check_prefix(prefix: &str) -> Result<(), lockscope_store::StoreError> {
    let longest_job = format!("{prefix}jobs/{}", u32::MAX);
    NAMED_LOCKS
        .iter()
        .map(|(name, _)| format!("{prefix}{name}"))
        .chain([longest_job])
        .try_for_each(|name| lockscope_store::validate_name(&name))
}

impl Keyspace {
    /// `keys` names (at least 1) starting with `prefix`, the first `hot` (at
    /// most `keys`) hot.
    pub fn new(prefix: &str, keys: usize, hot: usize) -> Keyspace {
        let keys = keys.max(1);
        let named = NAMED_LOCKS.iter().take(keys).map(|(name, purpose)| Key {
            name: format!("{prefix}{name}"),
            purpose: Some((*purpose).to_string()),
            job: 0,
        });
        let jobs = (1..=keys.saturating_sub(NAMED_LOCKS.len())).map(|n| Key {
            name: format!("{prefix}jobs/{n}"),
            purpose: None,
            job: n,
        });
        Keyspace {
            keys: named.chain(jobs).collect(),
            hot: hot.min(keys),
        }
    }

    /// Index of the key for the next acquisition: a hot key (uniformly) with
    /// probability `hot_share`, else one of the others (uniformly). With no hot
    /// keys, or no others, every pick comes from the side that exists.
    pub fn pick(&self, rng: &mut Rng, hot_share: f64) -> usize {
        let cold = self.keys.len() - self.hot;
        let hot = self.hot > 0 && (cold == 0 || rng.f64() < hot_share);
        if hot {
            rng.usize(..self.hot)
        } else {
            self.hot + rng.usize(..cold)
        }
    }
}

/// How an acquisition ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Released after the hold.
    Release,
    /// Released after a hold past the expected runtime (the lock turns overdue).
    Stall,
    /// Stuck but alive: the worker ignores its lock for the hold (minutes) while
    /// its session keeps heartbeating, so the lock turns overdue with a holder
    /// that looks healthy (the case for blacklisting or force-releasing). Then it
    /// unlocks and carries on.
    Hang,
    /// The worker dies after the hold, leaving the lock held.
    Die,
}

/// What a worker will do with the next lock it takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    pub fate: Fate,
    pub hold: Duration,
}

/// Dies with probability `die_rate`, stalls with probability `stall_rate`, hangs
/// with probability `hang_rate` (each of all acquisitions), else releases
/// normally. Should the rates add up to more than 1, they are taken in that
/// order (dying first).
pub fn choose_fate(rng: &mut Rng, die_rate: f64, stall_rate: f64, hang_rate: f64) -> Fate {
    let u = rng.f64();
    if u < die_rate {
        Fate::Die
    } else if u < die_rate + stall_rate {
        Fate::Stall
    } else if u < die_rate + stall_rate + hang_rate {
        Fate::Hang
    } else {
        Fate::Release
    }
}

/// An exponentially distributed duration with the given mean, cut at `cap`.
pub fn sample_exponential(rng: &mut Rng, mean: Duration, cap: Duration) -> Duration {
    // 1 - u is in (0, 1]: the logarithm is finite.
    let x = -(1.0 - rng.f64()).ln();
    mean.mul_f64(x).min(cap)
}

/// A duration uniform in `[lo, hi)`.
pub fn sample_between(rng: &mut Rng, lo: Duration, hi: Duration) -> Duration {
    lo + hi.saturating_sub(lo).mul_f64(rng.f64())
}

/// The next acquisition's fate and hold time: normal holds (also those of dying
/// workers) are exponential around `hold_mean` but stay under the expected
/// runtime; stalls hold 1.5 to 3 times the expected runtime; hangs last a time
/// uniform in `cfg.hang`.
pub fn plan(rng: &mut Rng, cfg: &DemoConfig) -> Plan {
    let fate = choose_fate(rng, cfg.die_rate, cfg.stall_rate, cfg.hang_rate);
    let hold = match fate {
        Fate::Stall => cfg
            .expected_runtime
            .mul_f64(STALL_FACTOR.0 + (STALL_FACTOR.1 - STALL_FACTOR.0) * rng.f64()),
        Fate::Hang => sample_between(rng, *cfg.hang.start(), *cfg.hang.end()),
        Fate::Release | Fate::Die => {
            sample_exponential(rng, cfg.hold_mean, cfg.expected_runtime.mul_f64(NORMAL_HOLD_CAP))
        }
    };
    Plan { fate, hold }
}

/// Pause between two jobs of a worker: uniform up to half the mean hold time.
pub fn sample_idle(rng: &mut Rng, hold_mean: Duration) -> Duration {
    sample_between(rng, Duration::ZERO, hold_mean / 2)
}

/// Why `service` takes `key`, as a person would write it.
pub fn purpose(rng: &mut Rng, service: &str, key: &Key) -> String {
    if let Some(p) = &key.purpose {
        return p.clone();
    }
    let n = key.job;
    let templates: [String; 2] = match service {
        "billing" => [
            format!("generate invoices for customer batch {n}"),
            format!("retry failed card charges, batch {n}"),
        ],
        "search-indexer" => [
            format!("rebuild search index shard {n}"),
            format!("merge index segments of shard {n}"),
        ],
        "payments" => [
            format!("settle EU card payments, batch {n}"),
            format!("reconcile bank payouts, file {n}"),
        ],
        "reports" => [
            format!("render daily revenue report, region {n}"),
            format!("export usage report part {n}"),
        ],
        other => [format!("{other} job {n}"), format!("{other} maintenance task {n}")],
    };
    let [a, b] = templates;
    if rng.bool() {
        a
    } else {
        b
    }
}

/// Who a simulated worker process is: its own host (one per worker slot) and a
/// fresh pid per start, so that a dead worker's locks name a process that is
/// gone rather than the dashboard's own, which is alive.
pub fn worker_process(service: &str, slot: usize, rng: &mut Rng) -> SessionConfig {
    SessionConfig {
        host: format!("{service}-{slot:02}.demo"),
        pid: rng.u32(1_000..65_000),
        ..SessionConfig::new(service)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn keyspace_names_readable_locks_first_then_jobs() {
        let ks = Keyspace::new("demo/", 8, 2);
        let names: Vec<&str> = ks.keys.iter().map(|k| k.name.as_str()).collect();
        assert_eq!(names.len(), 8);
        assert_eq!(names[0], "demo/payments/settlement-eu");
        assert_eq!(&names[5..], ["demo/jobs/1", "demo/jobs/2", "demo/jobs/3"]);
        assert_eq!(ks.hot, 2);
        let unique: HashSet<&str> = names.iter().copied().collect();
        assert_eq!(unique.len(), 8);
        // Small and degenerate sizes.
        assert_eq!(Keyspace::new("demo/", 2, 5).keys.len(), 2);
        assert_eq!(Keyspace::new("demo/", 2, 5).hot, 2);
        assert_eq!(Keyspace::new("demo/", 0, 0).keys.len(), 1);
        // Another prefix shares no name with the default keyspace.
        let other = Keyspace::new("hung/", 8, 1);
        assert_eq!(other.keys[0].name, "hung/payments/settlement-eu");
        assert_eq!(other.keys[7].name, "hung/jobs/3");
        assert!(other.keys.iter().all(|k| !unique.contains(k.name.as_str())));
    }

    #[test]
    fn pick_sends_the_hot_share_to_the_hot_keys() {
        let ks = Keyspace::new("demo/", 40, 3);
        let mut rng = Rng::with_seed(7);
        let n = 20_000;
        let mut counts = vec![0usize; 40];
        for _ in 0..n {
            counts[ks.pick(&mut rng, 0.5)] += 1;
        }
        let hot: usize = counts[..3].iter().sum();
        let share = hot as f64 / n as f64;
        assert!((0.47..0.53).contains(&share), "hot share {share}");
        // Every key gets picked; a hot key far more often than a cold one.
        assert!(counts.iter().all(|&c| c > 0));
        assert!(counts[0] > 10 * counts[20]);
    }

    #[test]
    fn pick_edge_cases() {
        let mut rng = Rng::with_seed(1);
        let none_hot = Keyspace::new("demo/", 5, 0);
        let all_hot = Keyspace::new("demo/", 5, 5);
        let one_hot = Keyspace::new("demo/", 6, 1);
        for _ in 0..1000 {
            assert!(none_hot.pick(&mut rng, 1.0) < 5);
            assert!(all_hot.pick(&mut rng, 0.0) < 5);
            assert_eq!(one_hot.pick(&mut rng, 1.0), 0);
            assert_ne!(one_hot.pick(&mut rng, 0.0), 0);
        }
    }

    #[test]
    fn exponential_holds_have_the_mean_and_respect_the_cap() {
        let mut rng = Rng::with_seed(42);
        let mean = Duration::from_millis(1000);
        let n = 20_000;
        let total: Duration = (0..n)
            .map(|_| sample_exponential(&mut rng, mean, Duration::from_secs(3600)))
            .sum();
        let avg = total.as_secs_f64() / n as f64;
        assert!((0.95..1.05).contains(&avg), "mean {avg}");
        let cap = Duration::from_millis(500);
        assert!((0..1000).all(|_| sample_exponential(&mut rng, mean, cap) <= cap));
        assert_eq!(sample_exponential(&mut rng, Duration::ZERO, cap), Duration::ZERO);
    }

    #[test]
    fn fates_follow_the_rates() {
        let mut rng = Rng::with_seed(3);
        let n = 20_000;
        let (mut die, mut stall, mut hang) = (0, 0, 0);
        for _ in 0..n {
            match choose_fate(&mut rng, 0.1, 0.2, 0.05) {
                Fate::Die => die += 1,
                Fate::Stall => stall += 1,
                Fate::Hang => hang += 1,
                Fate::Release => {}
            }
        }
        let share = |k: i32| k as f64 / n as f64;
        let (die, stall, hang) = (share(die), share(stall), share(hang));
        assert!((0.09..0.11).contains(&die), "die {die}");
        assert!((0.18..0.22).contains(&stall), "stall {stall}");
        assert!((0.04..0.06).contains(&hang), "hang {hang}");
        assert!((0..100).all(|_| choose_fate(&mut rng, 0.0, 0.0, 0.0) == Fate::Release));
        assert!((0..100).all(|_| choose_fate(&mut rng, 1.0, 0.0, 0.0) == Fate::Die));
        assert!((0..100).all(|_| choose_fate(&mut rng, 0.0, 1.0, 0.0) == Fate::Stall));
        assert!((0..100).all(|_| choose_fate(&mut rng, 0.0, 0.0, 1.0) == Fate::Hang));
        // Rates adding up to more than 1: dying first, then stalling, then hanging.
        assert!((0..100).all(|_| choose_fate(&mut rng, 1.0, 1.0, 1.0) == Fate::Die));
        assert!((0..100).all(|_| choose_fate(&mut rng, 0.0, 1.0, 1.0) == Fate::Stall));
    }

    #[test]
    fn rare_hangs_show_up_now_and_then() {
        // The embedded demo's rate: about one acquisition in a thousand.
        let mut rng = Rng::with_seed(5);
        let cfg = DemoConfig::default();
        let n = 100_000;
        let hangs = (0..n)
            .filter(|_| choose_fate(&mut rng, cfg.die_rate, cfg.stall_rate, cfg.hang_rate) == Fate::Hang)
            .count();
        assert!((60..140).contains(&hangs), "{hangs} hangs in {n}");
    }

    #[test]
    fn hangs_last_minutes_by_default_or_exactly_as_configured() {
        let mut rng = Rng::with_seed(8);
        let cfg = DemoConfig {
            hang_rate: 1.0,
            die_rate: 0.0,
            stall_rate: 0.0,
            ..DemoConfig::default()
        };
        for _ in 0..1000 {
            let p = plan(&mut rng, &cfg);
            assert_eq!(p.fate, Fate::Hang);
            assert!(
                p.hold >= Duration::from_secs(180) && p.hold <= Duration::from_secs(300),
                "{:?}",
                p.hold
            );
        }
        let fixed = Duration::from_secs(7);
        let cfg = DemoConfig {
            hang: fixed..=fixed,
            ..cfg
        };
        assert!((0..100).all(|_| plan(&mut rng, &cfg).hold == fixed));
    }

    #[test]
    fn plans_make_only_stalls_and_hangs_overdue() {
        let cfg = DemoConfig {
            hold_mean: Duration::from_millis(1500),
            expected_runtime: Duration::from_millis(3000),
            die_rate: 0.1,
            stall_rate: 0.1,
            hang_rate: 0.1,
            ..DemoConfig::default()
        };
        let mut rng = Rng::with_seed(11);
        for _ in 0..5000 {
            let p = plan(&mut rng, &cfg);
            match p.fate {
                Fate::Stall => {
                    assert!(p.hold >= cfg.expected_runtime.mul_f64(1.5) && p.hold <= cfg.expected_runtime * 3)
                }
                Fate::Hang => assert!(cfg.hang.contains(&p.hold) && p.hold > cfg.expected_runtime),
                Fate::Release | Fate::Die => assert!(p.hold < cfg.expected_runtime),
            }
        }
    }

    #[test]
    fn each_worker_is_its_own_process_on_its_own_host() {
        let mut rng = Rng::with_seed(1);
        let a = worker_process("billing", 0, &mut rng);
        let b = worker_process("billing", 1, &mut rng);
        let a_again = worker_process("billing", 0, &mut rng);
        assert_eq!(a.host, "billing-00.demo");
        assert_ne!(a.host, b.host);
        assert_eq!(a.host, a_again.host, "a restarted worker keeps its host");
        assert_ne!(a.pid, a_again.pid, "and gets a new pid");
        assert_ne!(a.pid, std::process::id());
    }

    #[test]
    fn a_seed_reproduces_the_decisions() {
        let cfg = DemoConfig::default();
        let ks = Keyspace::new(&cfg.name_prefix, cfg.keys, cfg.hot_keys);
        let run = |seed| {
            let mut rng = Rng::with_seed(seed);
            (0..50)
                .map(|_| {
                    let k = ks.pick(&mut rng, cfg.hot_share);
                    (k, plan(&mut rng, &cfg), purpose(&mut rng, "payments", &ks.keys[k]))
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(run(5), run(5));
        assert_ne!(run(5), run(6));
    }

    #[test]
    fn purposes_read_like_work() {
        let mut rng = Rng::with_seed(9);
        let ks = Keyspace::new("demo/", 10, 0);
        assert_eq!(purpose(&mut rng, "billing", &ks.keys[0]), "settle EU card payments");
        let job = &ks.keys[6];
        assert_eq!(job.name, "demo/jobs/2");
        for _ in 0..20 {
            let p = purpose(&mut rng, "search-indexer", job);
            assert!(p.ends_with(" 2") && (p.contains("index")), "{p}");
        }
        assert!(purpose(&mut rng, "other", job).starts_with("other "));
    }

    #[test]
    fn uniform_samples_stay_in_range() {
        let mut rng = Rng::with_seed(2);
        let (lo, hi) = RESTART_PAUSE;
        assert!((0..1000).all(|_| (lo..hi).contains(&sample_between(&mut rng, lo, hi))));
        assert!((0..1000).all(|_| sample_idle(&mut rng, Duration::from_millis(100)) < Duration::from_millis(50)));
    }
}
