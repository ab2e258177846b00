//! Test fixtures shared by the pricing modules' tests: merge-path samples as the kernel's
//! sampler hands them out.

use mergetune_kernel::perf::{MergeSamples, PathCounts};

/// `merge_samples` merge-path samples in `slot`, 1 ms each, of a task that queued bios on
/// `submitter`.
pub(super) fn samples_of(submitter: &[&str], slot: usize, merge_samples: u64) -> MergeSamples {
    let mut s = MergeSamples {
        period_ns: 1_000_000,
        ..Default::default()
    };
    let mut counts = [PathCounts::default(); 4];
    counts[slot].merge_path = merge_samples;
    s.merge_path[slot] = merge_samples;
    s.by_submitter
        .insert(submitter.iter().map(|d| d.to_string()).collect(), counts);
    s
}
