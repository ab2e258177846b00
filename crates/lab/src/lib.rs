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

/// This process's effective uid (the lab's tools that write tracefs or sysfs need root).
pub fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}
