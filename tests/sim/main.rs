//! The simulator, and the daemon driven by it in virtual time: the model, its limits, the comparison targets.
//!
//! One test binary per kind of test (docs/testing.md, "Layout"): each file here is a module,
//! the shared harness is `tests/support/`.

mod compare_targets;
#[path = "../support/decisions.rs"]
mod decisions;
mod l3_watch;
mod pricing_match;
mod record_replay;
#[path = "../support/scenarios.rs"]
mod scenarios;
mod sim_blockfs;
mod sim_freeze;
mod sim_limits;
mod sim_model;
mod sim_sense;
mod sim_trace;
mod sim_vmlab_calibration;
mod slices_sim;
