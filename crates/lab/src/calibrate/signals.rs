//! The stop flag of a calibrate run: SIGINT and SIGTERM raise it, and the measurement
//! stops at its next step and puts the device back.

use anyhow::{Context, Result};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

/// A flag that SIGINT and SIGTERM raise.
pub(super) fn stop_on_signals() -> Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop)).context("signal handler")?;
    }
    Ok(stop)
}
