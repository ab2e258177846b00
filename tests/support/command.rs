//! Running the built binary, or a tool, in a test: what it printed once it has exited 0,
//! and its stderr in the failure message when it has not.

use std::process::{Command, Output};

/// `cmd`'s output, asserting first that it exited 0 (the assertion shows its stderr).
pub fn succeeded(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}
