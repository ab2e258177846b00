//! The Debian package (packaging/build-deb): built from the test binaries into a temp dir, it
//! holds both binaries (mergetune, mergetune-lab) in /usr/bin, the unit in /lib/systemd/system with ExecStart and
//! ExecStopPost naming that binary, the config as a conffile, the docs and the dashboard in
//! /usr/share/doc/mergetune, the generated man pages (gzipped) and shell completions, and
//! maintainer scripts that enable/start on install and restore
//! on remove. Needs dpkg-deb and dpkg-shlibdeps (skipped with a message where they are
//! missing: not a Debian system); lintian, where installed, must report no error. Installing
//! it under a real systemd is the VM lab's job (vmlab/run, docs/testing.md).

use std::path::Path;
use std::process::Command;

fn have(tool: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .output()
        .is_ok_and(|o| o.status.success())
}

fn build(out: &Path) -> std::path::PathBuf {
    let o = crate::command::succeeded(
        Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/build-deb"))
            .args(["--no-build", "--out"])
            .arg(out)
            .arg("--bin")
            .arg(env!("CARGO_BIN_EXE_mergetune"))
            .arg("--lab-bin")
            .arg(crate::lab::lab_bin()),
    );
    let path = String::from_utf8_lossy(&o.stdout)
        .lines()
        .last()
        .unwrap()
        .to_string();
    std::path::PathBuf::from(path)
}

fn dpkg_deb(args: &[&str], deb: &Path) -> String {
    let o = Command::new("dpkg-deb")
        .args(args)
        .arg(deb)
        .output()
        .unwrap();
    assert!(o.status.success(), "dpkg-deb {args:?} failed");
    String::from_utf8(o.stdout).unwrap()
}

/// `deb` unpacked by `dpkg-deb flag` into a new temporary directory: `-e` the control
/// members, `-x` the files.
fn unpacked(deb: &Path, flag: &str) -> tempfile::TempDir {
    let x = tempfile::tempdir().unwrap();
    let o = Command::new("dpkg-deb")
        .arg(flag)
        .arg(deb)
        .arg(x.path())
        .output()
        .unwrap();
    assert!(o.status.success());
    x
}

fn member(deb: &Path, name: &str) -> String {
    let x = unpacked(deb, "-e");
    std::fs::read_to_string(x.path().join(name)).unwrap_or_default()
}

fn file_in(deb: &Path, path: &str) -> String {
    let x = unpacked(deb, "-x");
    std::fs::read_to_string(x.path().join(path)).unwrap()
}

#[test]
#[allow(clippy::too_many_lines)] // a test reads best as one story
fn package_has_the_debian_layout_and_scripts() {
    if !have("dpkg-deb") || !have("dpkg-shlibdeps") {
        eprintln!("SKIP: dpkg-deb/dpkg-shlibdeps not installed (apt-get install dpkg-dev)");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let deb = build(d.path());
    assert!(
        deb.file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("mergetune_")
    );

    let list = dpkg_deb(&["-c"], &deb);
    for f in [
        "./usr/bin/mergetune",
        "./usr/bin/mergetune-lab",
        "./lib/systemd/system/mergetune.service",
        "./etc/mergetune/mergetune.toml",
        "./usr/share/doc/mergetune/operator.md",
        "./usr/share/doc/mergetune/hardening.md",
        "./usr/share/doc/mergetune/metrics.md",
        "./usr/share/doc/mergetune/policy.md",
        "./usr/share/doc/mergetune/mergetune.json",
        "./usr/share/doc/mergetune/mergetune.toml.example",
        "./usr/share/doc/mergetune/fleet.md",
        "./usr/share/doc/mergetune/mixin/prometheus_alerts.yaml",
        "./usr/share/doc/mergetune/mixin/prometheus_rules.yaml",
        "./usr/share/doc/mergetune/copyright",
        "./usr/share/doc/mergetune/changelog.gz",
        "./usr/share/man/man8/mergetune.8.gz",
        "./usr/share/man/man8/mergetune-run.8.gz",
        "./usr/share/man/man8/mergetune-status.8.gz",
        "./usr/share/bash-completion/completions/mergetune",
        "./usr/share/zsh/vendor-completions/_mergetune",
        "./usr/share/fish/vendor_completions.d/mergetune.fish",
        "./usr/share/man/man1/mergetune-lab.1.gz",
        "./usr/share/man/man1/mergetune-lab-advise.1.gz",
        "./usr/share/man/man1/mergetune-lab-compare.1.gz",
        "./usr/share/bash-completion/completions/mergetune-lab",
        "./usr/share/zsh/vendor-completions/_mergetune-lab",
        "./usr/share/fish/vendor_completions.d/mergetune-lab.fish",
    ] {
        assert!(
            list.lines().any(|l| l.ends_with(f)),
            "{f} not in the package:\n{list}"
        );
    }
    // The daemon's pages in section 8 only, the lab's in 1.
    assert!(!list.contains("/man1/mergetune.1") && !list.contains("/man1/mergetune-run.1"));
    // Every man page compressed (Debian policy 12.1), none left plain.
    assert!(
        !list
            .lines()
            .any(|l| (l.contains("/man1/") && l.ends_with(".1"))
                || (l.contains("/man8/") && l.ends_with(".8"))),
        "{list}"
    );
    // The pages are the binary's own: generated from its command-line definition.
    let x = tempfile::tempdir().unwrap();
    assert!(
        Command::new("dpkg-deb")
            .arg("-x")
            .arg(&deb)
            .arg(x.path())
            .status()
            .unwrap()
            .success()
    );
    let gz = Command::new("gzip")
        .arg("-dc")
        .arg(x.path().join("usr/share/man/man8/mergetune-run.8.gz"))
        .output()
        .unwrap();
    let page = String::from_utf8(gz.stdout).unwrap();
    assert!(
        page.contains("\\-\\-dry\\-run") && page.contains("EXIT STATUS"),
        "{page}"
    );
    // Owned by root whoever built it; nothing under /usr/local or /etc/systemd.
    assert!(list.lines().all(|l| l.contains(" root/root ")), "{list}");
    assert!(!list.contains("./usr/local/") && !list.contains("./etc/systemd/"));

    let unit = file_in(&deb, "lib/systemd/system/mergetune.service");
    assert!(
        unit.contains(
            "\nExecStart=/usr/bin/mergetune run --config /etc/mergetune/mergetune.toml\n"
        )
    );
    assert!(unit.contains(
        "\nExecStopPost=/usr/bin/mergetune restore --config /etc/mergetune/mergetune.toml\n"
    ));
    assert!(unit.contains("file:///usr/share/doc/mergetune/operator.md"));
    assert!(
        !unit.contains("/usr/local"),
        "a /usr/local path left in the unit"
    );
    // The same unit as make install's, but for the paths.
    let source = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("systemd/mergetune.service"),
    )
    .unwrap();
    assert_eq!(
        unit,
        source
            .replace("/usr/local/bin/mergetune", "/usr/bin/mergetune")
            .replace("/usr/local/share/doc/mergetune", "/usr/share/doc/mergetune")
    );
    let config = file_in(&deb, "etc/mergetune/mergetune.toml");
    let example = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("config/mergetune.toml"),
    )
    .unwrap();
    assert_eq!(config, example);

    let control = dpkg_deb(&["-f"], &deb);
    assert!(control.contains("Package: mergetune\n"));
    assert!(control.contains("Depends: libc6"), "{control}");
    assert_eq!(
        member(&deb, "conffiles").trim(),
        "/etc/mergetune/mergetune.toml"
    );

    let postinst = member(&deb, "postinst");
    assert!(postinst.contains("deb-systemd-helper enable 'mergetune.service'"));
    assert!(postinst.contains("systemctl --system daemon-reload"));
    assert!(postinst.contains("deb-systemd-invoke $_action 'mergetune.service'"));
    let prerm = member(&deb, "prerm");
    assert!(prerm.contains("deb-systemd-invoke stop 'mergetune.service'"));
    assert!(prerm.contains("mergetune -q restore || true"));
    let postrm = member(&deb, "postrm");
    assert!(postrm.contains("deb-systemd-helper purge 'mergetune.service'"));
    for (name, script) in [
        ("postinst", &postinst),
        ("prerm", &prerm),
        ("postrm", &postrm),
    ] {
        assert!(script.starts_with("#!/bin/sh\n"), "{name}");
        let o = Command::new("sh")
            .arg("-n")
            .arg("-c")
            .arg(script.as_str())
            .output()
            .unwrap();
        assert!(o.status.success(), "{name}: sh -n failed");
    }

    if have("lintian") {
        let o = Command::new("lintian")
            .args(["--fail-on", "error"])
            .arg(&deb)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "lintian errors:\n{}",
            String::from_utf8_lossy(&o.stdout)
        );
    } else {
        eprintln!("note: lintian not installed; not run");
    }
}
