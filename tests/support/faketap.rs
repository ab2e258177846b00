//! A bio tap for the in-memory kernels of the tests: what tracefs `block_bio_queue` would
//! report for a load whose share of mergeable bios is known. Included with
//! `#[path = "support/faketap.rs"] mod faketap;`.

#![allow(dead_code)]

use mergetune_kernel::biosense::QueuedBio;
use mergetune_kernel::trace::Dir;

/// Appends `n` write bios of 8 sectors (at most `max` in all): the first `contiguous` of
/// them each start where the previous one ended, the rest are scattered far apart.
pub fn bios(out: &mut Vec<QueuedBio>, n: usize, contiguous: usize, max: usize) {
    let mut end = 0u64;
    for i in 0..n.min(max.saturating_sub(out.len())) {
        let sector = if i > 0 && i <= contiguous {
            end
        } else {
            // Scattered: no earlier bio ends here.
            (i as u64 + 1) * 1_000_003 * 8
        };
        out.push(QueuedBio {
            t_ns: i as u64 * 1000,
            dir: Dir::Write,
            sector,
            nr_sectors: 8,
        });
        end = sector + 8;
    }
}
