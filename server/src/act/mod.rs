//! Act on a lock: the one door every admin action goes through, and the
//! unlocker.
//!
//! - [`admin`]: every admin attempt (force-release, blacklist, lift) checked,
//!   performed through the fleet's store handle and audited, allowed or refused.
//! - [`unlocker`]: per fleet, releases locks past `auto_unlock_at` plus grace,
//!   while this replica holds the fleet's unlocker role (elected in the store).

pub mod admin;
pub mod unlocker;
