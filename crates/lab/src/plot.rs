//! Pictures (SVG, plotters) of what the policy did over a simulate, compare or replay run.
//!
//! A [`mergetune_sim::report::Report`] holds per-phase aggregates, the nomerges timeline and the
//! decisions; [`plot_report`] draws from those alone (phase-level steps). For per-tick
//! curves, run the controller inside a [`Sampling`] wrapper: it forwards every tick and
//! then reads the block stack's counters and tunables through the same
//! [`mergetune_kernel::blockfs::BlockFs`] (the simulator's, or a recording's in replay),
//! giving a [`Series`] for [`plot_run`].
//!
//! Nothing here knows the trace advisor: `lab::advise` draws its own pictures with
//! `style`.

pub mod runs;
pub mod sampling;
pub mod series;
pub mod style;

pub use runs::{plot_compare, plot_report, plot_run, plot_series};
pub use sampling::Sampling;
pub use series::{Sample, Series, series_from_report};
pub use style::PlotError;
