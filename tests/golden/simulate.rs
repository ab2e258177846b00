//! `simulate` over every shipped scenario, text and JSON, with the virtual-time log, and
//! `simulate --compare --json` over the shipped comparison suite.

use crate::{check_golden, mergetune, repo, tomls_in, transcript};

fn scenario_name(p: &std::path::Path) -> String {
    p.file_stem().unwrap().to_string_lossy().into_owned()
}

#[test]
fn the_default_scenario_says_what_it_said() {
    let out = mergetune().arg("simulate").output().unwrap();
    check_golden("simulate/default.txt", &transcript(&out));
}

#[test]
fn every_shipped_scenario_says_what_it_said_in_text_and_json() {
    for sc in tomls_in(&repo("config/scenarios")) {
        let name = scenario_name(&sc);
        let text = mergetune().arg("simulate").arg(&sc).output().unwrap();
        check_golden(&format!("simulate/{name}.txt"), &transcript(&text));
        let json = mergetune()
            .args(["simulate", "--json"])
            .arg(&sc)
            .output()
            .unwrap();
        check_golden(&format!("simulate/{name}.json.txt"), &transcript(&json));
    }
}

#[test]
fn the_other_controllers_say_what_they_said() {
    let sc = repo("config/scenarios/oltp_backup_alternating.toml");
    for policy in ["off", "static:1", "static:2"] {
        let out = mergetune()
            .args(["simulate", "--json", "--policy", policy])
            .arg(&sc)
            .output()
            .unwrap();
        let file = policy.replace(':', "_");
        check_golden(
            &format!("simulate/policy_{file}.json.txt"),
            &transcript(&out),
        );
    }
}

/// The whole shipped comparison suite (about 90 s of wall time in a release build).
#[test]
fn the_comparison_suite_gives_the_same_figures() {
    let out = mergetune()
        .args(["simulate", "--compare", "--json"])
        .output()
        .unwrap();
    check_golden("compare/suite.json.txt", &transcript(&out));
}
