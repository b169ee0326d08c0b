//! What a group or a fill of the tops' pass reads ([`Span`]): from where it
//! joined the pass to the same place in the next lap.

use std::sync::Arc;

/// What a filter's group or a top's fill reads: from where it joined, in the
/// lap it joined, to the same place in the next lap (the whole of one lap if
/// it joined at a lap's start).
#[derive(Clone)]
pub(super) struct Span {
    pub(super) lap: u64,
    /// The cursor when it joined (`None`: a lap's start).
    pub(super) from: Option<Arc<str>>,
    /// In its second lap, its `from`'s place in [`super::Run`]'s `stops`.
    pub(super) stop: Option<usize>,
}

impl Span {
    /// Whether it reads a lock past `passed` of this lap's stops.
    pub(super) fn reads(&self, passed: usize) -> bool {
        self.stop.is_none_or(|s| s >= passed)
    }

    /// Whether it has read lock `name`, in lap `lap` with the cursor at `cursor`.
    pub(super) fn has_read(&self, name: &str, lap: u64, cursor: Option<&str>) -> bool {
        let before = cursor.is_some_and(|c| name <= c);
        let after_from = |f: &Arc<str>| name > &**f;
        if self.lap == lap {
            before && self.from.as_ref().is_none_or(after_from)
        } else {
            self.from.as_ref().is_some_and(after_from) || before
        }
    }

    /// Whether it has read every lock, once the lap is at `cursor` (`ended`:
    /// lap `lap` read to the fleet's end).
    pub(super) fn done(&self, lap: u64, cursor: Option<&str>, ended: bool) -> bool {
        match ended {
            true => self.lap < lap || self.from.is_none(),
            false => self.lap < lap && cursor.zip(self.from.as_deref()).is_some_and(|(c, f)| c >= f),
        }
    }
}
