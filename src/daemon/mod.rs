//! The daemon layer: the [`controller::Controller`] trait that drives a block stack each
//! tick, the adaptive controller built from the pure policy, the actuator that owns every
//! tunable it writes (one record per tunable, saved before it is written), the state file,
//! and record/replay of a run.

pub mod actuator;
pub mod adaptive;
pub mod controller;
pub mod record;
pub mod sense;
pub mod state;

pub use adaptive::{Daemon, DaemonCounters};
