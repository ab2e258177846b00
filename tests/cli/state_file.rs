//! The state file is outside input: `mergetune restore` (and the recovery at daemon start)
//! writes only the tunables mergetune manages, of plain device names, inside the sysfs
//! root, and reads every format version it ever wrote. Run against the built binary on a
//! fake sysfs tree; `MERGETUNE_BIN` runs the same checks against another binary (an older
//! release, to see them fail).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn bin() -> PathBuf {
    std::env::var_os("MERGETUNE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_mergetune")))
}

/// A sysfs tree with `sda` (nomerges `nm`, front_merges `fm`), a state dir, and a victim
/// file outside the tree.
struct Tree {
    root: tempfile::TempDir,
}

impl Tree {
    fn new(nm: &str, fm: &str) -> Tree {
        let root = tempfile::tempdir().unwrap();
        let q = root.path().join("sys/block/sda/queue");
        std::fs::create_dir_all(q.join("iosched")).unwrap();
        std::fs::write(q.join("nomerges"), format!("{nm}\n")).unwrap();
        std::fs::write(q.join("iosched/front_merges"), format!("{fm}\n")).unwrap();
        std::fs::create_dir_all(root.path().join("state")).unwrap();
        std::fs::write(root.path().join("victim"), "precious\n").unwrap();
        Tree { root }
    }
    fn p(&self, rel: &str) -> PathBuf {
        self.root.path().join(rel)
    }
    fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.p(rel))
            .unwrap()
            .trim()
            .to_string()
    }
    fn state(&self, text: &str) {
        std::fs::write(self.p("state/state.json"), text).unwrap();
    }
    fn restore(&self) -> Output {
        Command::new(bin())
            .args(["restore", "--state-dir"])
            .arg(self.p("state"))
            .arg("--sysfs-root")
            .arg(self.p("sys"))
            .output()
            .unwrap()
    }
}

use crate::command::text;

#[test]
fn restore_never_writes_a_path_the_state_file_names_outside_the_queue_tunables() {
    let t = Tree::new("2", "1");
    let victim = t.p("victim");
    let rel_victim = format!("../../../../../../../../../..{}", victim.display());
    t.state(&format!(
        r#"{{"version": 1, "pid": 1, "devices": {{
            "sda": {{
                "queue/nomerges": {{"original": "0", "last_written": "2"}},
                "{abs}": {{"original": "pwned", "last_written": null}},
                "{rel}": {{"original": "pwned", "last_written": null}},
                "queue/iosched/front_merges": {{"original": "1\nmore", "last_written": null}}
            }},
            "../../..{dir}": {{"victim": {{"original": "pwned", "last_written": null}}}}
        }}}}"#,
        abs = victim.display(),
        rel = rel_victim,
        dir = t.root.path().display(),
    ));
    let o = t.restore();
    let out = text(&o);
    assert_eq!(t.read("victim"), "precious", "{out}");
    assert_eq!(
        t.read("sys/block/sda/queue/nomerges"),
        "0",
        "the rest is restored: {out}"
    );
    assert!(
        out.contains("skipped"),
        "each refused entry is reported: {out}"
    );
    assert!(
        out.contains(&victim.display().to_string()),
        "naming it: {out}"
    );
    assert_eq!(
        o.status.code(),
        Some(1),
        "a tampered file is an error: {out}"
    );
}

#[test]
fn restore_refuses_a_tunable_that_is_a_symlink_out_of_the_queue() {
    let t = Tree::new("0", "1");
    let q = t.p("sys/block/sda/queue");
    std::fs::remove_file(q.join("nomerges")).unwrap();
    std::os::unix::fs::symlink(t.p("victim"), q.join("nomerges")).unwrap();
    std::fs::write(t.p("victim"), "2\n").unwrap();
    t.state(r#"{"version": 1, "pid": 1, "devices": {"sda": {"queue/nomerges": {"original": "0", "last_written": "2"}}}}"#);
    let o = t.restore();
    assert_eq!(t.read("victim"), "2", "{}", text(&o));
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("refused"), "{}", text(&o));
}

/// Each format version ever written is restored by this binary.
#[test]
fn restore_reads_every_state_format_version() {
    for v in ["v1", "v2"] {
        let t = Tree::new("2", "0");
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(format!("state_{v}.json"));
        t.state(&std::fs::read_to_string(fixture).unwrap());
        let o = t.restore();
        assert!(o.status.success(), "{v}: {}", text(&o));
        assert_eq!(t.read("sys/block/sda/queue/nomerges"), "0", "{v}");
        assert_eq!(
            t.read("sys/block/sda/queue/iosched/front_merges"),
            "1",
            "{v}"
        );
        assert!(!t.p("state/state.json").exists(), "{v}: nothing left");
    }
}

#[test]
fn a_state_file_from_a_newer_release_is_kept_and_named() {
    let t = Tree::new("2", "1");
    let newer = r#"{"version": 99, "pid": 1, "devices": {}}"#;
    t.state(newer);
    let o = t.restore();
    assert_ne!(o.status.code(), Some(0));
    assert!(text(&o).contains("newer mergetune"), "{}", text(&o));
    assert_eq!(
        std::fs::read_to_string(t.p("state/state.json")).unwrap(),
        newer
    );
}

#[test]
fn check_config_says_when_state_dir_is_outside_what_the_unit_lets_the_service_write() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("m.toml");
    std::fs::write(&cfg, "[daemon]\nstate_dir = \"/var/lib/mergetune\"\n").unwrap();
    let o = Command::new(bin())
        .arg("check-config")
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let out = text(&o);
    assert!(
        out.contains("daemon.state_dir") && out.contains("ReadWritePaths"),
        "{out}"
    );
}

/// A format 3 record names its disk, and only that disk is written. The fixture (a real
/// file, see tests/fixtures/README.md) stamped with another boot's id is left alone and
/// dropped; stamped with this boot's id it restores its original on the disk it names,
/// and not on a disk with another `diskseq` under the name.
#[test]
fn a_format_3_record_restores_only_to_the_disk_it_names() {
    let fixture = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/state_v3.json"),
    )
    .unwrap();
    let this_boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .unwrap()
        .trim()
        .to_string();
    let stamp = |boot: &str| fixture.replace("1253ffa3-1072-4ff7-8d91-f302f01930bd", boot);
    let stamped = stamp(&this_boot);
    let other_boot = stamp("00000000-0000-4000-8000-000000000000");
    // (file, diskseq under the name now, nomerges after restore)
    let cases = [
        (other_boot.as_str(), "195", "2"),
        (stamped.as_str(), "196", "2"),
        (stamped.as_str(), "195", "0"),
    ];
    for (doc, diskseq, want) in cases {
        let t = Tree::new("0", "1");
        let q = t.p("sys/block/loop0/queue");
        std::fs::create_dir_all(&q).unwrap();
        std::fs::write(q.join("nomerges"), "2\n").unwrap();
        std::fs::write(t.p("sys/block/loop0/dev"), "7:0\n").unwrap();
        std::fs::write(t.p("sys/block/loop0/diskseq"), format!("{diskseq}\n")).unwrap();
        t.state(doc);
        let o = t.restore();
        let out = text(&o);
        assert!(o.status.success(), "{out}");
        assert_eq!(t.read("sys/block/loop0/queue/nomerges"), want, "{out}");
        if want == "2" {
            assert!(out.contains("another disk has the name now"), "{out}");
        }
        assert!(!t.p("state/state.json").exists(), "{out}");
    }
}

/// Records anyone could have written are not restored from: a non-root user who can
/// write the state directory could otherwise have root write any value it likes.
#[test]
fn restore_refuses_records_in_a_directory_others_can_write() {
    use std::os::unix::fs::PermissionsExt;
    let t = Tree::new("0", "1");
    t.state(r#"{"version": 2, "pid": 1, "devices": {"sda": {"queue/nomerges": {"original": "2", "last_written": "0"}}}}"#);
    std::fs::set_permissions(t.p("state"), std::fs::Permissions::from_mode(0o777)).unwrap();
    let o = t.restore();
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert_eq!(
        t.read("sys/block/sda/queue/nomerges"),
        "0",
        "nothing written: {out}"
    );
    assert!(
        out.contains(&*t.p("state").to_string_lossy()) && out.contains("mode 0777"),
        "{out}"
    );
    assert!(
        t.p("state/state.json").exists(),
        "the file is kept for a look"
    );
}
