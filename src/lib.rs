//! mergetune: an adaptive merge-control daemon for Linux block devices.
//!
//! Data flows one way, and the layers below show it (docs/design.md has the picture): the
//! `kernel` readers -> the pure `logic` (sampler, policy) -> the `daemon` (tick, actuator,
//! state) -> the `export`ers (metrics, status, logs). The simulator (`sim`) is a block stack
//! the same daemon drives in virtual time; the `lab` judges the policy (compare, advise,
//! plots, calibrate); `cli` is the command line. A module uses only its own layer and the
//! layers before it in this list; `tests/layers.rs` fails on an edge that points up.

pub mod cli;
pub mod daemon;
pub mod export;
pub mod kernel;
pub mod lab;
pub mod logic;
pub mod sim;
