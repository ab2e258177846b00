//! `mergetune simulate`: the command-line edge of the simulator. This is the only sim module
//! that reads the wall clock (progress bar, `--bench`).

use anyhow::Context as _;
use mergetune_sim::engine::Simulation;
use mergetune_sim::runner::Policy;
use mergetune_sim::scenario::Scenario;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, clap::Args)]
pub struct SimulateArgs {
    /// Scenario file (TOML); without it, the built-in default scenario runs. With
    /// --compare, any number of them (none: the shipped comparison suite).
    pub scenarios: Vec<PathBuf>,
    /// Run each scenario under the kernel default, static nomerges=2, a naive toggle, the
    /// adaptive policy and an oracle, and print the figures that matter side by side.
    #[arg(long)]
    pub compare: bool,
    /// Draw the run as an SVG: per device the merge ratios, ladder level, bios/s and latency
    /// over time, decisions and probes marked, phases shaded. With --compare, the policies
    /// side by side, one file per scenario (FILE's stem + scenario name).
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// Serve the simulated devices' Prometheus metrics (and /status) on ADDR while the
    /// scenario runs, e.g. 127.0.0.1:9726 (not 9725, the daemon's own port), to try the
    /// Grafana dashboard without a device.
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<String>,
    /// With --metrics-listen: run at this many times real time (default: 1).
    #[arg(long, value_name = "X")]
    pub speed: Option<f64>,
    /// With --compare: scale every phase's duration by this factor (the tests' short suite).
    #[arg(long, default_value_t = 1.0, value_name = "FACTOR")]
    pub scale: f64,
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
/// chosen policy, its report, and optionally its plot and live metrics; `--compare` and
/// `--bench` are their own runs.
pub fn run(args: SimulateArgs) -> anyhow::Result<()> {
    if args.bench {
        return run_bench(args.json);
    }
    if args.compare {
        return run_compare(&args);
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
    let mut exporter = exporter(&args)?;
    let mut clocked = crate::cli::common::VirtualClocked {
        inner: controller.as_mut(),
        stamp: mergetune_export::logging::set_sim_time_ms,
    };
    let mut sampling = mergetune_lab::plot::Sampling::new(&mut clocked);
    let mut last_tick = Instant::now();
    let report = mergetune_sim::runner::run_scenario_observed(
        &mut sim,
        &mut sampling,
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
    );
    let series = sampling.finish();
    let mut report = report;
    // What the daemon priced with (the adaptive policy has a daemon; baselines do not).
    report.daemon_pricing = controller.snapshot().map(|s| s.pricing_name);
    mergetune_export::logging::set_sim_time_ms(None);
    progress.finish();
    if let Some(e) = sim.halted() {
        anyhow::bail!("simulation of {}: {e}", scenario.name);
    }
    if let Some(p) = &args.plot {
        mergetune_lab::plot::plot_run(&report, Some(&series), p)
            .with_context(|| format!("plotting to {}", p.display()))?;
    }
    print_report(&report, args.json, wall);
    Ok(())
}

fn run_compare(args: &SimulateArgs) -> anyhow::Result<()> {
    if !(args.scale.is_finite() && args.scale > 0.0) {
        anyhow::bail!("--scale {}: must be a positive number", args.scale);
    }
    let cfg = match &args.config {
        Some(p) => mergetune_logic::config::load_file(p)?,
        None => mergetune_logic::config::Config::default(),
    };
    let mut scenarios = if args.scenarios.is_empty() {
        mergetune_lab::compare::suite(args.scale)?
    } else {
        let mut v = Vec::new();
        for p in &args.scenarios {
            let mut sc = Scenario::load_file(p)?;
            mergetune_lab::compare::scale_phases(&mut sc, args.scale);
            v.push(sc);
        }
        v
    };
    for sc in &mut scenarios {
        if let Some(s) = args.seed {
            sc.seed = s;
        }
    }
    // Progress on a terminal and wall-clock figures go to stderr; stdout gets the report.
    let out = mergetune_lab::compare::run_suite(&scenarios, &cfg)?;
    if let Some(p) = &args.plot {
        for c in &out {
            let path = if out.len() == 1 {
                p.clone()
            } else {
                let stem = p.file_stem().and_then(|s| s.to_str()).unwrap_or("compare");
                p.with_file_name(format!("{stem}-{}.svg", c.scenario))
            };
            let runs: Vec<_> = c
                .runs
                .iter()
                .filter_map(|r| r.report.as_ref().map(|rep| (rep, r.series.as_ref())))
                .collect();
            mergetune_lab::plot::plot_compare(&runs, &path)
                .with_context(|| format!("plotting to {}", path.display()))?;
            eprintln!(
                "{}: plotted {}",
                mergetune_logic::printable::printable(&c.scenario),
                path.display()
            );
        }
    }
    let window_ms = cfg.window_ms();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print!(
            "{}",
            mergetune_logic::printable::printable_lines(&mergetune_lab::compare::render(
                &out, window_ms
            ))
        );
    }
    Ok(())
}
