//! What a dry run means: the daemon decides exactly as the live daemon would, on the level
//! it would have set, while the kernel stays where it is. Two things make that faithful:
//!
//! - the tunables it would have written are kept (the actuator's overlay), so its policy
//!   state, its next decision's "from" and its hand-back at exit follow the would-be level;
//! - the counters it reads were taken at the *real* level, so before the policy sees a
//!   window it is translated into what the live daemon would have counted at the would-be
//!   level ([`as_counted_at`]). At a would-be nomerges=2 every bio the kernel merged would
//!   have been a request of its own, so the merges go and the requests grow by as many;
//!   and those merges are what the live daemon's bio tap would have sensed as mergeable
//!   bios, so they become the window's [`Sensed`] sample. Without this a dry run at L3
//!   reads the real L0's merges as "merges at L3" and leaves L3 at once.
//!
//! What cannot be translated, and so bounds how far a dry run can be trusted
//! (docs/operator.md, "How far a dry run can be trusted"): at a would-be nomerges=1 the
//! counters cannot tell the merges nomerges=1 keeps (plug, one-hit cache) from those it
//! loses (hash, front merges), so the window is taken as counted (a trial of L2 reads as
//! kept); front merges are not counted apart, so L1 reads as L0; and the load itself is the
//! real level's (a workload that runs slower unmerged runs at full speed in a dry run).

use mergetune_logic::sampler::{Sensed, Window};

/// The window the live daemon would have counted at `would` nomerges, from one the kernel
/// counted at `real` nomerges (both 0, 1 or 2). With `tap_works`, the bio tap samples on
/// the live daemon's own schedule, so its samples (or their absence) are kept as they are;
/// only without a tap do the counted merges stand in for one.
pub fn as_counted_at(w: &Window, real: u8, would: u8, tap_works: bool) -> Window {
    if would < 2 || real >= 2 {
        // Equal, or not translatable from these counters (see the module header): as is.
        return *w;
    }
    let mut c = w.counters;
    let merged = c.reads_merged + c.writes_merged;
    c.reads_completed += c.reads_merged;
    c.writes_completed += c.writes_merged;
    c.reads_merged = 0;
    c.writes_merged = 0;
    Window {
        counters: c,
        duration_ms: w.duration_ms,
        // A sample the tap really took stays; otherwise the counted merges stand for it.
        sensed: if tap_works {
            w.sensed
        } else {
            w.sensed.or(Some(Sensed {
                bios: w.counters.bios(),
                mergeable: merged,
                // The counters do not tell front merges apart.
                front_mergeable: 0,
                sampled_ms: w.duration_ms,
            }))
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mergetune_logic::sampler::Counters;

    fn window(reads: u64, rmerged: u64, writes: u64, wmerged: u64) -> Window {
        Window {
            counters: Counters {
                reads_completed: reads,
                reads_merged: rmerged,
                sectors_read: (reads + rmerged) * 8,
                read_ms: 7,
                writes_completed: writes,
                writes_merged: wmerged,
                sectors_written: (writes + wmerged) * 8,
                write_ms: 9,
            },
            duration_ms: 1000,
            sensed: None,
        }
    }

    #[test]
    fn at_a_would_be_nomerges_2_every_merge_is_a_request_and_a_sensed_mergeable_bio() {
        // Batched sequential writes at the real L0: 128 requests holding 8,192 bios.
        let w = window(10, 0, 128, 8064);
        let t = as_counted_at(&w, 0, 2, false);
        assert_eq!(t.counters.writes_completed, 8192);
        assert_eq!(t.counters.writes_merged + t.counters.reads_merged, 0);
        assert_eq!(
            t.counters.bios(),
            w.counters.bios(),
            "bios submitted are the same"
        );
        assert_eq!(
            t.counters.sectors_written, w.counters.sectors_written,
            "so are the sectors: the signature of the load does not move"
        );
        assert_eq!(
            t.sensed,
            Some(Sensed {
                bios: 8202,
                mergeable: 8064,
                front_mergeable: 0,
                sampled_ms: 1000
            })
        );
    }

    #[test]
    fn a_real_tap_sample_is_kept() {
        let mut w = window(100, 50, 0, 0);
        let tap = Sensed {
            bios: 40,
            mergeable: 3,
            front_mergeable: 0,
            sampled_ms: 250,
        };
        w.sensed = Some(tap);
        assert_eq!(as_counted_at(&w, 0, 2, false).sensed, Some(tap));
    }

    #[test]
    fn with_a_working_tap_no_sample_is_made_up() {
        // The live daemon's tap samples on its duty cycle; a window without a sample must
        // stay without one, or the dry run would see more than the live daemon does.
        let w = window(100, 50, 0, 0);
        assert_eq!(as_counted_at(&w, 0, 2, true).sensed, None);
        assert!(as_counted_at(&w, 0, 2, false).sensed.is_some());
    }

    #[test]
    fn the_same_level_or_an_untranslatable_one_is_taken_as_counted() {
        let w = window(100, 50, 20, 5);
        for (real, would) in [(0, 0), (1, 1), (2, 2), (0, 1), (2, 0), (1, 0)] {
            assert_eq!(
                as_counted_at(&w, real, would, false),
                w,
                "real {real}, would {would}"
            );
        }
    }
}
