//! mergetune's command line: argument parsing and the commands, each a thin door to the
//! layer crates below (docs/design.md, "Layout"): `mergetune-kernel` -> `mergetune-logic` ->
//! `mergetune-daemon` -> `mergetune-export`, with `mergetune-sim` (the simulated block
//! stack) and `mergetune-lab` (compare, advise, calibrate) beside them.
#![forbid(unsafe_code)]

pub mod cli;
