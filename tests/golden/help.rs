//! `--help` of every subcommand of both binaries: the man pages and completions are
//! generated from the same definitions, so this pins them too.

use crate::{check_golden, mergetune};

#[test]
fn every_subcommands_help_says_what_it_said() {
    // The lab's commands are `mergetune-lab`'s.
    let commands: [(bool, &[&str]); 11] = [
        (false, &[]),
        (false, &["run"]),
        (false, &["status"]),
        (false, &["restore"]),
        (false, &["check-config"]),
        (false, &["simulate"]),
        (false, &["replay"]),
        (true, &["advise"]),
        (true, &["calibrate"]),
        (true, &["trace"]),
        (true, &["trace", "capture"]),
    ];
    let mut all = String::new();
    for (lab, args) in commands {
        let (mut cmd, name) = if lab {
            (crate::lab::lab(), "mergetune-lab")
        } else {
            (mergetune(), "mergetune")
        };
        let out = cmd.args(args).arg("--help").output().unwrap();
        all.push_str(&format!(
            "=== {name} {} --help\n{}",
            args.join(" "),
            crate::transcript(&out)
        ));
    }
    check_golden("help.txt", &all);
}
