//! Threshold tables: for each active-request count `q`, the work after which a
//! request is serialized.

use std::time::Duration;

/// A threshold table `q -> l_q`. Index 0 is `q = 1`.
#[derive(Clone, Debug, PartialEq)]
pub struct ThresholdTable {
    thresholds: Vec<Option<Duration>>,
}

impl ThresholdTable {
    /// A table from explicit thresholds; `thresholds[i]` is for `q = i + 1`,
    /// `None` means "never serialize at that load".
    pub fn from_thresholds(thresholds: Vec<Option<Duration>>) -> Self {
        Self { thresholds }
    }

    /// The threshold at `active` requests; look-ups past `q_max` clamp to the last entry.
    pub fn lookup(&self, active: usize) -> Option<Duration> {
        if self.thresholds.is_empty() {
            return None;
        }
        let i = active.max(1).min(self.thresholds.len()) - 1;
        self.thresholds[i]
    }
}
