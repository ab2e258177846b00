//! The simulated block-device stack (see docs/simulator.md).
//!
//! An event-driven, single-threaded model of the Linux block layer in virtual time
//! (integer nanoseconds). Jobs (generators or a replayed kernel trace) submit bios; a batch
//! of submissions shares a plug; bios merge in the plug, through the one-hit `last_merge`
//! cache, the back-merge hash and the front-merge lookup, honouring `queue/nomerges` the way
//! the kernel does; requests wait in the I/O scheduler only while the device's tags are
//! busy; devices (rotational or SSD) complete them after a modelled service time; dm-linear
//! and dm-stripe devices split bios at chunk boundaries onto member devices.
//!
//! The [`Simulation`](engine::Simulation) implements [`mergetune_kernel::blockfs::BlockFs`], so the daemon's own loop and
//! policy ([`mergetune_daemon::controller::Controller`]) drive it exactly as they drive real devices:
//! the runner ([`runner::run_scenario`]) advances virtual time to each tick and calls
//! `controller.tick(now_ms, &mut sim)`. Nothing here reads the wall clock except the CLI
//! edge (progress bar, `--bench`).
//!
//! Memory is flat in run length: bios and requests live in slabs with free lists (only the
//! ones in flight exist), latencies go into fixed-size log-linear histograms.
#![forbid(unsafe_code)]

pub mod cost;
pub mod engine;
pub mod fs;
pub mod hist;
pub mod meter;
pub mod report;
pub mod rng;
pub mod runner;
pub mod scenario;
pub mod tap;
