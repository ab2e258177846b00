//! The command line as an operator meets it, run against the built binary on fake sysfs and
//! procfs trees: exit codes (0 ok, 1 error, 2 usage, 3 daemon not running), one line per
//! fatal error, `run --once --dry-run` showing the decision it would take and never talking
//! of restoring, one device table and one set of JSON field names for `run --once`,
//! `replay` and `status`, `status --config` taking the address from the config, test-only
//! flags kept out of `--help`, and the generated man pages and completions.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_mergetune"));
    c.env_remove("RUST_LOG")
        .env_remove("JOURNAL_STREAM")
        .env_remove("NOTIFY_SOCKET");
    c
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

use crate::command::{free_port, succeeded};
use crate::fakesys::Ticker;

/// A tree with one managed disk, `sda` (mq-deadline, front merges on, so L0), and a loop
/// device that is not managed; random writes on sda while [`random_traffic`] runs.
struct Tree {
    dir: tempfile::TempDir,
}

impl Tree {
    fn new() -> Tree {
        let dir = tempfile::tempdir().unwrap();
        for (name, sched) in [("sda", "none [mq-deadline] kyber"), ("loop0", "[none]")] {
            let q = dir.path().join("sys/block").join(name).join("queue");
            std::fs::create_dir_all(q.join("iosched")).unwrap();
            std::fs::write(q.join("nomerges"), "0\n").unwrap();
            std::fs::write(q.join("scheduler"), format!("{sched}\n")).unwrap();
            std::fs::write(q.join("rotational"), "0\n").unwrap();
            std::fs::write(q.join("iosched/front_merges"), "1\n").unwrap();
        }
        std::fs::create_dir_all(dir.path().join("proc")).unwrap();
        let t = Tree { dir };
        t.diskstats(0);
        t
    }
    fn p(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }
    fn diskstats(&self, writes: u64) {
        let tmp = self.p("proc/diskstats.tmp");
        std::fs::write(
            &tmp,
            format!(
                "   8 0 sda 0 0 0 0 {writes} 0 {} 0 0 0 0\n   7 0 loop0 0 0 0 0 0 0 0 0 0 0 0\n",
                writes * 8
            ),
        )
        .unwrap();
        std::fs::rename(&tmp, self.p("proc/diskstats")).unwrap();
    }
    /// A config for fast ticks: small windows, the endpoint at `listen`.
    fn config(&self, listen: &str) -> PathBuf {
        self.config_file(
            "mergetune.toml",
            &format!(
                "[policy]\nmin_window_bios = 10\n# priced in the 2008 figures, so that the ladder has a step to show\ncost_profile = \"lkml-2008\"\n\n[metrics]\nlisten = \"{listen}\"\n"
            ),
        )
    }
    /// The config file `name`: 50 ms ticks, the state directory in the tree, then `rest`.
    fn config_file(&self, name: &str, rest: &str) -> PathBuf {
        let path = self.p(name);
        std::fs::write(
            &path,
            format!(
                "[daemon]\ninterval_ms = 50\nstate_dir = \"{}\"\n\n{rest}",
                self.p("state").display()
            ),
        )
        .unwrap();
        path
    }
    fn roots(&self, c: &mut Command) {
        c.arg("--sysfs-root")
            .arg(self.p("sys"))
            .arg("--procfs-root")
            .arg(self.p("proc"));
    }
    fn nomerges(&self, dev: &str, file: &str) -> String {
        std::fs::read_to_string(self.p(&format!("sys/block/{dev}/queue/{file}")))
            .unwrap()
            .trim()
            .to_string()
    }
}

/// Random 4 KiB writes on sda (no merges): 100 more every 2 ms, until dropped.
fn random_traffic(t: &Tree) -> Ticker {
    let proc_ = t.p("proc");
    let mut writes = 0u64;
    Ticker::every(Duration::from_millis(2), move || {
        writes += 100;
        let text = format!(
            "   8 0 sda 0 0 0 0 {writes} 0 {} 0 0 0 0\n   7 0 loop0 0 0 0 0 0 0 0 0 0 0 0\n",
            writes * 8
        );
        let tmp = proc_.join("diskstats.traffic");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, proc_.join("diskstats")).unwrap();
    })
}

fn once(t: &Tree, extra: &[&str]) -> Output {
    let mut c = bin();
    c.args(["run", "--once", "--dry-run", "--config"])
        .arg(t.config(""))
        .args(extra);
    t.roots(&mut c);
    c.output().unwrap()
}

/// What a plain `run --once --dry-run` on `t` prints (stdout, stderr), asserting first that
/// it exited 0.
fn once_ok(t: &Tree) -> (String, String) {
    let o = once(t, &[]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    (out, err)
}

fn device_keys(v: &serde_json::Value) -> BTreeSet<String> {
    v["devices"][0]
        .as_object()
        .unwrap_or_else(|| panic!("no devices[0] in {v}"))
        .keys()
        .cloned()
        .collect()
}

#[test]
fn a_one_shot_dry_run_shows_the_decision_it_would_take_and_writes_nothing() {
    let t = Tree::new();
    let _traffic = random_traffic(&t);
    let (out, err) = once_ok(&t);
    // Three windows of 2 x 50 ms in which not one bio merged: straight from L0 to L3 (the
    // tap watches L3), marked as not taken.
    assert!(
        out.contains("decision(s) it would take (dry run: nothing was written)"),
        "{out}"
    );
    assert!(
        out.contains(
            "sda queue/nomerges 0 -> 2 [disable, dry-run]: no bio merged in 3 windows at L0"
        ),
        "{out}"
    );
    assert!(out.starts_with("DEVICE "), "the table first: {out}");
    assert!(out.contains("(dry-run: not written)"), "{out}");
    assert!(!err.to_lowercase().contains("restoring"), "{err}");
    assert!(!out.to_lowercase().contains("restor"), "{out}");
    assert_eq!(t.nomerges("sda", "iosched/front_merges"), "1");
    assert_eq!(t.nomerges("sda", "nomerges"), "0");
    assert!(!t.p("state/state.json").exists());
}

/// A look never writes: a live `run --once` once wrote 0 -> 2 and put it back a millisecond
/// later. Without `--dry-run` it decides as the daemon would, says so, and leaves every
/// tunable and the state directory as they were. Its log does not blame a
/// `[metrics] listen` the config never set for the endpoint being off.
#[test]
fn a_live_one_shot_look_decides_and_writes_nothing() {
    let t = Tree::new();
    let _traffic = random_traffic(&t);
    let mut c = bin();
    c.args(["--log-format", "text", "run", "--once", "--config"])
        .arg(t.config("127.0.0.1:0"));
    t.roots(&mut c);
    let o = c.output().unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    assert!(err.contains("--once writes nothing"), "{err}");
    assert!(
        err.contains("metrics endpoint off (--once: off unless --metrics-listen ADDR is given)"),
        "{err}"
    );
    assert!(
        out.contains("decision(s) it would take (dry run: nothing was written)")
            && out.contains("sda queue/nomerges 0 -> 2 [disable, dry-run]"),
        "{out}"
    );
    assert_eq!(t.nomerges("sda", "nomerges"), "0");
    assert_eq!(t.nomerges("sda", "iosched/front_merges"), "1");
    assert!(!t.p("state").exists(), "no state directory made");
}

#[test]
fn a_one_shot_look_at_an_idle_machine_says_why_nothing_would_change() {
    let t = Tree::new();
    let (out, _) = once_ok(&t);
    assert!(
        out.contains("no decision: 1 managed device(s) hold"),
        "{out}"
    );
    let sda = out.lines().find(|l| l.starts_with("sda ")).unwrap();
    assert!(sda.contains("idle window"), "{sda}");
    let lo = out.lines().find(|l| l.starts_with("loop0 ")).unwrap();
    assert!(
        lo.contains("excluded") && lo.contains("loop device"),
        "{lo}"
    );
}

#[test]
fn run_once_replay_and_status_share_the_table_and_the_json_fields() {
    let t = Tree::new();
    let rec = t.p("rec.jsonl");
    let o = {
        let _traffic = random_traffic(&t);
        once(&t, &["--json", "--record", rec.to_str().unwrap()])
    };
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    let run: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(run["dry_run"], true);
    assert_eq!(run["decisions"][0]["kind"], "disable", "{run}");
    let sda = run["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["device"] == "sda")
        .unwrap();
    assert_eq!(sda["status"], "managed");
    assert!(sda["last_reason"].is_string() && !sda.as_object().unwrap().contains_key("last"));

    let replay = bin()
        .args(["replay", "--json", "-c"])
        .arg(t.config(""))
        .arg(&rec)
        .output()
        .unwrap();
    assert!(replay.status.success(), "{}", text(&replay).1);
    let rep: serde_json::Value = serde_json::from_slice(&replay.stdout).unwrap();
    assert_eq!(device_keys(&rep), device_keys(&run));
    assert_eq!(rep["decisions"][0]["kind"], "step_down", "{rep}");

    // A daemon in dry run, asked through the address in its config.
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let cfg = t.config(&listen);
    let mut c = bin();
    c.args(["-q", "run", "--dry-run", "--config"]).arg(&cfg);
    t.roots(&mut c);
    let daemon = Killed(
        c.stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    // The endpoint answers from the start; the devices are there after the first tick.
    let st: serde_json::Value = loop {
        let o = bin()
            .args(["status", "--json", "--config"])
            .arg(&cfg)
            .output()
            .unwrap();
        if o.status.success() {
            let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
            if v["ticks"].as_u64() > Some(0) {
                break v;
            }
        } else {
            assert_eq!(o.status.code(), Some(3), "{:?}", text(&o));
        }
        assert!(Instant::now() < deadline, "status never answered");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(device_keys(&st), device_keys(&run));
    let table = bin().args(["status", "-c"]).arg(&cfg).output().unwrap();
    let (tout, _) = text(&table);
    assert!(table.status.success());
    // The same header as run --once's and replay's tables.
    let header = |s: &str| {
        s.lines()
            .find(|l| l.starts_with("DEVICE "))
            .map(str::to_string)
    };
    assert_eq!(header(&tout), header(&text(&replay_text(&t, &rec)).0));
    assert_eq!(header(&tout), header(&text(&once(&t, &[])).0));
    drop(daemon);
}

fn replay_text(t: &Tree, rec: &Path) -> Output {
    bin()
        .args(["replay", "--config"])
        .arg(t.config(""))
        .arg(rec)
        .output()
        .unwrap()
}

struct Killed(Child);
impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn exit_codes_say_ok_error_usage_and_not_running() {
    let t = Tree::new();
    // 3: nothing listens at the address the config names; the message names it.
    let port = free_port();
    let o = bin()
        .args(["status", "--config"])
        .arg(t.config(&format!("127.0.0.1:{port}")))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3), "{:?}", text(&o));
    assert!(text(&o).1.contains(&format!("127.0.0.1:{port}")));
    // 1: the endpoint is off in the config: status cannot ask.
    let o = bin()
        .args(["status", "--config"])
        .arg(t.config(""))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{:?}", text(&o));
    assert!(text(&o).1.contains("listen"), "{:?}", text(&o));
    // 2: usage.
    let o = bin().args(["run", "--bogus"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let o = bin().args(["run", "--json"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "--json needs --once");
    // 0 and 1 from check-config, in words and in JSON.
    let good = t.config("");
    let o = bin().arg("check-config").arg(&good).output().unwrap();
    assert_eq!(o.status.code(), Some(0));
    let bad = t.p("bad.toml");
    std::fs::write(
        &bad,
        "[policy]\nwindow_ticks = 0\ndisable_below_percent = 9.0\nenable_above_percent = 5.0\n",
    )
    .unwrap();
    let o = bin()
        .args(["check-config", "--json"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["ok"], false);
    let errors = v["errors"].as_array().unwrap();
    assert!(errors.len() >= 2, "every bad key: {v}");
    assert!(
        errors
            .iter()
            .any(|e| e.as_str().unwrap().contains("policy.window_ticks")),
        "{v}"
    );
    let o = bin()
        .args(["check-config", "--json"])
        .arg(&good)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (v["ok"].as_bool(), v["errors"].as_array().map(Vec::len)),
        (Some(true), Some(0))
    );
    // --help documents the codes.
    let help = text(&bin().arg("--help").output().unwrap()).0;
    assert!(
        help.contains("3  status: the daemon is not running"),
        "{help}"
    );
}

#[test]
fn a_fatal_error_is_said_once() {
    let o = bin()
        .args(["run", "--config", "/nonexistent/mergetune.toml"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let (out, err) = text(&o);
    assert_eq!(out, "");
    assert_eq!(
        err.matches("/nonexistent/mergetune.toml").count(),
        1,
        "{err}"
    );
    assert!(err.starts_with("mergetune: error: "), "{err}");
    // As one JSON line when the log is JSON lines.
    let o = bin()
        .args([
            "--log-format",
            "json",
            "run",
            "--config",
            "/nonexistent/x.toml",
        ])
        .output()
        .unwrap();
    let err = text(&o).1;
    assert_eq!(err.lines().count(), 1, "{err}");
    let v: serde_json::Value = serde_json::from_str(err.trim()).unwrap();
    assert_eq!(v["level"], "ERROR");
}

#[test]
fn test_only_roots_are_not_in_the_operators_help() {
    for cmd in ["run", "restore"] {
        let help = text(&bin().args([cmd, "--help"]).output().unwrap()).0;
        assert!(!help.contains("--sysfs-root"), "{cmd}: {help}");
        assert!(!help.contains("--procfs-root"), "{cmd}: {help}");
        assert!(help.contains("-c, --config"), "{cmd}: {help}");
    }
}

#[test]
fn man_pages_and_completions_come_from_the_command_line_definition() {
    let d = tempfile::tempdir().unwrap();
    let o = bin()
        .args(["generate", "man"])
        .arg(d.path().join("man"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{:?}", text(&o));
    // A daemon's pages are system administration, section 8 (man-pages(7)).
    let top = std::fs::read_to_string(d.path().join("man/mergetune.8")).unwrap();
    assert!(top.contains(".TH mergetune 8"), "{top}");
    assert!(top.contains(".BR mergetune\\-lab (1)"), "{top}");
    assert!(!d.path().join("man/mergetune.1").exists());
    assert!(top.contains(".SH \"EXIT STATUS\""), "{top}");
    let run = std::fs::read_to_string(d.path().join("man/mergetune-run.8")).unwrap();
    assert!(run.contains("dry\\-run"), "{run}");
    assert!(
        !run.contains("sysfs\\-root"),
        "a hidden flag in the man page"
    );
    assert!(
        !d.path().join("man/mergetune-generate.8").exists(),
        "the hidden generate command has no page"
    );
    succeeded(
        bin()
            .args(["generate", "completions"])
            .arg(d.path().join("comp")),
    );
    for f in ["mergetune.bash", "_mergetune", "mergetune.fish"] {
        let s = std::fs::read_to_string(d.path().join("comp").join(f)).unwrap();
        assert!(s.contains("check-config") && s.contains("--dry-run"), "{f}");
    }
}

/// The only colour is the level of a log line on a terminal; `NO_COLOR` turns it off. Run
/// under `script(1)` so that stderr is a terminal.
#[test]
fn no_color_turns_the_log_colours_off_on_a_terminal() {
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("SKIP: script(1) (util-linux) not installed");
        return;
    }
    let t = Tree::new();
    let cmdline = format!(
        "{} run --once --dry-run --config {} --sysfs-root {} --procfs-root {}",
        env!("CARGO_BIN_EXE_mergetune"),
        t.config("").display(),
        t.p("sys").display(),
        t.p("proc").display()
    );
    let under_tty = |no_color: Option<&str>| {
        let mut c = Command::new("script");
        c.args(["-qec", &cmdline, "/dev/null"])
            .env_remove("RUST_LOG")
            .env_remove("JOURNAL_STREAM")
            .env_remove("NO_COLOR")
            .stdin(Stdio::null());
        if let Some(v) = no_color {
            c.env("NO_COLOR", v);
        }
        let o = c.output().unwrap();
        assert!(o.status.success(), "{:?}", text(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let coloured = under_tty(None);
    assert!(coloured.contains("\x1b[32m INFO"), "{coloured:?}");
    let plain = under_tty(Some("1"));
    assert!(plain.contains(" INFO "), "{plain:?}");
    assert!(!plain.contains("\x1b[3"), "{plain:?}");
    // An empty NO_COLOR does not count (no-color.org).
    assert!(under_tty(Some("")).contains("\x1b[32m INFO"));
}

#[test]
fn where_nothing_prices_the_merge_path_a_one_shot_dry_run_says_the_saving_is_unknown() {
    // The shipped default (live pricing) in a world with no sampler: nothing is priced, so
    // the look says the saving is unknown (never "not worth it") and would write nothing.
    let t = Tree::new();
    let cfg = t.config_file(
        "measured.toml",
        "[policy]\nmin_window_bios = 10\n\n[metrics]\nlisten = \"\"\n",
    );
    let _traffic = random_traffic(&t);
    let mut c = bin();
    c.args(["run", "--once", "--dry-run", "--config"]).arg(&cfg);
    t.roots(&mut c);
    let o = c.output().unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    assert!(out.contains("[saving_unknown, dry-run]"), "{out}");
    assert!(out.contains("saving unknown"), "{out}");
    assert!(!out.contains("not worth it"), "{out}");
    assert!(!out.contains("front_merges 1 -> 0"), "{out}");
}
