//! Pure logic: the config, the typed decisions, the sampler that turns counter snapshots
//! into windows, the merge-ladder policy, the slice tuner's rules and pricing (the merge
//! path's price, live and from cost profiles).
//! Nothing here does I/O or reads a clock: input and time are arguments.
#![forbid(unsafe_code)]

pub mod config;
pub mod decision;
pub mod devices;
pub mod document;
pub mod hourly;
pub mod policy;
pub mod pricing;
pub mod printable;
pub mod sampler;
pub mod sense;
pub mod slices;
pub mod tuners;
