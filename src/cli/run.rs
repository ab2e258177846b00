//! `mergetune run`: its flags are [`RunOptions`] (declared beside the entry point that takes
//! them, parsed by the command line); the daemon is assembled and run by
//! [`mergetune_export::entry::run`]; this turns the outcome into the exit code.

use crate::cli::common::{EXIT_ERROR, EXIT_OK};
use mergetune_export::entry::{Outcome, RunOptions};

pub fn run(args: RunOptions) -> anyhow::Result<i32> {
    let outcome = mergetune_export::entry::run(args)?;
    Ok(match outcome {
        Outcome::Restored => EXIT_OK,
        Outcome::RestoreFailed => EXIT_ERROR,
    })
}
