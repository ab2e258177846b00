//! mergetune: an adaptive merge-control daemon for Linux block devices.
//!
//! Data flows one way: source (`blockfs` + `diskstats`) -> `sampler` -> `policy` (pure)
//! -> `actuator` -> log/metrics. The `daemon` module ties them into one tick that the
//! real loop, the dry-run and the simulator (`sim`) all share.

pub mod actuator;
pub mod advise;
pub mod blockfs;
pub mod calibrate;
pub mod compare;
pub mod config;
pub mod controller;
pub mod cost_profile;
pub mod daemon;
pub mod devices;
pub mod diskstats;
pub mod http;
pub mod lines;
pub mod logging;
pub mod metrics;
pub mod plot;
pub mod policy;
pub mod record;
pub mod sampler;
pub mod sim;
pub mod slices;
pub mod state;
pub mod status;
pub mod tracecap;
pub mod tunable;
