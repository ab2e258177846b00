//! The end-to-end A/B experiment: what one ladder level saves in CPU per I/O against
//! another, measured inside ONE fio run on a real device (a scratch loop device in the
//! tests), with a paired design that a shared machine's drift cannot fake.
//!
//! Method, and why (each rule closes a way an earlier, per-run design was fooled):
//! - One fio process runs the whole time; only the level changes, in short blocks
//!   (0.5-1 s), two per pair, the order of each pair shuffled from a seed and balanced (as
//!   many pairs start with one level as with the other). Blocks of a pair are a second
//!   apart, so slow drift (other tenants, thermal, page cache) falls on both alike; separate
//!   fio runs per level were tens of seconds apart.
//! - CPU is counted per task, by per-pid delta: fio's threads and the kworkers that name the
//!   device (`kworker/u8:2-loop1`: the work they last ran). Nothing machine-wide, so other
//!   tenants' kworkers stay out. A task that appears in a block counts from its start; one
//!   that exits takes its time with it, so that block is dropped and counted.
//! - Each block must be CPU-bound: fio's submitting thread, pinned to one CPU, on CPU for at
//!   least `min_busy` of the block (its own runtime delta over the wall time). Otherwise the
//!   CPU per I/O also holds sleeps and wake-ups, whose count depends on the load, and the
//!   block is dropped and counted. A pair counts only if both its blocks do.
//! - The estimate is the median of the paired differences (test level minus base level) of
//!   CPU per I/O, in ns and in percent of the base, with the distribution-free interval of
//!   `lab::calibrate::stats` (order statistics, exact binomial coverage). The smallest effect
//!   the run could detect is stated as the half-width of the percent interval: an effect
//!   smaller than that can sit inside an interval that holds 0.
//! - With a sampler (`run::open_sampler`, the `cpu-clock` sampler of `calibrate` and the
//!   daemon), the merge path is also sampled in every block: the second method, compared
//!   with the saving measured in the same tasks (fio's), where both resolve one.
//!
//! The plan, the per-pid CPU deltas and the estimator are pure, tested on synthetic data;
//! [`run()`] drives fio and the device through `kernel::blockfs` and `kernel::cputime` (this
//! module names no `/sys` or `/proc` path itself).

pub mod analysis;
pub mod plan;
pub mod run;
pub mod tasks;

pub use analysis::{
    AGREEMENT_COVERAGE, Analysis, BlockMeasure, DropReason, PairMeasure, SampledAgainst, analyse,
    judge,
};
pub use plan::{PairPlan, schedule};
pub use run::{AbError, AbParams, AbReport, run};
