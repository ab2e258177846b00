//! `restore` of the state files of every format (tests/fixtures/state_v*.json) on a fake
//! sysfs tree: what it says and what it leaves in the tree.

use crate::{check_golden, mergetune, repo, transcript};
use std::path::Path;

const FIXTURE_BOOT: &str = "1253ffa3-1072-4ff7-8d91-f302f01930bd";
const OTHER_BOOT: &str = "00000000-0000-4000-8000-000000000000";

/// A fake sysfs tree with `sda` (mq-deadline) and `loop0` at the given diskseq.
fn tree(root: &Path, diskseq: &str) {
    let sda = root.join("sys/block/sda/queue");
    std::fs::create_dir_all(sda.join("iosched")).unwrap();
    std::fs::write(sda.join("nomerges"), "2\n").unwrap();
    std::fs::write(sda.join("iosched/front_merges"), "0\n").unwrap();
    let lp = root.join("sys/block/loop0");
    std::fs::create_dir_all(lp.join("queue")).unwrap();
    std::fs::write(lp.join("queue/nomerges"), "2\n").unwrap();
    std::fs::write(lp.join("dev"), "7:0\n").unwrap();
    std::fs::write(lp.join("diskseq"), format!("{diskseq}\n")).unwrap();
    let state = root.join("state");
    std::fs::create_dir_all(&state).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).unwrap();
}

fn restore_case(state_json: &str, diskseq: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    tree(root, diskseq);
    std::fs::write(root.join("state/state.json"), state_json).unwrap();
    let out = mergetune()
        .args(["restore", "--state-dir"])
        .arg(root.join("state"))
        .arg("--sysfs-root")
        .arg(root.join("sys"))
        .output()
        .unwrap();
    let read = |rel: &str| {
        std::fs::read_to_string(root.join(rel))
            .map_or_else(|e| format!("({e})"), |s| s.trim().to_string())
    };
    let mut said = transcript(&out);
    said.push_str(&format!(
        "--- after\nsda nomerges {}, front_merges {}; loop0 nomerges {}; state.json left: {}\n",
        read("sys/block/sda/queue/nomerges"),
        read("sys/block/sda/queue/iosched/front_merges"),
        read("sys/block/loop0/queue/nomerges"),
        root.join("state/state.json").exists(),
    ));
    let this_boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let mut said = said.replace(&root.display().to_string(), "<tmp>");
    if !this_boot.is_empty() {
        said = said.replace(&this_boot, "<this boot>");
    }
    said
}

#[test]
fn every_state_format_restores_as_it_did() {
    let fixture =
        |v: &str| std::fs::read_to_string(repo(&format!("tests/fixtures/state_{v}.json"))).unwrap();
    let this_boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .unwrap()
        .trim()
        .to_string();
    let v3 = fixture("v3");
    let cases = [
        ("v1", fixture("v1"), "195"),
        ("v2", fixture("v2"), "195"),
        ("v3_other_boot", v3.replace(FIXTURE_BOOT, OTHER_BOOT), "195"),
        (
            "v3_this_boot_same_disk",
            v3.replace(FIXTURE_BOOT, &this_boot),
            "195",
        ),
        (
            "v3_this_boot_other_disk",
            v3.replace(FIXTURE_BOOT, &this_boot),
            "196",
        ),
        (
            "newer_version",
            r#"{"version": 99, "pid": 1, "devices": {}}"#.to_string(),
            "195",
        ),
        ("not_json", "{\"version\": 3, \"pid\": ".to_string(), "195"),
    ];
    let mut all = String::new();
    for (name, doc, diskseq) in cases {
        all.push_str(&format!("=== {name}\n{}", restore_case(&doc, diskseq)));
    }
    check_golden("state/restore.txt", &all);
}
