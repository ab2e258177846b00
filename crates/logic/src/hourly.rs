//! The hourly cap on tunable changes, kept once for the merge ladder ([`crate::policy`]) and
//! the slice tuner ([`crate::slices`]): the times of the changes made in the last hour,
//! oldest first. Each caller holds its own count against its own
//! `max_changes_per_hour`; what a count is, how it ages and when room comes back is here.
//! Serialised as the plain list of times, as the replay logs have always shown it.

use serde::Serialize;

/// An hour, in ms: how long a change counts toward a cap.
pub const HOUR_MS: u64 = 3_600_000;

/// The changes made in the last hour.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct ChangesLastHour {
    at_ms: Vec<u64>,
}

impl ChangesLastHour {
    /// Counts a change made at `now_ms`.
    pub fn record(&mut self, now_ms: u64) {
        self.at_ms.push(now_ms);
    }

    /// Drops the changes an hour old or older at `now_ms`.
    pub fn forget_older_than_an_hour(&mut self, now_ms: u64) {
        let aged = |t: u64| now_ms.saturating_sub(t) >= HOUR_MS;
        if self.at_ms.first().is_some_and(|&t| aged(t)) {
            self.at_ms.retain(|&t| !aged(t));
        }
    }

    pub fn count(&self) -> u32 {
        u32::try_from(self.at_ms.len()).unwrap_or(u32::MAX)
    }

    /// Whether `cap` changes are counted already: the next one would be over it.
    pub fn reached(&self, cap: u32) -> bool {
        self.count() >= cap
    }

    /// How long, from `now_ms`, until the oldest change ages out (0 with none counted).
    pub fn room_in_ms(&self, now_ms: u64) -> u64 {
        self.at_ms
            .first()
            .map_or(0, |&t| (t + HOUR_MS).saturating_sub(now_ms))
    }

    /// The times counted, oldest first.
    pub fn times_ms(&self) -> &[u64] {
        &self.at_ms
    }
}

impl From<Vec<u64>> for ChangesLastHour {
    /// Changes made at these times, oldest first.
    fn from(at_ms: Vec<u64>) -> ChangesLastHour {
        ChangesLastHour { at_ms }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_counts_for_one_hour_to_the_ms() {
        let mut c = ChangesLastHour::default();
        c.record(1000);
        c.record(5000);
        assert!(c.reached(2) && !c.reached(3));
        c.forget_older_than_an_hour(1000 + HOUR_MS - 1);
        assert_eq!(c.count(), 2);
        assert_eq!(c.room_in_ms(1000 + HOUR_MS - 1), 1);
        c.forget_older_than_an_hour(1000 + HOUR_MS);
        assert_eq!(c.times_ms(), &[5000]);
        assert_eq!(c.room_in_ms(1000 + HOUR_MS), 4000);
    }

    #[test]
    fn it_serialises_as_the_plain_list_of_times() {
        let c = ChangesLastHour::from(vec![0, 30_000]);
        assert_eq!(serde_json::to_string(&c).unwrap(), "[0,30000]");
    }
}
