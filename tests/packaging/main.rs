//! Packaging and installation: the Debian package, the systemd unit, the installed docs, the Prometheus mixin and the dashboard.
//!
//! One test binary per kind of test (docs/testing.md, "Layout"): each file here is a module,
//! the shared harness is `tests/support/`.

#[path = "../support/command.rs"]
mod command;
#[path = "../support/lab.rs"]
mod lab;
#[path = "../support/needs.rs"]
mod needs;
#[path = "../support/repo.rs"]
mod repo;

mod deb_package;
mod grafana_dashboard;
mod installed_docs;
mod mixin;
mod systemd_install;
mod systemd_journal;
mod systemd_unit;
