//! The command line and the daemon against a fake sysfs tree: the binary run as an operator runs it, the endpoint, the exporters, the bad-input sweeps.
//!
//! One test binary per kind of test (docs/testing.md, "Layout"): each file here is a module,
//! the shared harness is `tests/support/`.

#[path = "../support/command.rs"]
mod command;
#[path = "../support/configs.rs"]
mod configs;
#[path = "../support/decisions.rs"]
mod decisions;
#[path = "../support/fakesys.rs"]
mod fakesys;
#[path = "../support/lab.rs"]
mod lab;
#[path = "../support/logs.rs"]
mod logs;
#[path = "../support/memkernel.rs"]
mod memkernel;
#[path = "../support/repo.rs"]
mod repo;
#[path = "../support/scenarios.rs"]
mod scenarios;
#[path = "../support/traces.rs"]
mod traces;

mod advise_daemon;
mod advise_fixtures;
mod advise_large;
mod calibrate_args;
mod cli;
mod compare_output;
mod daemon_dry_run;
mod daemon_slices;
mod device_owner;
mod endpoint_priority;
mod fake_tree;
mod fd_exhaustion;
mod harden;
mod http_endpoint;
mod inert_host;
mod inputs_hardening;
mod inputs_regressions;
mod lab_binary;
mod metrics_exposition;
mod metrics_live;
mod metrics_simulated_run;
mod operator_table;
mod operator_trust;
mod plot_svg;
mod sim_cli;
mod simulate_metrics;
mod state_dir;
mod state_file;
mod status_pricing;
