//! `replay` of the real recordings in tests/fixtures/recordings (provenance in
//! tests/fixtures/README.md), as text and JSON, with the replayed-time log.

use crate::{check_golden, mergetune, repo};

fn recordings() -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(repo("tests/fixtures/recordings"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    v.sort();
    assert!(v.len() >= 3, "the recordings are missing: {v:?}");
    v
}

#[test]
fn every_recording_replays_to_the_same_decisions_and_table() {
    for rec in recordings() {
        let name = rec.file_stem().unwrap().to_string_lossy().into_owned();
        // The file name is printed: run from the fixture's directory so that it reads the
        // same on every checkout.
        let dir = rec.parent().unwrap();
        let file = rec.file_name().unwrap();
        let text = mergetune()
            .current_dir(dir)
            .arg("replay")
            .arg(file)
            .output()
            .unwrap();
        check_golden(&format!("replay/{name}.txt"), &crate::transcript(&text));
        let json = mergetune()
            .current_dir(dir)
            .args(["replay", "--json"])
            .arg(file)
            .output()
            .unwrap();
        check_golden(
            &format!("replay/{name}.json.txt"),
            &crate::transcript(&json),
        );
    }
}

#[test]
fn a_recording_replayed_with_another_config_says_so() {
    let dir = repo("tests/fixtures/recordings");
    let out = mergetune()
        .current_dir(&dir)
        .args([
            "replay",
            "randread_loop.jsonl",
            "-c",
            "../../../config/mergetune.toml",
        ])
        .output()
        .unwrap();
    check_golden(
        "replay/randread_loop_shipped_config.txt",
        &crate::transcript(&out),
    );
}
