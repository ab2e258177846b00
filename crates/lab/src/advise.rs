//! `mergetune advise TRACE`: helpful suggestions from a captured block trace.
//!
//! Carl Henrik's idea in the 2008 nomerges thread (docs/design.md): "a program which makes
//! some helpful suggestions after looking at a blktrace file ... suggest changing the I/O
//! scheduler, increasing a parameter such as slice_sync, or disable merges". This module
//! reads the tracing filesystem's block events (or blkparse's text) through the simulator's
//! own line parser ([`mergetune_kernel::trace::parse_event`]), one line at a time, and keeps
//! only fixed-size state per device: counters, log-scale histograms, a timeline of at most
//! [`TIMELINE_BUCKETS`] buckets (their width doubles as the trace grows), a reservoir of at
//! most [`SCATTER_POINTS`] sampled bios for the sector-over-time picture, and capped maps
//! (tasks, requests in flight). Memory is flat in trace length.
//!
//! The merge ladder (see [`mergetune_logic::policy`]): L0 keeps every merge, L1 drops front
//! merges, L2 (`nomerges=1`) keeps only the plug and one-hit (`last_merge`) merges, L3
//! none. A trace does not say which path a merge took; the approximation used here: a merge
//! is a *simple* one (kept at L2) when the merged bio abuts the bio queued just before it by
//! the same task, or the bio queued just before it on the device. A merge needs a request
//! still waiting; when that request is the one built from the previous bio, the plug (same
//! task, same batch) or the one-hit cache (the queue's last request) finds it without the
//! hash or tree lookups. Merges into older requests needed the hash (back) or the tree
//! (front), and are lost at L2.
//!
//! Bad input never panics: a line that is not a block event is counted and skipped (the
//! first few are quoted with their line numbers); the report is best effort.
//!
//! The flow, one file per step: [`reader`] streams lines into the per-device
//! [`accumulator`]s, [`report`] turns each into figures, [`rules`] adds the
//! recommendations (the trace's level, then [`daemon_view`](mod@daemon_view): the level the daemon's own
//! rules and cost profile reach, which is the one recommended), [`whatif`] replays the bios in the simulator, and [`render`] (text),
//! [`svg`] (pictures) and [`cli`] (the subcommand) show the result.

pub mod accumulator;
pub mod cli;
pub mod daemon_view;
pub mod reader;
pub mod render;
pub mod report;
pub mod rules;
pub mod svg;
pub mod whatif;

pub use accumulator::{
    DEFAULT_WHAT_IF_MAX_BIOS, DIST_BUCKETS, DIST_LABELS, DeviceAcc, MAX_DEVICES,
    MAX_ERROR_EXAMPLES, MAX_INFLIGHT, MAX_LINE_BYTES, MAX_TASKS, SCATTER_POINTS, SIZE_BUCKETS,
    ScatterPoint, TIMELINE_BUCKETS, Timeline, resolve_device, size_bucket_label,
};
pub use cli::{AdviseArgs, run};
pub use daemon_view::{DaemonView, daemon_view};
pub use reader::{Analyzer, analyze_file};
pub use render::render_text;
pub use report::{Analysis, BadLine, DeviceReport, LatencyReport, LevelShare, Recommendation};
pub use rules::{MIN_UNMERGED_PERCENT_TO_ACT, recommend, recommend_priced, trace_level};
pub use svg::plot_advise;
pub use whatif::{WhatIf, WhatIfRow, read_bios, what_if};
