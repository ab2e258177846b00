//! Real-kernel tests: loop devices, fio and tracefs on this machine's kernel. Each is `#[ignore]`d (a skip reads as skipped); run them as root with
//! `MERGETUNE_KERNEL_TESTS=1 cargo test --release --test real_kernel -- --include-ignored`, which makes a test that cannot run fail.
//!
//! One test binary per kind of test (docs/testing.md, "Layout"): each file here is a module,
//! the shared harness is `tests/support/`.

#[path = "../support/kernel.rs"]
mod kernel;
#[path = "../support/lab.rs"]
mod lab;
#[path = "../support/needs.rs"]
mod needs;

mod real_kernel_abtest;
mod real_kernel_calibrate;
mod real_kernel_capture;
mod real_kernel_compare;
mod real_kernel_daemon;
mod real_kernel_facts;
mod real_kernel_live;
mod real_kernel_price_per_device;
mod real_kernel_same_signature;
mod real_kernel_sense;
mod real_kernel_sigkill;
mod real_kernel_steady;
mod real_kernel_tap_agreement;
mod sim_real_kernel;
