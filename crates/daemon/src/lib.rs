//! The daemon layer: the [`controller::Controller`] trait that drives a block stack each
//! tick and hands out a [`snapshot::DaemonSnapshot`] of what it did, the adaptive
//! controller built from the pure policy, the actuator that owns every tunable it writes
//! (one record per tunable, saved before it is written), the state file, the dry run's
//! view of the level it would have set, what a reload may change, and record/replay of a
//! run.
#![forbid(unsafe_code)]

pub mod actuator;
pub mod adaptive;
pub mod controller;
pub mod dryrun;
pub mod pricing;
pub mod record;
pub mod reload;
pub mod sense;
pub mod service;
pub mod snapshot;
pub mod state;
