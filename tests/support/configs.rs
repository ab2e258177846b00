//! Daemon configs the tests start from. Included with
//! `#[path = "../support/configs.rs"] mod configs;`.

#![allow(dead_code)]

use mergetune_logic::config::Config;

/// The defaults but a policy that decides on every window of 100 bios or more and turns
/// merging off after one low window, with no dwell.
pub fn one_window_policy() -> Config {
    let mut cfg = Config::default();
    cfg.policy.window_ticks = 1;
    cfg.policy.min_window_bios = 100;
    cfg.policy.disable_after_windows = 1;
    cfg.policy.min_dwell_secs = 0;
    cfg
}
