//! `make install` / `make uninstall` into a staging directory: everything lands where the
//! unit expects it, the man pages and completions are generated from the binary, an existing
//! config is never overwritten, uninstall reverses install. Needs make, so it is
//! `#[ignore]`d: `.ci/run` includes it, and then a missing make fails it.

use crate::needs;

use std::path::Path;
use std::process::Command;

/// `make TARGET` into the staging directory `dest`, asserting that it exited 0.
fn make(dest: &Path, target: &str, extra: &[&str]) {
    crate::command::succeeded(
        Command::new("make")
            .arg("-s")
            .arg("-C")
            .arg(env!("CARGO_MANIFEST_DIR"))
            .arg(target)
            .arg(format!("DESTDIR={}", dest.display()))
            .arg(format!("BIN={}", env!("CARGO_BIN_EXE_mergetune")))
            .arg(format!("LABBIN={}", crate::lab::lab_bin().display()))
            .args(extra),
    );
}

#[test]
#[ignore = "needs make (apt-get install make): cargo test --release --test packaging -- systemd_install:: --include-ignored"]
#[allow(clippy::too_many_lines)] // a test reads best as one story
fn install_then_uninstall_into_a_staging_dir() {
    needs::require_command(
        "install_then_uninstall_into_a_staging_dir",
        "make",
        &["--version"],
        "apt-get install make",
    );
    let d = tempfile::tempdir().unwrap();
    let dest = d.path();
    make(dest, "install", &[]);
    for f in [
        "usr/local/bin/mergetune",
        "usr/local/bin/mergetune-lab",
        "etc/systemd/system/mergetune.service",
        "etc/mergetune/mergetune.toml",
        "usr/local/share/doc/mergetune/operator.md",
        "usr/local/share/doc/mergetune/metrics.md",
        "usr/local/share/doc/mergetune/hardening.md",
        "usr/local/share/doc/mergetune/mergetune.json",
        "usr/local/share/doc/mergetune/mergetune.toml.example",
        "usr/local/share/man/man8/mergetune.8",
        "usr/local/share/man/man8/mergetune-run.8",
        "usr/local/share/man/man8/mergetune-check-config.8",
        "usr/local/share/bash-completion/completions/mergetune",
        "usr/local/share/zsh/vendor-completions/_mergetune",
        "usr/local/share/fish/vendor_completions.d/mergetune.fish",
        "usr/local/share/man/man1/mergetune-lab.1",
        "usr/local/share/man/man1/mergetune-lab-calibrate.1",
        "usr/local/share/bash-completion/completions/mergetune-lab",
        "usr/local/share/zsh/vendor-completions/_mergetune-lab",
        "usr/local/share/fish/vendor_completions.d/mergetune-lab.fish",
    ] {
        assert!(dest.join(f).exists(), "{f} not installed");
    }
    // Generated from the binary's own command line: its options are in them.
    let man =
        std::fs::read_to_string(dest.join("usr/local/share/man/man8/mergetune-status.8")).unwrap();
    assert!(
        man.contains("\\-\\-config") && man.contains("EXIT STATUS"),
        "{man}"
    );
    let bash =
        std::fs::read_to_string(dest.join("usr/local/share/bash-completion/completions/mergetune"))
            .unwrap();
    assert!(bash.contains("--dry-run"), "{bash}");
    let unit = std::fs::read_to_string(dest.join("etc/systemd/system/mergetune.service")).unwrap();
    assert!(
        unit.contains(
            "ExecStart=/usr/local/bin/mergetune run --config /etc/mergetune/mergetune.toml"
        )
    );

    // An operator's config survives a reinstall.
    let cfg = dest.join("etc/mergetune/mergetune.toml");
    std::fs::write(&cfg, "[policy]\nenabled = false\n").unwrap();
    make(dest, "install", &[]);
    assert_eq!(
        std::fs::read_to_string(&cfg).unwrap(),
        "[policy]\nenabled = false\n"
    );

    // Another prefix: the unit follows.
    let d2 = tempfile::tempdir().unwrap();
    make(d2.path(), "install", &["PREFIX=/opt/mt"]);
    let unit =
        std::fs::read_to_string(d2.path().join("etc/systemd/system/mergetune.service")).unwrap();
    assert!(
        unit.contains("ExecStart=/opt/mt/bin/mergetune run"),
        "{unit}"
    );
    assert!(
        unit.contains("ExecStopPost=/opt/mt/bin/mergetune restore"),
        "{unit}"
    );

    make(dest, "uninstall", &[]);
    for installed in [
        "usr/local/bin/mergetune",
        "usr/local/bin/mergetune-lab",
        "usr/local/share/man/man1/mergetune-lab.1",
        "usr/local/share/bash-completion/completions/mergetune-lab",
        "etc/systemd/system/mergetune.service",
        "usr/local/share/doc/mergetune",
        "usr/local/share/man/man8/mergetune.8",
        "usr/local/share/man/man8/mergetune-run.8",
        "usr/local/share/bash-completion/completions/mergetune",
    ] {
        assert!(
            !dest.join(installed).exists(),
            "{installed} left by uninstall"
        );
    }
    assert!(cfg.exists(), "config kept without PURGE=1");
    make(dest, "uninstall", &["PURGE=1"]);
    assert!(!dest.join("etc/mergetune").exists());
}
