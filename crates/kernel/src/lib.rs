//! The kernel layer: the only code that names `/sys`, `/proc` or tracefs, and the parsers
//! of what the kernel writes there (diskstats lines, tracefs block events). Everything above
//! reaches the kernel through the small traits of [`blockfs`] (sysfs, the bio tap, the
//! merge-path sampler, host facts), so the real machine, a fake tree and the simulator are
//! interchangeable.
//!
//! Raw system calls are denied here but in [`sys`], the one audited module (docs/design.md,
//! "Unsafe").
#![deny(unsafe_code)]

pub mod biosense;
pub mod blockfs;
pub mod cputime;
pub mod devices;
pub mod diskstats;
pub mod lines;
pub mod perf;
pub mod rawtrace;
pub mod roots;
pub mod scheduler;
#[allow(unsafe_code)]
pub mod sys;
pub mod trace;
pub mod tracefs;
#[cfg(test)]
mod tracefs_fixture;
pub mod treefile;
pub mod tunable;
pub mod userfile;
