//! `mergetune simulate`: the command-line edge of the simulator. This is the only sim module
//! that reads the wall clock (progress bar, `--bench`).

use crate::cli::common::Watch;
use anyhow::Context as _;
use mergetune_daemon::controller::Controller;
use mergetune_sim::engine::Simulation;
use mergetune_sim::runner::Policy;
use mergetune_sim::scenario::Scenario;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, clap::Args)]
pub struct SimulateArgs {
    /// Scenario file (TOML); without it, the built-in default scenario runs.
    pub scenarios: Vec<PathBuf>,
    /// Serve the simulated devices' Prometheus metrics (and /status) on ADDR while the
    /// scenario runs, e.g. 127.0.0.1:9726 (not 9725, the daemon's own port), to try the
    /// Grafana dashboard without a device.
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<String>,
    /// With --metrics-listen: run at this many times real time (default: 1).
    #[arg(long, value_name = "X")]
    pub speed: Option<f64>,
    /// Print the report as one JSON document.
    #[arg(long)]
    pub json: bool,
    /// Controller: adaptive (the daemon's policy), off (kernel default) or static:N
    /// (nomerges pinned to N).
    #[arg(long, default_value = "adaptive", value_parser = parse_policy, value_hint = clap::ValueHint::Other)]
    pub policy: Policy,
    /// Daemon configuration for the adaptive policy (default: built-in defaults).
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Override the scenario's seed.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Measure simulated bios per second of wall time on the merge-heavy and random paths.
    #[arg(long)]
    pub bench: bool,
}

/// `mergetune simulate`: its arguments, and the lab's flags it no longer takes (hidden):
/// given, they end in a pointer to the `mergetune-lab` command that does it
/// ([`crate::cli::moved`]).
#[derive(Debug, Clone, clap::Args)]
pub struct SimulateCmd {
    #[command(flatten)]
    pub run: SimulateArgs,
    /// Moved: `mergetune-lab compare`.
    #[arg(long, hide = true)]
    pub compare: bool,
    /// Moved: `mergetune-lab simulate --plot` (or `compare --plot`).
    #[arg(long, hide = true, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// Only with --compare, which moved; ignored without it, as before.
    #[arg(long, hide = true, value_name = "FACTOR")]
    pub scale: Option<f64>,
}

fn parse_policy(s: &str) -> Result<Policy, String> {
    s.parse()
}

/// A scenario for `--bench` and the criterion bench: `merge_heavy` is batched sequential
/// 4 KiB writes (QD64, batch 64, nomerges=0); otherwise random 4 KiB reads at QD32.
pub fn bench_scenario(merge_heavy: bool, duration_s: f64) -> Scenario {
    let job = if merge_heavy {
        "pattern = \"sequential\"\nread_percent = 0.0\niodepth = 64\nbatch = 64"
    } else {
        "pattern = \"random\"\nread_percent = 100.0\niodepth = 32\nbatch = 1"
    };
    let text = format!(
        "name = \"bench-{}\"\nseed = 7\n\
         [[device]]\nname = \"nvme0n1\"\nkind = \"ssd\"\nscheduler = \"none\"\n\
         queue_depth = 64\nparallelism = 32\nread_overhead_us = 10.0\n\
         write_overhead_us = 10.0\nbandwidth_mb_s = 3000.0\n\
         [[phase]]\nname = \"run\"\nduration_s = {duration_s}\n\
         [[phase.job]]\nname = \"j\"\ndevice = \"nvme0n1\"\nblock_size_kb = 4\n{job}\n",
        if merge_heavy { "merge-heavy" } else { "random" }
    );
    // Built from constants above; a failure is a defect of this function.
    Scenario::from_toml_str(&text, "<bench>", None).expect("bench scenario is valid")
}

/// Simulated bios per second of wall time for one bench scenario.
pub fn measure_bench(merge_heavy: bool, duration_s: f64) -> anyhow::Result<(u64, f64)> {
    let sc = bench_scenario(merge_heavy, duration_s);
    let mut sim = Simulation::new(&sc)?;
    let start = Instant::now();
    sim.run_to_end();
    if let Some(e) = sim.halted() {
        anyhow::bail!("bench {}: {e}", sc.name);
    }
    let wall = start.elapsed().as_secs_f64();
    Ok((sim.total_bios(), sim.total_bios() as f64 / wall.max(1e-9)))
}

/// A progress bar on stderr, only when stderr is a terminal and the run has taken longer
/// than a second.
struct Progress {
    start: Instant,
    last: Instant,
    shown: bool,
    enabled: bool,
}

impl Progress {
    fn new() -> Self {
        let now = Instant::now();
        Progress {
            start: now,
            last: now,
            shown: false,
            enabled: std::io::stderr().is_terminal(),
        }
    }

    fn update(&mut self, now_ns: u64, end_ns: u64) {
        if !self.enabled || self.start.elapsed() < Duration::from_secs(1) {
            return;
        }
        if self.shown && self.last.elapsed() < Duration::from_millis(100) && now_ns < end_ns {
            return;
        }
        self.last = Instant::now();
        self.shown = true;
        let frac = if end_ns == 0 {
            1.0
        } else {
            now_ns as f64 / end_ns as f64
        };
        let width = 40;
        let filled = ((frac * width as f64) as usize).min(width);
        let _ = write!(
            std::io::stderr(),
            "\r[{}{}] {:>3.0}%  {:.0}/{:.0} s simulated",
            "#".repeat(filled),
            "-".repeat(width - filled),
            frac * 100.0,
            now_ns as f64 / 1e9,
            end_ns as f64 / 1e9
        );
    }

    fn finish(&mut self) {
        if self.shown {
            let _ = write!(std::io::stderr(), "\r{}\r", " ".repeat(72));
        }
    }
}

/// `simulate --bench`: the simulator's own speed on a merge-heavy and a random path.
fn run_bench(json: bool) -> anyhow::Result<()> {
    for (label, heavy, secs) in [
        (
            "merge-heavy (batched sequential 4 KiB, nomerges=0)",
            true,
            20.0,
        ),
        ("random (4 KiB random reads, QD32)", false, 4.0),
    ] {
        let (bios, rate) = measure_bench(heavy, secs)?;
        if json {
            println!(
                "{}",
                serde_json::json!({"path": label, "bios": bios, "bios_per_sec": rate})
            );
        } else {
            println!("{label}: {bios} bios, {:.2} M simulated bios/s", rate / 1e6);
        }
    }
    Ok(())
}

/// The live exporter of `--metrics-listen` at `--speed` times real time, or none; a
/// `--speed` without an endpoint is refused.
fn exporter(args: &SimulateArgs) -> anyhow::Result<Option<mergetune_export::live::LiveExporter>> {
    if let Some(x) = args.speed
        && !(x.is_finite() && x > 0.0)
    {
        anyhow::bail!("--speed {x}: must be a positive number");
    }
    let Some(addr) = &args.metrics_listen else {
        if args.speed.is_some() {
            anyhow::bail!("--speed only applies with --metrics-listen");
        }
        return Ok(None);
    };
    let speed = args.speed.unwrap_or(1.0);
    let ex = mergetune_export::live::LiveExporter::start(addr, Some(speed))
        .context("--metrics-listen")?;
    eprintln!(
        "serving the simulated devices' metrics on http://{addr}/metrics at {speed}x real time"
    );
    Ok(Some(ex))
}

/// The report on stdout (JSON or text); the wall-clock figures, which vary run to run, on
/// stderr, out of the deterministic report, as a log event so that `--log-format json`
/// keeps every stderr line JSON.
fn print_report(report: &mergetune_sim::report::Report, json: bool, wall: Instant) {
    if json {
        println!("{}", report.to_json());
        return;
    }
    print!(
        "{}",
        mergetune_logic::printable::printable_lines(&report.render_text())
    );
    let wall_s = wall.elapsed().as_secs_f64();
    let rate = report.total_bios as f64 / wall_s.max(1e-9) / 1e6;
    tracing::info!(
        wall_s = format!("{wall_s:.2}"),
        simulated_mbios_per_s = format!("{rate:.1}"),
        "wall time {wall_s:.2} s, {rate:.1} M simulated bios/s"
    );
}

/// `mergetune simulate`: one scenario (the embedded default without a file) under the
/// chosen policy, its report, and optionally its live metrics; `--bench` is its own run.
/// `watch` goes around the controller and sees the report before it is printed (the lab's
/// plot: `mergetune-lab simulate --plot`).
pub fn run_watched(
    args: &SimulateArgs,
    watch: Option<&mut dyn Watch<mergetune_sim::report::Report>>,
) -> anyhow::Result<()> {
    if args.bench {
        return run_bench(args.json);
    }
    if args.scenarios.len() > 1 {
        anyhow::bail!("one scenario at a time (several only with --compare)");
    }
    let mut scenario = match args.scenarios.first() {
        Some(p) => Scenario::load_file(p)?,
        None => Scenario::default_scenario(),
    };
    if let Some(s) = args.seed {
        scenario.seed = s;
    }
    let cfg = match &args.config {
        Some(p) => mergetune_logic::config::load_file(p)?,
        None => mergetune_logic::config::Config::default(),
    };
    let mut sim = Simulation::new(&scenario).context("building the simulation")?;
    let mut controller = args.policy.controller(scenario.daemon_config(&cfg));
    let mut progress = Progress::new();
    let wall = Instant::now();
    let mut exporter = exporter(args)?;
    let mut clocked = crate::cli::common::VirtualClocked {
        inner: controller.as_mut(),
        stamp: mergetune_export::logging::set_sim_time_ms,
    };
    let mut last_tick = Instant::now();
    let mut report = None;
    let mut drive = |c: &mut dyn Controller| {
        report = Some(mergetune_sim::runner::run_scenario_observed(
            &mut sim,
            c,
            &args.policy.to_string(),
            &mut |now, end| progress.update(now, end),
            &mut |c, decisions, now_ms| {
                if let Some(ex) = exporter.as_mut() {
                    // The wall time since the previous tick stands for this tick's duration
                    // (the simulation between ticks is part of it, so it is an upper bound).
                    let took = last_tick.elapsed().as_secs_f64();
                    ex.on_tick(c, decisions, now_ms, took);
                    last_tick = Instant::now();
                }
            },
        ));
    };
    let mut watch = watch;
    match watch.as_deref_mut() {
        Some(w) => w.around(&mut clocked, &mut drive),
        None => drive(&mut clocked),
    }
    let mut report = report.context("the run produced no report")?;
    // What the daemon priced with (the adaptive policy has a daemon; baselines do not).
    report.daemon_pricing = controller.snapshot().map(|s| s.pricing.name);
    mergetune_export::logging::set_sim_time_ms(None);
    progress.finish();
    if let Some(e) = sim.halted() {
        anyhow::bail!("simulation of {}: {e}", scenario.name);
    }
    if let Some(w) = watch {
        w.finish(&report)?;
    }
    print_report(&report, args.json, wall);
    Ok(())
}
