//! `--help` of every subcommand: the man pages and completions are generated from the same
//! definition, so this pins them too.

use crate::{check_golden, mergetune};

#[test]
fn every_subcommands_help_says_what_it_said() {
    let commands: [&[&str]; 11] = [
        &[],
        &["run"],
        &["status"],
        &["restore"],
        &["check-config"],
        &["simulate"],
        &["replay"],
        &["advise"],
        &["calibrate"],
        &["trace"],
        &["trace", "capture"],
    ];
    let mut all = String::new();
    for args in commands {
        let out = mergetune().args(args).arg("--help").output().unwrap();
        all.push_str(&format!(
            "=== mergetune {} --help\n{}",
            args.join(" "),
            crate::transcript(&out)
        ));
    }
    check_golden("help.txt", &all);
}
