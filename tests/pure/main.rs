//! Pure tests: parsers, policy, state, ownership and the docs against the code. No process, no device, no simulator run.
//!
//! One test binary per kind of test (docs/testing.md, "Layout"): each file here is a module,
//! the shared harness is `tests/support/`.

#[path = "../support/configs.rs"]
mod configs;
#[path = "../support/logs.rs"]
mod logs;
#[path = "../support/memkernel.rs"]
mod memkernel;

mod actuator_state;
mod calibrate_stats;
mod config_example;
mod cost_profile;
mod daemon_tick;
mod diskstats_fixtures;
mod docs_match_files;
mod docs_reference;
mod layers;
mod originals;
mod parsers_prop;
mod policy;
mod slices;
mod state_fuzz;
mod state_store;
mod tuner_tables;
