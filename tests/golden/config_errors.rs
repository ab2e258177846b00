//! `mergetune check-config FILE` over bad config files (every section and key: unknown keys
//! and sections, wrong types, out-of-range values, rules between keys, syntax errors with
//! their line and column, unreadable files, bad cost profiles) and a few good ones, with
//! exit code, stdout and stderr pinned in `config_errors.txt`; and `mergetune run --once
//! --dry-run -c FILE` over five of the bad ones, which must refuse them before it looks at
//! any device (`config_errors_run.txt`).
//!
//! Every file is written to one temporary directory, whose path reads `<tmp>` in the golden
//! files. The binary runs with an empty environment (no `RUST_LOG`, no `JOURNAL_STREAM`:
//! the log goes to stderr as text), and `run` with `--sysfs-root`/`--procfs-root` pointing
//! into the temporary directory, so that a config wrongly accepted could still not read the
//! host's devices. The valid configs use the `live` pricing or the stated `lkml-2008`
//! profile, whose summaries do not depend on the running kernel.

use std::path::Path;
use std::process::{Command, Output};

/// What a case's FILE is.
enum Body {
    /// A config text, shown in the golden file.
    Text(&'static str),
    /// A long text, not shown: the golden file says what it is instead (not its size: the
    /// shipped config's comments may change without its behaviour changing).
    Quiet(String, &'static str),
    /// Raw bytes (not UTF-8), shown lossily.
    Bytes(&'static [u8]),
    /// Nothing at that path.
    Missing,
    /// A directory at that path.
    Directory,
}

struct Case {
    name: &'static str,
    body: Body,
}

fn case(name: &'static str, text: &'static str) -> Case {
    Case {
        name,
        body: Body::Text(text),
    }
}

fn repo_file(rel: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(rel))
        .unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The cost profiles the cases name by a path relative to the config (written next to
/// the configs before any case runs): a stated profile that is valid, one that fails its
/// validation, and one that is not TOML.
fn profile_files() -> Vec<(&'static str, String)> {
    let stated = repo_file("config/cost-profiles/lkml-2008.toml");
    assert!(stated.contains("\nreps = 25\n"), "lkml-2008.toml changed");
    vec![
        ("profile-stated.toml", stated.clone()),
        (
            "profile-no-reps.toml",
            stated.replace("\nreps = 25\n", "\nreps = 0\n"),
        ),
        (
            "profile-broken.toml",
            "name = \"broken\"\nmethod = stated\n".to_string(),
        ),
    ]
}

/// The bad configs: at least one per key of every section, and the file-level failures.
#[allow(clippy::too_many_lines)] // a table of cases, read one after another
fn bad_cases() -> Vec<Case> {
    vec![
        // The file and its syntax.
        case("empty_file", ""),
        case("only_a_comment", "# nothing here\n"),
        case(
            "syntax_missing_value",
            "[daemon]\ninterval_ms = 1000\nrescan_every_ticks =\n",
        ),
        case(
            "syntax_unclosed_string",
            "[metrics]\nlisten = \"127.0.0.1:9725\n\n[policy]\nenabled = true\n",
        ),
        case(
            "syntax_unclosed_table_header",
            "[daemon\ninterval_ms = 1000\n",
        ),
        case(
            "syntax_duplicate_key",
            "[policy]\nwindow_ticks = 2\nmin_window_bios = 100\nwindow_ticks = 3\n",
        ),
        case(
            "syntax_duplicate_section",
            "[daemon]\ninterval_ms = 1000\n[daemon]\nrescan_every_ticks = 5\n",
        ),
        case(
            "syntax_two_errors",
            "[daemon]\ninterval_ms = 10 00\n[policy]\nenabled = tru\n",
        ),
        Case {
            name: "not_utf8",
            body: Body::Bytes(b"[daemon]\ninterval_ms = 1000\n# caf\xe9\n"),
        },
        Case {
            name: "missing_file",
            body: Body::Missing,
        },
        Case {
            name: "directory",
            body: Body::Directory,
        },
        Case {
            name: "too_large",
            body: Body::Quiet(
                format!("# {}\n", "x".repeat(1 << 20)),
                "a comment line of 1 MiB and 3 bytes: over the 1 MiB limit",
            ),
        },
        // Structure: sections and keys.
        case("unknown_section", "[deamon]\ninterval_ms = 1000\n"),
        case("top_level_key", "interval_ms = 1000\n"),
        case("section_not_a_table", "daemon = 5\n"),
        case(
            "unknown_key_with_control_character",
            "[policy]\n\"enabled\\u001b[31m\" = true\n",
        ),
        case(
            "many_errors_in_file_order",
            "[slices]\nwindows = 0\n[daemon]\ninterval_ms = 1\nbogus = 1\n[policy]\nwindow_ticks = \"two\"\ndisabled_nomerges = 7\n[metrics]\nlisten = \"nowhere\"\n",
        ),
        // [daemon]
        case("daemon_unknown_key", "[daemon]\nintervall_ms = 1000\n"),
        case("daemon_interval_ms_too_low", "[daemon]\ninterval_ms = 5\n"),
        case(
            "daemon_interval_ms_too_high",
            "[daemon]\ninterval_ms = 3600001\n",
        ),
        case(
            "daemon_interval_ms_wrong_type",
            "[daemon]\ninterval_ms = \"1000\"\n",
        ),
        case(
            "daemon_interval_ms_negative",
            "[daemon]\ninterval_ms = -1\n",
        ),
        case(
            "daemon_interval_ms_float",
            "[daemon]\ninterval_ms = 1000.5\n",
        ),
        case(
            "daemon_state_dir_relative",
            "[daemon]\nstate_dir = \"run/mergetune\"\n",
        ),
        case("daemon_state_dir_empty", "[daemon]\nstate_dir = \"\"\n"),
        case(
            "daemon_state_dir_newline",
            "[daemon]\nstate_dir = \"/run/merge\\ntune\"\n",
        ),
        case(
            "daemon_state_dir_nul",
            "[daemon]\nstate_dir = \"/run/merge\\u0000tune\"\n",
        ),
        case("daemon_state_dir_wrong_type", "[daemon]\nstate_dir = 1\n"),
        case(
            "daemon_rescan_every_ticks_zero",
            "[daemon]\nrescan_every_ticks = 0\n",
        ),
        // [devices]
        case(
            "devices_unknown_key",
            "[devices]\nexclude_devices = [\"sda\"]\n",
        ),
        case(
            "devices_include_path",
            "[devices]\ninclude = [\"sd*\", \"/dev/sdb\"]\n",
        ),
        case(
            "devices_include_empty_pattern",
            "[devices]\ninclude = [\"\"]\n",
        ),
        case(
            "devices_include_not_a_list",
            "[devices]\ninclude = \"sd*\"\n",
        ),
        case(
            "devices_include_list_of_numbers",
            "[devices]\ninclude = [1, 2]\n",
        ),
        case(
            "devices_exclude_bad_glob",
            "[devices]\nexclude = [\"nvme[0\"]\n",
        ),
        case(
            "devices_exclude_path_and_bad_glob",
            "[devices]\nexclude = [\"loop*\", \"a/[b\"]\n",
        ),
        // [policy]
        case("policy_unknown_key", "[policy]\nenable = false\n"),
        case("policy_enabled_wrong_type", "[policy]\nenabled = \"yes\"\n"),
        case("policy_window_ticks_zero", "[policy]\nwindow_ticks = 0\n"),
        case(
            "policy_window_ticks_u32_max",
            "[policy]\nwindow_ticks = 4294967295\n",
        ),
        case(
            "policy_window_ticks_beyond_toml",
            "[policy]\nwindow_ticks = 99999999999999999999\n",
        ),
        case(
            "policy_window_longer_than_a_day",
            "[daemon]\ninterval_ms = 3600000\n[policy]\nwindow_ticks = 25\n",
        ),
        case(
            "policy_step_down_after_windows_u32_max",
            "[policy]\nstep_down_after_windows = 4294967295\n",
        ),
        case(
            "policy_min_window_bios_beyond_i64",
            "[policy]\nmin_window_bios = 18446744073709551615\n",
        ),
        case(
            "daemon_rescan_every_ticks_over_u32",
            "[daemon]\nrescan_every_ticks = 5000000000\n",
        ),
        case(
            "policy_min_window_bios_zero",
            "[policy]\nmin_window_bios = 0\n",
        ),
        case(
            "policy_disable_below_percent_over_100",
            "[policy]\ndisable_below_percent = 101.0\n",
        ),
        case(
            "policy_enable_above_percent_nan",
            "[policy]\nenable_above_percent = nan\n",
        ),
        case(
            "policy_enable_above_percent_inf",
            "[policy]\ndisable_below_percent = 1.0\nenable_above_percent = inf\n",
        ),
        case(
            "policy_thresholds_equal",
            "[policy]\ndisable_below_percent = 5.0\nenable_above_percent = 5.0\n",
        ),
        case(
            "policy_enable_above_under_default_disable_below",
            "[policy]\nenable_above_percent = 0.5\n",
        ),
        case(
            "policy_disable_below_over_default_enable_above",
            "[policy]\ndisable_below_percent = 7.5\n",
        ),
        case(
            "policy_step_down_after_windows_zero",
            "[policy]\nstep_down_after_windows = 0\n",
        ),
        case(
            "policy_disable_after_windows_zero",
            "[policy]\ndisable_after_windows = 0\n",
        ),
        case(
            "policy_disabled_nomerges_zero",
            "[policy]\ndisabled_nomerges = 0\n",
        ),
        case(
            "policy_disabled_nomerges_three",
            "[policy]\ndisabled_nomerges = 3\n",
        ),
        case(
            "policy_disabled_nomerges_over_u8",
            "[policy]\ndisabled_nomerges = 300\n",
        ),
        case(
            "policy_min_dwell_secs_over_a_year",
            "[policy]\nmin_dwell_secs = 31536001\n",
        ),
        case(
            "policy_probe_initial_backoff_secs_zero",
            "[policy]\nprobe_initial_backoff_secs = 0\n",
        ),
        case(
            "policy_probe_max_under_initial",
            "[policy]\nprobe_initial_backoff_secs = 600\nprobe_max_backoff_secs = 300\n",
        ),
        case(
            "policy_probe_max_under_default_initial",
            "[policy]\nprobe_max_backoff_secs = 60\n",
        ),
        case(
            "policy_probe_backoffs_over_a_year",
            "[policy]\nprobe_initial_backoff_secs = 40000000\nprobe_max_backoff_secs = 50000000\n",
        ),
        case("policy_probe_windows_zero", "[policy]\nprobe_windows = 0\n"),
        case(
            "policy_probe_windows_over_1000",
            "[policy]\nprobe_windows = 1001\n",
        ),
        case(
            "policy_l3_watch_interval_ms_too_low",
            "[policy]\nl3_watch_interval_ms = 5\n",
        ),
        case(
            "policy_trial_max_extra_requests_percent_negative",
            "[policy]\ntrial_max_extra_requests_percent = -1.0\n",
        ),
        case(
            "policy_max_changes_per_hour_one",
            "[policy]\nmax_changes_per_hour = 1\n",
        ),
        case(
            "policy_cost_profile_unknown_name",
            "[policy]\ncost_profile = \"measured\"\n",
        ),
        case(
            "policy_cost_profile_empty",
            "[policy]\ncost_profile = \"\"\n",
        ),
        case(
            "policy_cost_profile_nul",
            "[policy]\ncost_profile = \"a\\u0000.toml\"\n",
        ),
        case(
            "policy_cost_profile_missing_file",
            "[policy]\ncost_profile = \"profiles/none.toml\"\n",
        ),
        case(
            "policy_cost_profile_not_toml",
            "[policy]\ncost_profile = \"profile-broken.toml\"\n",
        ),
        case(
            "policy_cost_profile_invalid",
            "[policy]\ncost_profile = \"profile-no-reps.toml\"\n",
        ),
        case(
            "policy_cost_profile_with_other_errors",
            "[policy]\nwindow_ticks = 0\ncost_profile = \"./profile-no-reps.toml\"\n",
        ),
        // [pricing]
        case("pricing_unknown_key", "[pricing]\nfloor_percent = 0.5\n"),
        case(
            "pricing_floor_zero",
            "[pricing]\nsaving_floor_percent_cpu = 0.0\n",
        ),
        case(
            "pricing_floor_negative",
            "[pricing]\nsaving_floor_percent_cpu = -0.5\n",
        ),
        case(
            "pricing_floor_over_100",
            "[pricing]\nsaving_floor_percent_cpu = 100.5\n",
        ),
        case(
            "pricing_floor_wrong_type",
            "[pricing]\nsaving_floor_percent_cpu = \"0.5%\"\n",
        ),
        case("pricing_sample_ms_too_low", "[pricing]\nsample_ms = 99\n"),
        case(
            "pricing_every_ms_under_twice_sample_ms",
            "[pricing]\nsample_ms = 1000\nevery_ms = 1999\n",
        ),
        case(
            "pricing_every_ms_over_a_day",
            "[pricing]\nevery_ms = 86400001\n",
        ),
        case(
            "pricing_period_us_too_high",
            "[pricing]\nperiod_us = 100001\n",
        ),
        case("pricing_keep_spans_zero", "[pricing]\nkeep_spans = 0\n"),
        case(
            "pricing_max_age_secs_too_low",
            "[pricing]\nmax_age_secs = 9\n",
        ),
        // [sense]
        case("sense_unknown_key", "[sense]\nopen = 100\n"),
        case("sense_enabled_wrong_type", "[sense]\nenabled = 1\n"),
        case("sense_open_ms_too_low", "[sense]\nopen_ms = 9\n"),
        case("sense_every_ms_too_high", "[sense]\nevery_ms = 3600001\n"),
        case(
            "sense_duty_cycle_over_25pct",
            "[sense]\nopen_ms = 1000\nevery_ms = 2000\n",
        ),
        case(
            "sense_pending_requests_zero",
            "[sense]\npending_requests = 0\n",
        ),
        case(
            "sense_min_sample_bios_zero",
            "[sense]\nmin_sample_bios = 0\n",
        ),
        case(
            "sense_max_sample_bios_too_low",
            "[sense]\nmax_sample_bios = 99\n",
        ),
        case(
            "sense_max_sample_bios_under_min",
            "[sense]\nmin_sample_bios = 600\nmax_sample_bios = 512\n",
        ),
        case("sense_buffer_kb_too_low", "[sense]\nbuffer_kb = 8\n"),
        case(
            "sense_retry_after_secs_zero",
            "[sense]\nretry_after_secs = 0\n",
        ),
        // [slices]
        case("slices_unknown_key", "[slices]\nstarve = 2.0\n"),
        case(
            "slices_enabled_wrong_type",
            "[slices]\nenabled = \"false\"\n",
        ),
        case("slices_starve_ratio_one", "[slices]\nstarve_ratio = 1.0\n"),
        case(
            "slices_min_read_ms_per_request_negative",
            "[slices]\nmin_read_ms_per_request = -1.0\n",
        ),
        case("slices_windows_zero", "[slices]\nwindows = 0\n"),
        case("slices_min_requests_zero", "[slices]\nmin_requests = 0\n"),
        case(
            "slices_writes_starved_max_one",
            "[slices]\nwrites_starved_max = 1\n",
        ),
        case(
            "slices_read_expire_min_ms_too_high",
            "[slices]\nread_expire_min_ms = 501\n",
        ),
        case(
            "slices_timeout_sync_max_ms_too_low",
            "[slices]\ntimeout_sync_max_ms = 124\n",
        ),
        case(
            "slices_max_changes_per_hour_zero",
            "[slices]\nmax_changes_per_hour = 0\n",
        ),
        // [metrics]
        case(
            "metrics_unknown_key",
            "[metrics]\naddress = \"127.0.0.1:9725\"\n",
        ),
        case(
            "metrics_listen_no_port",
            "[metrics]\nlisten = \"127.0.0.1\"\n",
        ),
        case(
            "metrics_listen_host_name",
            "[metrics]\nlisten = \"localhost:9725\"\n",
        ),
        case(
            "metrics_listen_port_out_of_range",
            "[metrics]\nlisten = \"127.0.0.1:65536\"\n",
        ),
        case("metrics_listen_wrong_type", "[metrics]\nlisten = 9725\n"),
    ]
}

/// Configs that load: the shipped one, a nearly empty one, one setting every key.
fn good_cases() -> Vec<Case> {
    vec![
        Case {
            name: "valid_shipped_config",
            body: Body::Quiet(
                repo_file("config/mergetune.toml"),
                "config/mergetune.toml as shipped",
            ),
        },
        case(
            "valid_nearly_empty",
            "# only sections, every key at its default\n[daemon]\n[policy]\n",
        ),
        case("valid_every_key", VALID_EVERY_KEY),
        case(
            "valid_deprecated_sense_recent_bios",
            "# an older config: loads, the key ignored, a warning\n[sense]\nrecent_bios = 16\n",
        ),
        case(
            "valid_profile_file_relative",
            "[policy]\nenabled = false\ncost_profile = \"profile-stated.toml\"\n\n[metrics]\nlisten = \"\"\n",
        ),
    ]
}

/// Every key of every section, each set to a valid value other than its default.
const VALID_EVERY_KEY: &str = r#"[daemon]
interval_ms = 500
state_dir = "/var/lib/mergetune"
rescan_every_ticks = 7

[devices]
include = ["sd*", "nvme*n1", "vd?"]
exclude = ["sda", "nvme0n1"]

[policy]
enabled = true
window_ticks = 3
min_window_bios = 250
disable_below_percent = 0.75
enable_above_percent = 4.25
step_down_after_windows = 4
disable_after_windows = 3
disabled_nomerges = 1
min_dwell_secs = 20
probe_initial_backoff_secs = 900
probe_max_backoff_secs = 7200
probe_windows = 2
l3_watch_interval_ms = 0
trial_max_extra_requests_percent = 3.5
max_changes_per_hour = 30
cost_profile = "lkml-2008"

[pricing]
saving_floor_percent_cpu = 1.25
sample_ms = 500
every_ms = 30000
period_us = 2000
keep_spans = 12
max_age_secs = 1800

[slices]
enabled = true
starve_ratio = 2.5
min_read_ms_per_request = 5.5
windows = 4
min_requests = 30
writes_starved_max = 16
read_expire_min_ms = 50
timeout_sync_max_ms = 1000
max_changes_per_hour = 6

[metrics]
listen = "[::1]:9726"

[sense]
enabled = false
open_ms = 200
every_ms = 4000
pending_requests = 8192
min_sample_bios = 128
max_sample_bios = 1024
buffer_kb = 128
retry_after_secs = 300
"#;

/// Among the bad-looking cases, those that load (every key at its default).
const ACCEPTED: [&str; 1] = ["only_a_comment"];

/// The cases `run --once --dry-run` is also given: one per kind of refusal.
const RUN_CASES: [&str; 5] = [
    "syntax_missing_value",
    "unknown_section",
    "daemon_interval_ms_too_low",
    "many_errors_in_file_order",
    "policy_cost_profile_missing_file",
];

/// Writes a case's FILE under `dir`; the path it is at.
fn materialise(dir: &Path, c: &Case) -> std::path::PathBuf {
    let path = dir.join(format!("{}.toml", c.name));
    match &c.body {
        Body::Text(t) => std::fs::write(&path, t).unwrap(),
        Body::Quiet(t, _) => std::fs::write(&path, t).unwrap(),
        Body::Bytes(b) => std::fs::write(&path, b).unwrap(),
        Body::Missing => {}
        Body::Directory => std::fs::create_dir(&path).unwrap(),
    }
    path
}

/// How the golden file shows a case's FILE.
fn shown(c: &Case) -> String {
    match &c.body {
        Body::Text(t) => t.to_string(),
        Body::Quiet(_, what) => format!("({what})\n"),
        Body::Bytes(b) => format!("(not UTF-8, shown lossily)\n{}", String::from_utf8_lossy(b)),
        Body::Missing => "(no file)\n".to_string(),
        Body::Directory => "(a directory)\n".to_string(),
    }
}

/// The binary with an empty environment: no RUST_LOG, no JOURNAL_STREAM, no colour.
fn mergetune(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mergetune"))
        .env_clear()
        .args(args)
        .output()
        .unwrap()
}

struct Record<'a> {
    name: &'a str,
    command: String,
    file: String,
    out: &'a Output,
    /// Drop log lines stamped with the wall clock from stderr.
    drop_stamped: bool,
}

fn render(r: &Record, tmp: &str) -> String {
    let stderr = String::from_utf8_lossy(&r.out.stderr);
    let stderr: String = stderr
        .lines()
        .filter(|l| !(r.drop_stamped && crate::starts_with_wall_clock(l)))
        .map(|l| format!("{l}\n"))
        .collect();
    let text = format!(
        "=== {}\n$ {}\n--- file\n{}--- exit: {:?}\n--- stdout\n{}--- stderr\n{}\n",
        r.name,
        r.command,
        r.file,
        r.out.status.code(),
        String::from_utf8_lossy(&r.out.stdout),
        stderr,
    );
    text.replace(tmp, "<tmp>")
}

#[test]
#[allow(clippy::too_many_lines)] // a test reads best as one story
fn check_config_errors() {
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path().to_str().unwrap().to_string();
    for (name, text) in profile_files() {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    let bad = bad_cases();
    let good = good_cases();
    assert!(bad.len() >= 40, "{} bad cases", bad.len());
    let mut names: Vec<&str> = bad.iter().chain(&good).map(|c| c.name).collect();
    names.sort_unstable();
    let n = names.len();
    names.dedup();
    assert_eq!(n, names.len(), "case names must be unique");

    let mut golden = format!(
        "# mergetune check-config FILE: {} bad configs ({} of them load: {}), then {} good ones\n\n",
        bad.len(),
        ACCEPTED.len(),
        ACCEPTED.join(", "),
        good.len()
    );
    let mut paths = Vec::new();
    let mut wrong = Vec::new();
    for (c, good) in bad
        .iter()
        .map(|c| (c, false))
        .chain(good.iter().map(|c| (c, true)))
    {
        let path = materialise(dir.path(), c);
        let p = path.to_str().unwrap();
        let out = mergetune(&["check-config", p]);
        if out.status.success() != (good || ACCEPTED.contains(&c.name)) {
            wrong.push(c.name);
        }
        golden.push_str(&render(
            &Record {
                name: c.name,
                command: format!("mergetune check-config {p}"),
                file: shown(c),
                out: &out,
                drop_stamped: false,
            },
            &tmp,
        ));
        paths.push((c.name, path));
    }
    assert!(
        wrong.is_empty(),
        "accepted where refused was expected, or the other way: {wrong:?}"
    );
    crate::check_golden("config_errors.txt", &golden);

    // `run` refuses the same files at its start, before any device is looked at (its
    // sysfs and procfs roots are empty places; the error must come first all the same).
    let mut golden = String::from(
        "# mergetune run --once --dry-run -c FILE: a bad config is refused at the start\n\n",
    );
    let no_sys = dir.path().join("no-sys");
    let no_proc = dir.path().join("no-proc");
    for name in RUN_CASES {
        let (_, path) = paths.iter().find(|(n, _)| *n == name).unwrap();
        let c = bad.iter().find(|c| c.name == name).unwrap();
        let args = [
            "run",
            "--once",
            "--dry-run",
            "-c",
            path.to_str().unwrap(),
            "--sysfs-root",
            no_sys.to_str().unwrap(),
            "--procfs-root",
            no_proc.to_str().unwrap(),
        ];
        let out = mergetune(&args);
        assert_eq!(out.status.code(), Some(1), "{name}");
        golden.push_str(&render(
            &Record {
                name,
                command: format!("mergetune {}", args.join(" ")),
                file: shown(c),
                out: &out,
                drop_stamped: true,
            },
            &tmp,
        ));
    }
    crate::check_golden("config_errors_run.txt", &golden);
}
