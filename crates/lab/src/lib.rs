//! The lab: tools that judge the policy rather than run it. `simulate --compare` and its
//! baselines, the trace advisor, the plots, and `calibrate` (measuring the cost of merging
//! on the real kernel).
#![forbid(unsafe_code)]

pub mod abtest;
pub mod advise;
pub mod calibrate;
pub mod capture;
pub mod compare;
pub mod plot;
