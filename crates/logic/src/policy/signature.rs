//! Workload signatures: what a window's traffic looks like whatever the merge level (rate,
//! read share, bio size). At L3 the merge counters read zero, but a change of signature
//! still shows that the workload changed; and a device remembers the signatures it found
//! merge-hostile, so a known one is not walked down the whole ladder again.

use crate::sampler::Window;
use serde::Serialize;

/// What a window's traffic looks like, whatever the merge level.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Signature {
    pub bios_per_sec: f64,
    /// Share of bios that are reads, 0..=1.
    pub read_share: f64,
    /// Mean bio size in sectors.
    pub sectors_per_bio: f64,
}

impl Signature {
    pub fn of(w: &Window) -> Signature {
        let c = &w.counters;
        let bios = c.bios().max(1) as f64;
        Signature {
            bios_per_sec: w.bios_per_sec(),
            read_share: c.read_bios() as f64 / bios,
            sectors_per_bio: (c.sectors_read + c.sectors_written) as f64 / bios,
        }
    }

    /// How this window differs from `base`, if enough to call it another workload: the
    /// rate by 1.5x either way, the read share by 20 points, or the bio size by 2x.
    pub fn changed_from(&self, base: &Signature) -> Option<String> {
        let ratio = |a: f64, b: f64| {
            if a <= 0.0 && b <= 0.0 {
                1.0
            } else if a <= 0.0 || b <= 0.0 {
                f64::INFINITY
            } else if a > b {
                a / b
            } else {
                b / a
            }
        };
        if ratio(self.bios_per_sec, base.bios_per_sec) >= 1.5 {
            return Some(format!(
                "bios/s {:.0} -> {:.0}",
                base.bios_per_sec, self.bios_per_sec
            ));
        }
        if (self.read_share - base.read_share).abs() >= 0.2 {
            return Some(format!(
                "reads {:.0}% -> {:.0}%",
                base.read_share * 100.0,
                self.read_share * 100.0
            ));
        }
        if ratio(self.sectors_per_bio, base.sectors_per_bio) >= 2.0 {
            return Some(format!(
                "bio size {:.1} -> {:.1} KiB",
                base.sectors_per_bio / 2.0,
                self.sectors_per_bio / 2.0
            ));
        }
        None
    }
}
