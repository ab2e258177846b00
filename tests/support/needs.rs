//! Gate of tests that need something outside the Rust toolchain (a command, a privilege).
//! Included with `#[path = "support/needs.rs"] mod needs;`.
//!
//! Each such test is marked `#[ignore = "needs X (how to get it): ... -- --include-ignored"]`,
//! so a plain `cargo test` reports it as ignored, never as passed, and `.ci/run` includes it
//! with `-- --include-ignored`. Once included, a test either runs or fails with what is
//! missing: the gate never returns early, so a test that was asked for and could not run is
//! a failure (under CI and everywhere else), not a silent "ok".

#![allow(dead_code)]

use std::process::{Command, Stdio};

/// True when `cmd args` runs and exits 0 (output discarded).
pub fn command_works(cmd: &str, args: &[&str]) -> bool {
    Command::new(cmd)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Fails `test` unless `cmd args` runs; `install` says how to get it.
pub fn require_command(test: &str, cmd: &str, args: &[&str], install: &str) {
    assert!(
        command_works(cmd, args),
        "{test}: was included (--include-ignored) but `{cmd} {}` does not run here: {install}",
        args.join(" ")
    );
}

/// The `unshare` prefix that gives a child a private mount namespace in which it may mount:
/// as root a plain mount namespace, otherwise inside a user namespace mapped to root.
pub fn private_mount_ns() -> Vec<&'static str> {
    if rustix::process::geteuid().is_root() {
        vec!["unshare", "--mount", "--propagation", "private", "--"]
    } else {
        vec![
            "unshare",
            "--user",
            "--map-root-user",
            "--mount",
            "--propagation",
            "private",
            "--",
        ]
    }
}

/// Fails `test` unless [`private_mount_ns`] can mount a tmpfs over `/run` for a child.
pub fn require_private_mount_ns(test: &str) {
    let prefix = private_mount_ns();
    let ok = Command::new(prefix[0])
        .args(&prefix[1..])
        .args(["sh", "-c", "mount -t tmpfs mergetune-test /run"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(
        ok,
        "{test}: was included (--include-ignored) but `{}` cannot mount a tmpfs here: needs \
         unshare (util-linux) and root or unprivileged user namespaces",
        prefix.join(" ")
    );
}
