//! `simulate --compare`: the adaptive policy against its alternatives, on the simulator.
//!
//! Each scenario runs under five controllers, all through the same
//! [`mergetune_daemon::controller::Controller`] seam, listed with the oracle's choice in
//! [`baselines`]: the kernel default, static nomerges=2, a naive toggle, the adaptive
//! daemon and an oracle that knows each phase's pattern.
//!
//! Figures per policy: block-layer CPU saved against the kernel default, priced in the
//! scenario's cost profile (the one measured on this kernel unless the scenario names
//! another; the oracle is chosen in it too) and, as a second column, in the other shipped
//! profile (the 2008 figures); the queue freezes of its `queue/nomerges` writes;
//! the worst phase's throughput loss and p99 latency change against the kernel default,
//! level changes (and per hour), and the time to react after each phase change.

pub mod baselines;
pub mod figures;
pub mod render;
pub mod runner;
pub mod suite;
pub mod summary;
pub mod terminal;

pub use baselines::{
    CONTENDERS, Contender, LevelSchedule, NaiveToggle, ORACLE_MAX_LOSS, ORACLE_MIN_SAVING,
};
pub use figures::{PhaseFigures, PolicyRun, PolicySummary, ScenarioComparison};
pub use render::render;
pub use runner::{RUNS_PER_SCENARIO, compare, compare_with_progress};
pub use suite::{SUITE, scale_phases, suite, suite_scenario};
pub use terminal::run_suite;
