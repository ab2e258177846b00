//! The simulation seen through `BlockFs`: the kernel's formats and error behaviour, so the
//! daemon cannot tell a simulated device from a real one. Also scenario validation.

use mergetune_kernel::blockfs::{FsError, Sysfs};
use mergetune_kernel::trace::Dir;
use mergetune_sim::engine::BioSpec;
use mergetune_sim::engine::Simulation;
use mergetune_sim::scenario::Scenario;
use std::path::Path;

fn sim() -> Simulation {
    let text = "[[device]]\nname = \"sda\"\nkind = \"hdd\"\n\
                [[device]]\nname = \"nvme0n1\"\nkind = \"ssd\"\nscheduler = \"none\"\n\
                [[device]]\nname = \"sdb\"\nkind = \"ssd\"\nscheduler = \"bfq\"\n\
                [[device]]\nname = \"sdc\"\nkind = \"ssd\"\n\
                [[device]]\nname = \"dm-0\"\nkind = \"dm-linear\"\nmembers = [\"sdb\", \"sdc\"]\n\
                [[phase]]\nname = \"p\"\nduration_s = 1.0\n\
                [[phase.job]]\nname = \"j\"\ndevice = \"sda\"\npattern = \"sequential\"\n\
                batch = 8\niodepth = 8\n";
    Simulation::new(&Scenario::from_toml_str(text, "t", None).unwrap()).unwrap()
}

#[test]
fn diskstats_and_stat_have_the_kernels_columns() {
    let mut s = sim();
    s.advance_to(500_000_000);
    let ds = String::from_utf8(s.read_diskstats().unwrap()).unwrap();
    let lines: Vec<&str> = ds.lines().collect();
    assert_eq!(lines.len(), 5);
    for l in &lines {
        assert_eq!(l.split_whitespace().count(), 20, "{l}");
    }
    let sda: Vec<&str> = lines
        .iter()
        .find(|l| l.split_whitespace().nth(2) == Some("sda"))
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(&sda[..2], &["8", "0"]);
    let stat = s.read_attr("sda", "stat").unwrap();
    let f: Vec<u64> = stat
        .split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect();
    assert_eq!(f.len(), 17);
    assert_eq!(
        f,
        sda[3..]
            .iter()
            .map(|x| x.parse::<u64>().unwrap())
            .collect::<Vec<_>>()
    );
    // Sequential batches of 8 merge 7 of 8 in the plug.
    // (merges are counted when they happen, completions later: allow the one in flight)
    assert!(
        f[0] > 0 && f[1] >= 7 * f[0] && f[1] <= 7 * (f[0] + f[8]),
        "{stat}"
    );
    assert_eq!(f[2], f[0] * 64);
    assert!(f[9] > 0 && f[9] <= 500, "io_ticks {}", f[9]);
    assert!(f[10] >= f[3]);
    assert_eq!(&f[11..], &[0, 0, 0, 0, 0, 0]);
    assert_eq!(s.read_attr("dm-0", "dev").unwrap(), "253:0");
    assert_eq!(s.read_attr("nvme0n1", "dev").unwrap(), "259:0");
}

#[test]
fn tunables_read_and_write_like_sysfs() {
    let mut s = sim();
    assert_eq!(
        s.list_block_devices().unwrap(),
        ["dm-0", "nvme0n1", "sda", "sdb", "sdc"]
    );
    assert_eq!(s.read_attr("sda", "queue/nomerges").unwrap(), "0");
    assert_eq!(
        s.read_attr("sda", "queue/scheduler").unwrap(),
        "none [mq-deadline] kyber bfq"
    );
    assert_eq!(s.read_attr("sda", "queue/rotational").unwrap(), "1");
    assert_eq!(s.read_attr("nvme0n1", "queue/rotational").unwrap(), "0");
    assert_eq!(
        s.read_attr("sda", "queue/iosched/front_merges").unwrap(),
        "1"
    );
    s.write_attr("sda", "queue/iosched/front_merges", "0")
        .unwrap();
    assert_eq!(
        s.read_attr("sda", "queue/iosched/front_merges").unwrap(),
        "0"
    );
    assert!(matches!(
        s.write_attr("sda", "queue/iosched/front_merges", "2"),
        Err(FsError::InvalidValue { .. })
    ));
    // Only mq-deadline has front_merges; bfq has the slice knobs.
    assert!(!s.attr_exists("nvme0n1", "queue/iosched/front_merges"));
    assert!(!s.attr_exists("sdb", "queue/iosched/front_merges"));
    assert_eq!(s.read_attr("sdb", "queue/iosched/slice_idle").unwrap(), "8");
    for v in ["0", "1", "2", "1\n"] {
        s.write_attr("sda", "queue/nomerges", v).unwrap();
        assert_eq!(s.read_attr("sda", "queue/nomerges").unwrap(), v.trim());
    }
    let e = s.write_attr("sda", "queue/nomerges", "3").unwrap_err();
    assert_eq!(
        e,
        FsError::InvalidValue {
            path: "sim:/sys/block/sda/queue/nomerges".into(),
            value: "3".into()
        }
    );
    assert!(s.write_attr("sda", "queue/nomerges", "x").is_err());
    let e = s.read_attr("sdz", "queue/nomerges").unwrap_err();
    assert_eq!(e.path(), "sim:/sys/block/sdz/queue/nomerges");
    assert!(matches!(
        s.write_attr("sda", "stat", "0"),
        Err(FsError::PermissionDenied { .. })
    ));
    s.write_attr("sda", "queue/scheduler", "none").unwrap();
    assert_eq!(
        s.read_attr("sda", "queue/scheduler").unwrap(),
        "[none] mq-deadline kyber bfq"
    );
    assert!(!s.attr_exists("sda", "queue/iosched"));
    assert!(s.write_attr("sda", "queue/scheduler", "cfq").is_err());
    assert_eq!(s.read_attr("dm-0", "queue/scheduler").unwrap(), "none");
    assert_eq!(s.list_dir("dm-0", "slaves").unwrap(), ["sdb", "sdc"]);
    assert_eq!(s.list_dir("sdc", "holders").unwrap(), ["dm-0"]);
    assert!(s.list_dir("sda", "slaves").unwrap().is_empty());
    // The nomerges writes are in the timeline.
    assert!(
        s.nomerges_log()
            .iter()
            .any(|c| c.device == "sda" && c.value == 2)
    );
}

#[test]
fn dm_linear_spans_members() {
    let mut s = sim();
    let size: u64 = s.read_attr("sdb", "size").unwrap().parse().unwrap();
    s.submit_plugged(
        "dm-0",
        &[BioSpec {
            dir: Dir::Write,
            sector: size - 8,
            nr_sectors: 16,
        }],
    )
    .unwrap();
    s.advance_to(900_000_000);
    let b = s.device_stat("sdb").unwrap();
    let c = s.device_stat("sdc").unwrap();
    let dm = s.device_stat("dm-0").unwrap();
    assert_eq!((b.sectors(Dir::Write), c.sectors(Dir::Write)), (8, 8));
    assert_eq!((dm.completed(Dir::Write), dm.merged(Dir::Write)), (1, 0));
}

fn err(text: &str) -> String {
    Scenario::from_toml_str(text, "s.toml", None)
        .unwrap_err()
        .to_string()
}

#[test]
fn scenario_errors_name_the_key() {
    let dev = "[[device]]\nname = \"sda\"\nkind = \"ssd\"\n";
    let ph = "[[phase]]\nname = \"p\"\nduration_s = 1.0\n";
    let job = "[[phase.job]]\nname = \"j\"\n";
    // (the scenario, the key its error names)
    let cases = [
        (format!("{dev}queue_dept = 3\n{ph}"), "queue_dept"),
        (format!("{dev}nomerges = 3\n{ph}"), "device[0].nomerges"),
        (
            format!("{dev}scheduler = \"cfq\"\n{ph}"),
            "device[0].scheduler",
        ),
        (
            format!("{dev}scheduler = \"none\"\n[device.iosched]\nfront_merges = 0\n{ph}"),
            "device[0].iosched.front_merges",
        ),
        (
            format!("{dev}{ph}{job}device = \"sda\"\niodepth = 4\nbatch = 8\n"),
            "phase[0].job[0].batch",
        ),
        (
            format!("{dev}{ph}{job}device = \"sdq\"\n"),
            "phase[0].job[0].device",
        ),
        (
            format!("{dev}{ph}{job}device = \"sda\"\nbogus = 1\n"),
            "bogus",
        ),
        (
            format!("{dev}[[phase]]\nname = \"p\"\nduration_s = -1.0\n"),
            "phase[0].duration_s",
        ),
        (
            format!(
                "{dev}[[device]]\nname = \"dm-0\"\nkind = \"dm-stripe\"\nmembers = [\"sdx\"]\n{ph}"
            ),
            "device[1].members",
        ),
        ("seed = 1\n".to_string(), "device"),
    ];
    for (text, key) in cases {
        let e = err(&text);
        assert!(e.contains(key), "{key}: {e}");
    }
}

#[test]
fn every_shipped_scenario_loads() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/scenarios");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let p = entry.unwrap().path();
        if p.extension().and_then(|e| e.to_str()) == Some("toml") {
            let sc = Scenario::load_file(&p).unwrap_or_else(|e| panic!("{e}"));
            Simulation::new(&sc).unwrap();
            n += 1;
        }
    }
    assert!(n >= 9, "{n} scenarios");
    Scenario::default_scenario();
}

/// The extremes scenario validation lets through (beyond them it refuses, naming the key:
/// tests/cli/inputs_regressions.rs) run without a panic.
#[test]
fn extreme_values_do_not_panic() {
    let text = "[[device]]\nname = \"sda\"\nkind = \"hdd\"\nscheduler = \"bfq\"\n\
                min_seek_us = 9000.0\nmax_seek_us = 1.0\nsize_gib = 1\n\
                [[device]]\nname = \"sdb\"\nkind = \"ssd\"\nsize_gib = 1\n\
                [[device]]\nname = \"dm-0\"\nkind = \"dm-stripe\"\nmembers = [\"sdb\"]\n\
                chunk_kb = 4194304\n\
                [[phase]]\nname = \"p\"\nduration_s = 0.2\n\
                [[phase.job]]\nname = \"a\"\ndevice = \"sda\"\nthink_time_us = 1e9\n\
                iodepth = 2\n\
                [[phase.job]]\nname = \"b\"\ndevice = \"sda\"\nrate_iops = 0.001\nsync = false\n\
                read_percent = 0.0\n\
                [[phase.job]]\nname = \"c\"\ndevice = \"dm-0\"\nblock_size_kb = 65536\n\
                offset_mb = 99999999\n";
    let sc = Scenario::from_toml_str(text, "t", None).unwrap();
    let mut s = Simulation::new(&sc).unwrap();
    for (k, v) in [
        ("slice_sync", "18446744073709551615"),
        ("slice_idle", "18446744073709551615"),
        ("slice_async", "18446744073709551615"),
    ] {
        s.write_attr("sda", &format!("queue/iosched/{k}"), v)
            .unwrap();
    }
    s.write_attr("sdb", "queue/iosched/read_expire", "18446744073709551615")
        .unwrap();
    s.run_to_end();
    assert!(s.total_bios() > 0);
}

#[test]
fn scheduler_switches_freeze_the_queue() {
    let run = |switch: bool| {
        let text = "[[device]]\nname = \"sda\"\nkind = \"ssd\"\nqueue_depth = 32\n\
                    [[phase]]\nname = \"p\"\nduration_s = 1.0\n\
                    [[phase.job]]\nname = \"r\"\ndevice = \"sda\"\niodepth = 32\n";
        let mut s = Simulation::new(&Scenario::from_toml_str(text, "t", None).unwrap()).unwrap();
        let scheds = ["none", "mq-deadline"];
        for i in 1..=1000u64 {
            s.advance_to(i * 1_000_000);
            if switch {
                s.write_attr("sda", "queue/scheduler", scheds[(i % 2) as usize])
                    .unwrap();
            }
        }
        s.run_to_end();
        s.device_stat("sda").unwrap().completed(Dir::Read)
    };
    let steady = run(false);
    let switching = run(true);
    assert!(switching < steady, "{switching} vs {steady}");
}
