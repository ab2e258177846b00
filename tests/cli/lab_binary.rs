//! The lab in its own binary: `mergetune` refuses a lab command as a usage error and names
//! the `mergetune-lab` command line that does it; `mergetune-lab` has its own man pages and
//! completions, generated as `mergetune`'s are.

use std::process::Command;

fn mergetune(args: &[&str]) -> (Option<i32>, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_mergetune"))
        .args(args)
        .output()
        .unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn a_lab_command_on_mergetune_names_the_lab_command_line_and_exits_2() {
    for (given, lab) in [
        (
            "-v advise t.txt --json",
            "mergetune-lab -v advise t.txt --json",
        ),
        (
            "calibrate --windows 3",
            "mergetune-lab calibrate --windows 3",
        ),
        (
            "trace capture --device sda --seconds 5",
            "mergetune-lab trace capture --device sda --seconds 5",
        ),
        (
            "simulate --compare --scale 0.1 --policy off a.toml --json",
            "mergetune-lab compare --scale 0.1 a.toml --json",
        ),
        (
            "simulate --compare --plot c.svg",
            "mergetune-lab compare --plot c.svg",
        ),
        (
            "simulate s.toml --plot s.svg --seed 3",
            "mergetune-lab simulate s.toml --plot s.svg --seed 3",
        ),
        (
            "replay r.jsonl --plot r.svg",
            "mergetune-lab replay r.jsonl --plot r.svg",
        ),
    ] {
        let args: Vec<&str> = given.split(' ').collect();
        let (code, out, err) = mergetune(&args);
        assert_eq!(code, Some(2), "{given}: {err}");
        assert!(out.is_empty(), "{given}: {out}");
        assert!(err.starts_with("mergetune: error: `"), "{given}: {err}");
        assert!(err.contains(&format!("run `{lab}`")), "{given}: {err}");
    }
}

#[test]
fn mergetune_offers_no_lab_command() {
    let (code, help, _) = mergetune(&["--help"]);
    assert_eq!(code, Some(0));
    for lab in ["advise", "calibrate", "trace", "--compare", "--plot"] {
        assert!(!help.contains(&format!("  {lab} ")), "{lab} in:\n{help}");
    }
    let (_, simulate, _) = mergetune(&["simulate", "--help"]);
    assert!(
        !simulate.contains("--compare") && !simulate.contains("--plot"),
        "{simulate}"
    );
}

#[test]
fn the_lab_has_its_own_man_pages_and_completions() {
    let d = tempfile::tempdir().unwrap();
    // `generate WHAT` into d/DIR, which must exit 0.
    let generate = |what: &str, dir: &str| {
        let o = crate::lab::lab()
            .args(["generate", what])
            .arg(d.path().join(dir))
            .output()
            .unwrap();
        assert!(o.status.success(), "{o:?}");
    };
    generate("man", "man");
    for page in [
        "mergetune-lab",
        "mergetune-lab-advise",
        "mergetune-lab-compare",
    ] {
        let text = std::fs::read_to_string(d.path().join(format!("man/{page}.1"))).unwrap();
        assert!(text.contains(".SH \"EXIT STATUS\""), "{page}");
    }
    let advise = std::fs::read_to_string(d.path().join("man/mergetune-lab-advise.1")).unwrap();
    assert!(advise.contains(".BR mergetune\\-lab (1)"), "{advise}");
    // The lab's tools run as any user: section 1; they name the daemon's page in 8.
    assert!(advise.contains(".TH mergetune-lab-advise 1"), "{advise}");
    assert!(advise.contains(".BR mergetune (8)"), "{advise}");
    assert!(!d.path().join("man/mergetune-lab-generate.1").exists());
    generate("completions", "comp");
    for f in ["mergetune-lab.bash", "_mergetune-lab", "mergetune-lab.fish"] {
        let s = std::fs::read_to_string(d.path().join("comp").join(f)).unwrap();
        assert!(s.contains("advise") && s.contains("compare"), "{f}");
        assert!(!s.contains("generate"), "{f} offers the hidden generate");
    }
}
