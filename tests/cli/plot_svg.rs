//! The SVG pictures: advise (scatter, sizes, rates, depth), a simulate run per tick through
//! the `Sampling` controller and from its report alone, policies side by side, and
//! `replay --plot`. With MERGETUNE_WRITE_DOC_IMAGES=1 the pictures of docs/advise.md are
//! (re)written under docs/img/.

use crate::memkernel::{MemDev, MemKernel};
use mergetune_daemon::adaptive::Daemon;
use mergetune_daemon::controller::Controller;
use mergetune_daemon::record::{Recorder, RecordingFs};
use mergetune_kernel::blockfs::BlockFs;
use mergetune_lab::plot::{self, Sampling};
use mergetune_logic::config::Config;
use mergetune_logic::decision::Level;
use mergetune_sim::engine::Simulation;
use mergetune_sim::runner::Policy;
use mergetune_sim::runner::run_scenario;
use mergetune_sim::scenario::Scenario;
use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Where a picture goes: docs/img/ when asked to write the doc images, else a temp dir.
fn out(dir: &tempfile::TempDir, name: &str) -> PathBuf {
    if std::env::var("MERGETUNE_WRITE_DOC_IMAGES").as_deref() == Ok("1") {
        let d = root().join("docs/img");
        std::fs::create_dir_all(&d).unwrap();
        d.join(name)
    } else {
        dir.path().join(name)
    }
}

fn svg(path: &Path) -> String {
    let s = std::fs::read_to_string(path).unwrap();
    assert!(s.starts_with("<svg"), "{}", &s[..s.len().min(80)]);
    assert!(
        s.len() < 2_000_000,
        "{} is {} bytes",
        path.display(),
        s.len()
    );
    s
}

#[test]
fn advise_plot_has_scatter_and_histogram() {
    let dir = tempfile::tempdir().unwrap();
    let p = out(&dir, "advise_mixed.svg");
    let status = crate::lab::lab()
        .args(["advise", "tests/fixtures/trace_mixed.txt", "--plot"])
        .arg(&p)
        .current_dir(root())
        .output()
        .unwrap();
    assert!(status.status.success());
    let s = svg(&p);
    for label in [
        "where bios land",
        "offset (GiB)",
        "time (s)",
        "bio sizes",
        "4 KiB",
        "bios and merges per second",
        "requests in flight",
        "reads",
        "writes",
    ] {
        assert!(s.contains(label), "missing {label:?}");
    }
}

fn run(policy: Policy) -> (mergetune_sim::report::Report, plot::Series) {
    let sc = Scenario::default_scenario();
    let mut sim = Simulation::new(&sc).unwrap();
    let mut ctl = policy.controller(sc.daemon_config(&Config::default()));
    let mut sampling = Sampling::new(ctl.as_mut());
    let report = run_scenario(&mut sim, &mut sampling, &policy.to_string(), &mut |_, _| {});
    (report, sampling.finish())
}

#[test]
fn simulate_plots_per_tick_from_report_and_compared() {
    let dir = tempfile::tempdir().unwrap();
    let (adaptive, series) = run(Policy::Adaptive);
    let samples = &series.devices["sda"];
    assert!(samples.len() > 200, "one sample per tick");
    // The adaptive policy went down the ladder in the OLTP phase and back up for backup.
    // (L3 with a bio tap, L2 without one.)
    assert!(
        samples
            .iter()
            .any(|s| s.level >= mergetune_logic::decision::Level::L2)
    );
    assert!(
        samples
            .iter()
            .any(|s| s.level == mergetune_logic::decision::Level::L0
                && s.merge_percent[0].unwrap_or(0.0) > 50.0)
    );
    let p = out(&dir, "simulate_default.svg");
    plot::plot_run(&adaptive, Some(&series), &p).unwrap();
    let s = svg(&p);
    for label in [
        "sda: merge ratio",
        "sda: merge ladder level",
        "sda: bios per second",
        "latency (ms)",
        "merged / bios (%)",
        "oltp",
        "backup",
        "probe",
        "decision",
    ] {
        assert!(s.contains(label), "missing {label:?}");
    }
    // From the report alone (phase steps).
    let p2 = dir.path().join("report_only.svg");
    plot::plot_report(&adaptive, &p2).unwrap();
    assert!(svg(&p2).contains("sda: merge ladder level"));
    // Side by side.
    let (off, off_series) = run(Policy::Off);
    let p3 = out(&dir, "simulate_compare.svg");
    plot::plot_compare(
        &[(&adaptive, Some(&series)), (&off, Some(&off_series))],
        &p3,
    )
    .unwrap();
    let s3 = svg(&p3);
    assert!(s3.contains("policy adaptive") && s3.contains("policy off"));
}

#[test]
fn replay_plot_from_a_recording() {
    let dir = tempfile::tempdir().unwrap();
    let rec_path = dir.path().join("rec.jsonl");
    {
        let sc = Scenario::default_scenario();
        let mut sim = Simulation::new(&sc).unwrap();
        let cfg = Config::default();
        let mut d = Daemon::simulated(cfg.clone());
        let mut rec = Recorder::create(&rec_path).unwrap();
        let mut t = 0;
        while t <= 120_000 {
            sim.advance_to(t * 1_000_000);
            let fs: &mut dyn BlockFs = &mut sim;
            let mut rfs = RecordingFs::new(fs, t);
            d.tick(t, &mut rfs);
            rec.write(&rfs.finish()).unwrap();
            t += cfg.daemon.interval_ms;
        }
    }
    let p = out(&dir, "replay.svg");
    let o = crate::lab::lab()
        .args(["replay"])
        .arg(&rec_path)
        .arg("--plot")
        .arg(&p)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = svg(&p);
    assert!(s.contains("replay of"));
    assert!(s.contains("sda: merge ladder level"));
}

#[test]
fn plotting_nothing_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let empty = mergetune_lab::advise::Analyzer::new(None).finish(&Default::default());
    let e = mergetune_lab::advise::plot_advise(&empty, &dir.path().join("x.svg")).unwrap_err();
    assert!(e.to_string().contains("nothing to plot"));
    let e = plot::plot_series(&plot::Series::default(), &dir.path().join("y.svg")).unwrap_err();
    assert!(e.to_string().contains("no device"));
    let e = mergetune_lab::advise::plot_advise(
        &mergetune_lab::advise::analyze_file(
            &root().join("tests/fixtures/trace_mixed.txt"),
            None,
            &Default::default(),
        )
        .unwrap(),
        Path::new("/nonexistent-dir/x.svg"),
    )
    .unwrap_err();
    assert!(e.to_string().contains("/nonexistent-dir/x.svg"));
}

#[test]
fn a_counter_going_backwards_costs_one_sample_not_a_spike() {
    // A loop device at nomerges 2 (every other attribute reads "1") whose read count is
    // set at each tick.
    let mut fs = MemKernel::default();
    fs.add("loop0", MemDev::with_attrs(&[("queue/nomerges", "2")]))
        .fallback = Some("1".into());
    let mut ctl = mergetune_daemon::controller::KernelDefault { interval_ms: 1000 };
    let mut s = Sampling::new(&mut ctl);
    for (t, reads) in [(1000, 1000), (2000, 1100), (3000, 5), (4000, 105)] {
        fs.devs.get_mut("loop0").unwrap().stat[0] = reads;
        s.tick(t, &mut fs);
    }
    let v = &s.finish().devices["loop0"];
    // The first tick only sees the device; the reset at 3 s gives no sample.
    let got: Vec<(f64, f64, Level)> = v
        .iter()
        .map(|x| (x.t_s, x.bios_per_s[0], x.level))
        .collect();
    assert_eq!(got, vec![(2.0, 100.0, Level::L3), (4.0, 100.0, Level::L3)]);
}
