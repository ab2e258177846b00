//! What `mergetune-lab compare` prints where: the report on stdout is deterministic (the same
//! bytes on every run, no wall-clock figure in it); progress (`[1/2] NAME 42%`) goes to
//! stderr on a terminal only, never on a pipe; the wall-clock figures go to stderr.

use std::path::Path;
use std::process::{Command, Output, Stdio};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Two shipped scenarios, each phase cut to its 10 s floor: about a second of work each.
const ARGS: [&str; 5] = [
    "compare",
    "--scale",
    "0.01",
    "config/scenarios/compare/backup.toml",
    "config/scenarios/compare/mix_noise.toml",
];

fn compare_on_pipes(extra: &[&str]) -> Output {
    crate::command::succeeded(
        crate::lab::lab()
            .args(ARGS)
            .args(extra)
            .current_dir(root())
            .stdin(Stdio::null()),
    )
}

#[test]
fn the_report_on_a_pipe_is_the_same_bytes_every_run_and_has_no_wall_clock() {
    let a = compare_on_pipes(&[]);
    let b = compare_on_pipes(&[]);
    let report = String::from_utf8(a.stdout.clone()).unwrap();
    assert!(report.contains("scenario backup"), "{report}");
    assert!(report.contains("scenario mix_noise"), "{report}");
    assert!(report.contains("adaptive"), "{report}");
    assert_eq!(a.stdout, b.stdout, "two runs printed different reports");
    for word in ["wall", "simulated s per s", "\r"] {
        assert!(!report.contains(word), "{word:?} in the report:\n{report}");
    }
    // The JSON document too.
    let ja = compare_on_pipes(&["--json"]);
    let jb = compare_on_pipes(&["--json"]);
    assert_eq!(ja.stdout, jb.stdout, "two runs printed different JSON");
    serde_json::from_slice::<serde_json::Value>(&ja.stdout).unwrap();
}

#[test]
fn on_a_pipe_stderr_has_no_progress_only_the_wall_clock_figures() {
    let out = compare_on_pipes(&[]);
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(!err.contains('\r'), "progress on a pipe: {err:?}");
    assert!(!err.contains("[1/2]"), "progress on a pipe: {err:?}");
    assert!(!err.contains("comparing"), "{err:?}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{err:?}");
    assert!(
        lines[0].starts_with("compared 2 scenario(s), 18 simulations, in ")
            && lines[0].contains(" s wall time (")
            && lines[0].ends_with(" simulated s per s)"),
        "{err:?}"
    );
}

/// The same run with stderr on a pseudo-terminal (util-linux `script`): progress per
/// scenario counts up to 100%, each scenario's wall time is said once, and the report on
/// stdout is the same bytes as on a pipe.
#[test]
fn on_a_terminal_stderr_shows_progress_per_scenario() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.txt");
    let cmd = format!(
        "{} {} > {}",
        crate::lab::lab_bin().display(),
        ARGS.join(" "),
        report.display()
    );
    let out = Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .current_dir(root())
        .stdin(Stdio::null())
        .output()
        .expect("script (util-linux) runs the command on a pseudo-terminal");
    assert!(out.status.success(), "{out:?}");
    let tty = String::from_utf8_lossy(&out.stdout);
    for want in [
        "\r[1/2] backup 0%",
        "\r[1/2] backup 42%",
        "\r[1/2] backup 100%",
        "\r[2/2] mix_noise 0%",
        "\r[2/2] mix_noise 100%",
        "[1/2] backup: ",
        "[2/2] mix_noise: ",
        "compared 2 scenario(s)",
    ] {
        assert!(tty.contains(want), "{want:?} not on the terminal: {tty:?}");
    }
    let piped = compare_on_pipes(&[]);
    assert_eq!(std::fs::read(&report).unwrap(), piped.stdout);
}
