//! Maps keyed by lock name ([`NameMap`]), hashed with foldhash rather than
//! std's SipHash: the tops' pass looks up a lock's meta by name where its entry
//! does not say enough (up to a million lookups a pass at 1,000,000 locks), and
//! frames look up each row's; SipHash was 7-9 % of the server's time in a burst
//! of new views (docs/performance.md).
//!
//! Why a faster hash is safe here: lock names are written by the fleet's own
//! clients, who hold the store's credentials (and could as well flood the store
//! itself), not by whoever reaches the server; and the hasher is seeded from
//! the OS's randomness, as std's SipHash keys are (once per process, and per
//! map), with no hash ever sent out, so names cannot be picked to collide
//! without guessing the seed. foldhash calls its DoS resistance "minimal" (no
//! proof, unlike SipHash's), so maps filled from unauthenticated input
//! (requests, headers) stay on std's hasher.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, OnceLock};

use foldhash::fast::{FoldHasher, SeedableRandomState};
use foldhash::SharedSeed;

/// A map keyed by lock name: see the module docs.
pub(crate) type NameMap<V> = HashMap<Arc<str>, V, NameHasher>;

/// foldhash seeded from the OS's randomness (foldhash's own `RandomState`,
/// without its `std` feature, mixes addresses only; turning that feature on
/// would rebuild every crate above hashbrown's copy of it).
#[derive(Clone, Debug)]
pub(crate) struct NameHasher(SeedableRandomState);

impl Default for NameHasher {
    fn default() -> Self {
        static SHARED: OnceLock<SharedSeed> = OnceLock::new();
        // std's RandomState is keyed from the OS's randomness.
        let random = || RandomState::new().hash_one(0u64);
        let shared = SHARED.get_or_init(|| SharedSeed::from_u64(random()));
        NameHasher(SeedableRandomState::with_seed(random(), shared))
    }
}

impl BuildHasher for NameHasher {
    type Hasher = FoldHasher<'static>;

    fn build_hasher(&self) -> FoldHasher<'static> {
        self.0.build_hasher()
    }
}
