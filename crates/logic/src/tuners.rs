//! One table per scheduler: what mergetune may do on a device running it. A table holds the
//! rungs of the merge ladder the scheduler offers and its slice knobs, each with its
//! [`Tunable`], the kernel's default, the `[slices]` config key that bounds it and the step
//! the slice tuner takes toward the reads.
//!
//! Everything else is derived from these tables: the ladder's caps
//! ([`crate::policy::Caps::for_scheduler`]) and the levels a cost profile may measure, the
//! slice tuner's steps and defaults ([`crate::slices`]), the `[slices]` bound keys the
//! config accepts and checks ([`crate::config::SlicesConfig`]), the daemon's set of slice
//! tunables, and the `queue/iosched/` files the simulator offers. Adding a slice knob is
//! its [`Tunable`] (kernel layer) and one line in its scheduler's table.

mod bfq;
mod kyber;
mod mq_deadline;
mod none;

use crate::decision::Level;
use mergetune_kernel::scheduler::Scheduler;
use mergetune_kernel::tunable::Tunable;
use std::sync::LazyLock;

/// What mergetune may do on one scheduler.
#[derive(Debug)]
pub struct Table {
    pub scheduler: Scheduler,
    /// The ladder's rungs this scheduler offers, shallowest first (L0 and L3 on all).
    pub rungs: &'static [Level],
    /// The slice knobs, in the order the slice tuner tries them.
    pub knobs: &'static [Knob],
}

/// One scheduler tunable the slice tuner may move.
#[derive(Debug)]
pub struct Knob {
    pub tunable: Tunable,
    /// The kernel's default: a value that differs when mergetune first sees it was set by
    /// the operator, and is never touched.
    pub default: u64,
    /// The `[slices]` key bounding how far mergetune moves it.
    pub bound: Bound,
    /// One step toward the reads from value `v` with the configured bound: None when the
    /// bound is reached.
    pub step: fn(v: u64, bound: u64) -> Option<u64>,
}

/// A `[slices]` config key bounding a knob: its default and the values config accepts.
#[derive(Debug, Clone, Copy)]
pub struct Bound {
    pub key: &'static str,
    pub default: u64,
    pub min: u64,
    pub max: u64,
}

/// Every table, in [`Scheduler::ALL`]'s order.
pub const TABLES: [&Table; 4] = [
    &none::TABLE,
    &mq_deadline::TABLE,
    &bfq::TABLE,
    &kyber::TABLE,
];

/// The table of a scheduler.
pub fn table(s: Scheduler) -> &'static Table {
    TABLES[s.index()]
}

/// The rungs of a device's scheduler; one mergetune does not know (None) offers what
/// `none` offers.
pub fn rungs(s: Option<Scheduler>) -> &'static [Level] {
    table(s.unwrap_or(Scheduler::None)).rungs
}

/// The levels a cost profile may measure on a scheduler: every level but the rungs the
/// scheduler lacks for want of a tunable (L1, front_merges). L2 is measured everywhere: on
/// none and kyber it shows nomerges=1 makes no difference there.
pub fn profile_levels(s: Scheduler) -> &'static [Level] {
    static LEVELS: LazyLock<[Vec<Level>; 4]> = LazyLock::new(|| {
        Scheduler::ALL.map(|s| {
            Level::ALL
                .into_iter()
                .filter(|&l| l != Level::L1 || table(s).rungs.contains(&Level::L1))
                .collect()
        })
    });
    &LEVELS[s.index()]
}

/// Every slice knob of every table, in table order.
pub fn knobs() -> impl Iterator<Item = &'static Knob> {
    TABLES.into_iter().flat_map(|t| t.knobs.iter())
}

/// The tunables of every slice knob: what the slice tuner may write on any device.
pub fn slice_tunables() -> &'static [Tunable] {
    static ALL: LazyLock<Vec<Tunable>> = LazyLock::new(|| knobs().map(|k| k.tunable).collect());
    &ALL
}

/// The knob of a tunable, if one table has it.
pub fn knob(t: Tunable) -> Option<&'static Knob> {
    knobs().find(|k| k.tunable == t)
}

/// What the ladder writes, for the start-up log: "queue/nomerges, mq-deadline
/// iosched/front_merges" (front_merges on the schedulers that offer L1).
pub fn ladder_files() -> String {
    let front = TABLES
        .into_iter()
        .filter(|t| t.rungs.contains(&Level::L1))
        .map(|t| format!("{} {}", t.scheduler, iosched(Tunable::FrontMerges)));
    std::iter::once(Tunable::Nomerges.rel_path().to_string())
        .chain(front)
        .collect::<Vec<_>>()
        .join(", ")
}

/// What the slice tuner may write, for the start-up log: "mq-deadline
/// iosched/writes_starved and read_expire, bfq iosched/timeout_sync".
pub fn slice_files() -> String {
    slices_by_scheduler("iosched/", ", ")
}

/// A tunable's path below `queue/` ("iosched/front_merges").
fn iosched(t: Tunable) -> &'static str {
    let p = t.rel_path();
    p.strip_prefix("queue/").unwrap_or(p)
}

/// The slice knobs by scheduler, for `--help`: "mq-deadline writes_starved and read_expire
/// and bfq timeout_sync".
pub fn slice_knobs() -> String {
    slices_by_scheduler("", " and ")
}

/// Each scheduler with slice knobs and their file names ("bfq {dir}timeout_sync"), the
/// schedulers joined with `sep`.
fn slices_by_scheduler(dir: &str, sep: &str) -> String {
    TABLES
        .into_iter()
        .filter(|t| !t.knobs.is_empty())
        .map(|t| {
            let files: Vec<&str> = t.knobs.iter().map(|k| k.tunable.file_name()).collect();
            format!("{} {dir}{}", t.scheduler, files.join(" and "))
        })
        .collect::<Vec<_>>()
        .join(sep)
}
