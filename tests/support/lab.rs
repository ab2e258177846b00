//! The lab's binary, `mergetune-lab`, for the tests of the root package. Cargo hands a test
//! only its own package's binaries (`CARGO_BIN_EXE_mergetune`), and the lab's is another
//! package's (lab-cli/, apart so that `mergetune` links no plotting code). So it is built
//! here, once per test binary, with the same cargo into the same target directory and
//! profile as `mergetune`, and run from beside it: a no-op when `cargo build` or `cargo
//! test` over the workspace already built it, and never a stale binary when they did not.

// Each test binary uses what it needs of this file.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The path of a current `mergetune-lab`.
pub fn lab_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(build)
}

/// `mergetune-lab`, to be given its arguments.
pub fn lab() -> Command {
    Command::new(lab_bin())
}

fn build() -> PathBuf {
    let mergetune = Path::new(env!("CARGO_BIN_EXE_mergetune"));
    let profile_dir = mergetune.parent().expect("the binary's directory");
    let target_dir = profile_dir.parent().expect("the target directory");
    let cargo = std::env::var_os("CARGO")
        .or_else(|| option_env!("CARGO").map(Into::into))
        .unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--quiet", "--package", "mergetune-lab-cli"])
        .args(["--bin", "mergetune-lab", "--manifest-path"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
        .arg("--target-dir")
        .arg(target_dir);
    match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => {}
        Some("release") => {
            cmd.arg("--release");
        }
        Some(p) => {
            cmd.args(["--profile", p]);
        }
        None => panic!("{}: no profile directory", mergetune.display()),
    }
    let status = cmd.status().expect("running cargo to build mergetune-lab");
    assert!(status.success(), "building mergetune-lab: {status}");
    profile_dir.join("mergetune-lab")
}
