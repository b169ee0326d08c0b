//! What the fleet's guarded actions answer: a release, a cancel, a release
//! fenced by the unlocker's leadership, and who holds that role (re-exported
//! from [`crate::fleet`]).

use lockscope_model::LockEntry;

/// What a guarded release did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Release {
    /// The acquisition with that fencing token was deleted, by this call's
    /// compare-and-delete (an acquisition is deleted once: no other delete of
    /// it exists), as the store says.
    Released(Removed),
    /// Nothing deleted: the lock is free (released or expired meanwhile).
    NotHeld,
    /// Nothing deleted: the lock is now this other acquisition (or record).
    Changed(LockEntry),
}

impl Release {
    /// What this release deleted (`None`: nothing).
    pub fn removed(&self) -> Option<Removed> {
        match self {
            Release::Released(r) => Some(*r),
            Release::NotHeld | Release::Changed(_) => None,
        }
    }
}

/// The store's own word on a delete a guarded release made: what lets the
/// history credit that delete to the caller and to nobody else.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Removed {
    /// The store revision of the delete, the one the fleet's observer reports
    /// in its `FleetEvent::Remove`: etcd, the transaction's revision (the
    /// delete event's mod revision); SQL, the row's revision after the
    /// release (`RETURNING revision`). `None` where the store returns none
    /// (ScyllaDB).
    pub revision: Option<i64>,
}

/// What a guarded cancel of a waiter did
/// ([`FleetStore::cancel_waiter`](super::FleetStore::cancel_waiter)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cancel {
    /// The waiter's waiting statement was cancelled: it was still that
    /// backend, waiting for that lock.
    Cancelled,
    /// Nothing cancelled: that waiter no longer waits for the lock (it got it,
    /// gave up, or its pid is another backend's now); the lock as it is now
    /// (`None`: not held).
    NotWaiting(Option<LockEntry>),
}

/// Why a fleet refuses to cancel a waiter (every family but PostgreSQL's
/// advisory locks).
pub const NO_CANCEL: &str = "this fleet's store has no waiter lockscope can cancel: cancelling a waiter is \
     a PostgreSQL advisory lock's action (pg_cancel_backend)";

/// What a release fenced by a [`Leadership`](super::Leadership) did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fenced {
    /// The leadership was current; the guarded release did this.
    Done(Release),
    /// The leadership is lost (its lease ran out, another replica was elected):
    /// nothing deleted, and the caller must stop acting as the unlocker.
    Deposed,
}

impl Fenced {
    /// What this release deleted (`None`: nothing, or deposed).
    pub fn removed(&self) -> Option<Removed> {
        match self {
            Fenced::Done(r) => r.removed(),
            Fenced::Deposed => None,
        }
    }
}

/// Who holds a fleet's unlocker role.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnlockerInfo {
    /// The replica's name, as it campaigned.
    pub candidate: String,
    /// Its leadership's term ([`Leadership::term`](super::Leadership::term)).
    pub term: i64,
}
