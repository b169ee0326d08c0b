//! The clock the unlocker decides by.

use lockscope_model::time::Millis;
use tokio::time::Instant;

/// The clock the unlocker decides by: the earlier of the system's wall clock and
/// the wall clock read at start advanced by the monotonic clock. A forward step
/// of the system clock after start cannot make locks look expired, and a clock
/// that was ahead at start and is stepped back follows it back: either way a
/// step can only delay a release, never bring it forward. (In tests, tokio's
/// paused time drives the monotonic part.)
#[derive(Clone, Copy, Debug)]
pub struct ServerClock {
    wall0: Millis,
    t0: Instant,
    wall: fn() -> Millis,
}

impl ServerClock {
    pub fn new() -> ServerClock {
        ServerClock {
            wall0: lockscope_store::now_ms(),
            t0: Instant::now(),
            wall: lockscope_store::now_ms,
        }
    }

    /// A clock reading `wall0` now and advancing with monotonic time only.
    pub fn starting_at(wall0: Millis) -> ServerClock {
        ServerClock {
            wall0,
            t0: Instant::now(),
            wall: || Millis::MAX,
        }
    }

    pub fn now(&self) -> Millis {
        (self.wall0 + self.t0.elapsed().as_millis() as Millis).min((self.wall)())
    }
}

impl Default for ServerClock {
    fn default() -> Self {
        ServerClock::new()
    }
}
