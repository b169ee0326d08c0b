//! Reconnect delays: exponential from `min`, capped at `max`, with "full jitter"
//! (uniform in [d/2, d]) so that many dashboards do not reconnect in lockstep.

use std::time::Duration;

#[derive(Clone, Debug)]
pub struct Backoff {
    min: Duration,
    max: Duration,
    attempt: u32,
}

impl Backoff {
    pub fn new(min: Duration, max: Duration) -> Backoff {
        Backoff {
            min,
            max: max.max(min),
            attempt: 0,
        }
    }

    /// The delay before the next attempt.
    pub fn next_delay(&mut self) -> Duration {
        let ceiling = self.min.saturating_mul(1u32 << self.attempt.min(16)).min(self.max);
        self.attempt = self.attempt.saturating_add(1);
        let half = ceiling / 2;
        half + half.mul_f64(fastrand::f64())
    }

    /// Call after a successful connection.
    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_is_capped_and_resets() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
        let ceilings = [100, 200, 400, 800, 1600, 2000, 2000];
        for ceil in ceilings {
            let d = b.next_delay().as_millis() as u64;
            assert!(d >= ceil / 2 && d <= ceil, "{d} not in [{}, {ceil}]", ceil / 2);
        }
        b.reset();
        assert!(b.next_delay() <= Duration::from_millis(100));
    }
}
