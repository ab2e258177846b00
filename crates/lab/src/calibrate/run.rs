//! `mergetune calibrate` on the command line: its arguments, the tools it needs, and the
//! run: the interleaved measurement loop over schedulers, levels and workloads, the toggle
//! runs, then the profile.

use super::fio::{RunSample, measure_run, toggle_run};
use super::profile::{
    Measured, Samples, build_profile, summarize_toggle, utc_now_rfc3339, write_profile,
};
use super::scratch::{ScratchLoop, detach_leftovers, run_cmd};
use super::stats;
use anyhow::{Context, Result, bail};
use mergetune_kernel::roots::{KernelRoots, PROCFS, SYSFS};
use mergetune_kernel::scheduler::Scheduler;
use mergetune_logic::decision::Level;
use mergetune_logic::pricing::profile::{ToggleCost, Workload};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

const DEFAULT_SEED: u64 = 1;
const DEFAULT_TOGGLE_SCHEDULER: Scheduler = Scheduler::MqDeadline;

#[derive(clap::Args, Debug, Clone)]
pub struct CalibrateArgs {
    /// A short run for tests: 2 repetitions of 300 ms windows, 2 short toggle pairs.
    #[arg(long)]
    pub quick: bool,
    /// Write the profile here (TOML) [default: print it].
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Repetitions of every cell [default: 10; --quick: 2].
    #[arg(long)]
    pub reps: Option<u32>,
    /// Measured window of each run, ms [default: 1000; --quick: 300].
    #[arg(long)]
    pub runtime_ms: Option<u64>,
    /// Schedulers to measure (comma-separated) [default: none,mq-deadline,bfq,kyber; with
    /// --device: the device's own].
    #[arg(long, value_delimiter = ',')]
    pub schedulers: Vec<Scheduler>,
    /// The old end-to-end mode: CPU per I/O of fio and the kworkers at each level,
    /// levels interleaved (about 25 minutes), instead of the merge path sampled.
    #[arg(long)]
    pub end_to_end: bool,
    /// Measure the merge path on this device (a /sys/block name, e.g. nvme0n1) instead of
    /// a scratch loop device: random O_DIRECT reads only (fio --readonly), bounded by
    /// --rate-iops and --max-seconds, at the device's own scheduler; its nomerges and
    /// front_merges are recorded in --state-dir first and put back at the end, or by a
    /// guard process if calibrate is killed.
    #[arg(long, value_name = "NAME")]
    pub device: Option<String>,
    /// Sampled windows per cell [default: 10; --quick: 4].
    #[arg(long)]
    pub windows: Option<u32>,
    /// N of "1 and N submitters" (fio jobs at once).
    #[arg(long, default_value_t = 2)]
    pub submitters: u32,
    /// Cap on fio's rate, I/Os per second [default: none on a scratch device, 20000 with
    /// --device].
    #[arg(long)]
    pub rate_iops: Option<u64>,
    /// Stop starting cells after this many seconds.
    #[arg(long, default_value_t = 600)]
    pub max_seconds: u64,
    /// Where the device's original tunables are recorded while calibrate runs.
    #[arg(long, default_value = "/run/mergetune-calibrate")]
    pub state_dir: PathBuf,
    /// Measure what the live pricing's sampler costs (pairs of --runtime-ms blocks with
    /// the sampler on and off in one fio run) against the saving it protects, and print it.
    #[arg(long, value_name = "PAIRS")]
    pub sampler_overhead: Option<u32>,
    /// Internal: the guard process that restores --state-dir when calibrate ends.
    #[arg(long, hide = true, value_name = "DIR")]
    pub guard: Option<PathBuf>,
    /// For tests: the root of sysfs.
    #[arg(long, hide = true, default_value = SYSFS)]
    pub sysfs_root: PathBuf,
    /// For tests: the runtime directory whose `devices/` holds the host-wide device claims
    /// [default: /run/mergetune, and none under a fake --sysfs-root].
    #[arg(long, hide = true)]
    pub runtime_dir: Option<PathBuf>,
    /// The CPU fio is pinned to [default: the last one].
    #[arg(long)]
    pub cpu: Option<usize>,
    /// A tmpfs directory for the scratch loop device's backing file.
    #[arg(long, default_value = "/dev/shm")]
    pub tmpfs_dir: PathBuf,
    /// Size of the backing file, MiB.
    #[arg(long, default_value_t = 512)]
    pub size_mib: u64,
    /// Seed of the interleaving order.
    #[arg(long, default_value_t = DEFAULT_SEED)]
    pub seed: u64,
    /// Skip the toggle-freeze measurement.
    #[arg(long)]
    pub no_toggle: bool,
    /// Toggle measurement: pairs of (toggled, untoggled) runs [default: 5; --quick: 2].
    #[arg(long)]
    pub toggle_reps: Option<u32>,
    /// Toggle measurement: length of each run, s [default: 20; --quick: 2].
    #[arg(long)]
    pub toggle_runtime_s: Option<f64>,
    /// Toggle measurement: one nomerges write every this many ms [default: 1000; --quick: 250].
    #[arg(long)]
    pub toggle_interval_ms: Option<u64>,
    /// Toggle measurement: the scheduler.
    #[arg(long, default_value_t = DEFAULT_TOGGLE_SCHEDULER)]
    pub toggle_scheduler: Scheduler,
    /// Name written into the profile.
    #[arg(long, default_value = mergetune_logic::pricing::profile::MEASURED_NAME)]
    pub name: String,
}

fn check_tools() -> Result<()> {
    if !rustix::process::geteuid().is_root() {
        bail!("calibrate needs root (it attaches a scratch loop device)");
    }
    for (tool, arg) in [
        ("fio", "--version"),
        ("taskset", "--version"),
        ("losetup", "--version"),
    ] {
        let ok = Command::new(tool)
            .arg(arg)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !ok {
            bail!("{tool} not found (apt-get install fio util-linux)");
        }
    }
    Ok(())
}

/// The schedulers `--schedulers` named, each once, in the order given.
fn parse_schedulers(named: &[Scheduler]) -> Result<Vec<Scheduler>> {
    let mut out = Vec::new();
    for &s in named {
        if !out.contains(&s) {
            out.push(s);
        }
    }
    if out.is_empty() {
        bail!("--schedulers: at least one");
    }
    Ok(out)
}

/// The flags given that only the end-to-end mode reads (the default mode would run
/// without them and exit 0, as if they had been honoured).
fn end_to_end_only_flags(args: &CalibrateArgs) -> Vec<&'static str> {
    [
        ("--cpu", args.cpu.is_some()),
        ("--reps", args.reps.is_some()),
        ("--toggle-reps", args.toggle_reps.is_some()),
        ("--toggle-runtime-s", args.toggle_runtime_s.is_some()),
        ("--toggle-interval-ms", args.toggle_interval_ms.is_some()),
        (
            "--toggle-scheduler",
            args.toggle_scheduler != DEFAULT_TOGGLE_SCHEDULER,
        ),
        ("--no-toggle", args.no_toggle),
        ("--seed", args.seed != DEFAULT_SEED),
    ]
    .into_iter()
    .filter_map(|(flag, given)| given.then_some(flag))
    .collect()
}

/// Whether this process may run on CPU `c` (its affinity mask: a CPU that is offline,
/// or outside a cgroup's cpuset, is not one to pin fio to).
fn cpu_allowed(c: usize) -> bool {
    rustix::thread::sched_getaffinity(None).is_ok_and(|set| set.is_set(c))
}

/// Checks of the end-to-end mode's arguments, before any I/O.
fn check_end_to_end_args(args: &CalibrateArgs, ncpu: usize) -> Result<()> {
    if args.name.trim().is_empty() || args.name.chars().any(char::is_control) {
        bail!("--name: must be a non-empty name without control characters");
    }
    if let Some(t) = args.toggle_runtime_s
        && !(t.is_finite() && t > 0.0 && t <= 3600.0)
    {
        bail!("--toggle-runtime-s: {t} is not in (0, 3600]");
    }
    if let Some(c) = args.cpu
        && (c >= ncpu || !cpu_allowed(c))
    {
        bail!("--cpu: {c} is not a CPU this process may run on here (0..{ncpu})");
    }
    super::merge_path::check_size_and_output(args.size_mib, args.output.as_deref())
}

/// The end-to-end run's first line: the device, the fio CPU and the blocks.
fn announce_end_to_end(lp: &ScratchLoop, size_mib: u64, cpu: usize, set: &Settings) {
    eprintln!(
        "calibrate: {} over a {} MiB tmpfs file (loop direct I/O {}), fio on CPU {cpu}, {} reps of {} ms windows",
        lp.dev.display(),
        size_mib,
        if lp.direct_io { "on" } else { "off: buffered" },
        set.reps,
        set.window_ms
    );
}

/// `mergetune calibrate`: one measurement procedure in order (refusals, signals, leftovers,
/// the scratch device, the interleaved runs, the profile), whose scratch device and signal
/// flag live across every step.
pub fn run(args: CalibrateArgs) -> Result<i32> {
    if let Some(dir) = &args.guard {
        return super::merge_path::guard(dir, &args.sysfs_root, runtime_dir(&args).as_deref());
    }
    let ncpu = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    if !args.end_to_end {
        if let Some(flag) = end_to_end_only_flags(&args).first() {
            bail!(
                "{flag} applies to --end-to-end only: the default mode measures the merge path (--windows, --runtime-ms, --submitters set it) and would ignore it"
            );
        }
        return run_merge_path(&args);
    }
    check_end_to_end_args(&args, ncpu)?;
    let (schedulers, toggle_sched) = end_to_end_schedulers(&args)?;
    let set = Settings::of(&args)?;
    check_tools()?;
    let cpu = args.cpu.unwrap_or(ncpu - 1);

    let stop = super::signals::stop_on_signals()?;
    clean_leftovers(&args);
    let started = Instant::now();
    let measured_at = utc_now_rfc3339();
    let load_start = loadavg_1m();
    let lp = ScratchLoop::create(&args.tmpfs_dir, args.size_mib, &args.sysfs_root)?;
    let schedulers = lp.usable_schedulers(&schedulers)?;
    if !args.no_toggle && !schedulers.contains(&toggle_sched) {
        bail!(
            "--toggle-scheduler {}: this kernel does not offer it (or pass --no-toggle)",
            toggle_sched.name()
        );
    }
    let bench = Bench {
        lp: &lp,
        cpu,
        json: lp.dir.join("fio.json"),
        stop: &stop,
        started,
    };
    announce_end_to_end(&lp, args.size_mib, cpu, &set);
    // The first heavy run on a new loop device can be a cold outlier.
    measure_run(
        &lp,
        Workload::RandomUnbatched,
        cpu,
        set.window_ms,
        &bench.json,
    )?;
    let samples = bench.interleaved(&schedulers, &set, args.seed)?;
    let toggle = if args.no_toggle {
        None
    } else {
        Some(bench.toggle(toggle_sched, &set)?)
    };

    let profile = build_profile(Measured {
        name: args.name.clone(),
        loop_direct_io: lp.direct_io,
        kernel_release: run_cmd("uname", &["-r"]).unwrap_or_default(),
        schedulers: schedulers.clone(),
        measured_at,
        duration_s: started.elapsed().as_secs_f64().round(),
        reps: set.reps,
        window_ms: set.window_ms,
        loadavg: vec![load_start, loadavg_1m()],
        samples,
        toggle,
    });
    drop(lp);
    write_profile(&profile, args.output.as_deref())?;
    Ok(0)
}

/// The schedulers `--schedulers` names (all four when it names none) and the
/// `--toggle-scheduler`.
fn end_to_end_schedulers(args: &CalibrateArgs) -> Result<(Vec<Scheduler>, Scheduler)> {
    let named = if args.schedulers.is_empty() {
        &Scheduler::ALL[..]
    } else {
        &args.schedulers[..]
    };
    Ok((parse_schedulers(named)?, args.toggle_scheduler))
}

/// The end-to-end mode's counts and lengths: each its flag's, or the mode's default
/// (shorter with `--quick`).
struct Settings {
    reps: u32,
    window_ms: u64,
    toggle_reps: u32,
    toggle_runtime_s: f64,
    toggle_interval_ms: u64,
}

impl Settings {
    fn of(args: &CalibrateArgs) -> Result<Settings> {
        let reps = args.reps.unwrap_or(if args.quick { 2 } else { 10 });
        let window_ms = args
            .runtime_ms
            .unwrap_or(if args.quick { 300 } else { 1000 });
        let toggle_reps = args.toggle_reps.unwrap_or(if args.quick { 2 } else { 5 });
        let toggle_runtime_s = args
            .toggle_runtime_s
            .unwrap_or(if args.quick { 2.0 } else { 20.0 });
        let toggle_interval_ms =
            args.toggle_interval_ms
                .unwrap_or(if args.quick { 250 } else { 1000 });
        if reps == 0 || window_ms < 50 || toggle_reps == 0 || toggle_interval_ms == 0 {
            bail!(
                "--reps, --toggle-reps and --toggle-interval-ms must be >= 1, --runtime-ms >= 50"
            );
        }
        Ok(Settings {
            reps,
            window_ms,
            toggle_reps,
            toggle_runtime_s,
            toggle_interval_ms,
        })
    }
}

/// What every fio run of the end-to-end mode shares: the scratch device, fio's CPU and
/// output file, the signal flag and the start, for the progress lines.
struct Bench<'a> {
    lp: &'a ScratchLoop,
    cpu: usize,
    json: PathBuf,
    stop: &'a AtomicBool,
    started: Instant,
}

impl Bench<'_> {
    fn check_stop(&self) -> Result<()> {
        if self.stop.load(Ordering::Relaxed) {
            bail!("interrupted");
        }
        Ok(())
    }

    /// The reps: per rep, each scheduler in a rotated order, and in it each level and
    /// workload in a shuffled order.
    fn interleaved(&self, schedulers: &[Scheduler], set: &Settings, seed: u64) -> Result<Samples> {
        let (lp, reps) = (self.lp, set.reps);
        let mut samples: Samples = Samples::new();
        for rep in 0..reps {
            let mut order = schedulers.to_vec();
            let n = order.len();
            order.rotate_left(rep as usize % n);
            for (si, &s) in order.iter().enumerate() {
                lp.set_scheduler(s)?;
                let mut cells: Vec<(Level, Workload)> = mergetune_logic::tuners::profile_levels(s)
                    .iter()
                    .flat_map(|&l| Workload::ALL.into_iter().map(move |w| (l, w)))
                    .collect();
                stats::shuffle(&mut cells, seed ^ ((rep as u64) << 32) ^ si as u64);
                for (l, w) in cells {
                    self.check_stop()?;
                    lp.set_level(s, l)?;
                    let r = self.measure_retried(s, l, w, set.window_ms)?;
                    samples.entry((s, l, w)).or_default().push(r);
                }
                lp.set_level(s, Level::L0)?;
            }
            eprintln!(
                "calibrate: rep {}/{reps} done ({:.0} s)",
                rep + 1,
                self.started.elapsed().as_secs_f64()
            );
        }
        Ok(samples)
    }

    /// One run of workload `w` at level `l` of `s`; a run starved past its deadline by
    /// other tenants is tried again, twice.
    fn measure_retried(
        &self,
        s: Scheduler,
        l: Level,
        w: Workload,
        window_ms: u64,
    ) -> Result<RunSample> {
        let run = || measure_run(self.lp, w, self.cpu, window_ms, &self.json);
        let mut r = run();
        for _ in 0..2 {
            if let Err(e) = &r {
                eprintln!("calibrate: {s} {l} {w}: {e:#}; again");
                r = run();
            }
        }
        r.with_context(|| format!("{s} {l} {w}"))
    }

    /// The toggle runs on `sched` at L0, with and without the toggling in ABBA order.
    fn toggle(&self, sched: Scheduler, set: &Settings) -> Result<ToggleCost> {
        self.lp.set_scheduler(sched)?;
        self.lp.set_level(sched, Level::L0)?;
        let (mut with, mut without) = (Vec::new(), Vec::new());
        for rep in 0..set.toggle_reps {
            // ABBA order: neither arm always runs first.
            let arms = if rep % 2 == 0 {
                [true, false]
            } else {
                [false, true]
            };
            for t in arms {
                self.check_stop()?;
                let r = toggle_run(
                    self.lp,
                    self.cpu,
                    set.toggle_runtime_s,
                    set.toggle_interval_ms,
                    t,
                    &self.json,
                )?;
                if t { with.push(r) } else { without.push(r) }
            }
        }
        eprintln!(
            "calibrate: toggle runs done ({:.0} s)",
            self.started.elapsed().as_secs_f64()
        );
        Ok(summarize_toggle(
            sched,
            set.toggle_interval_ms,
            set.toggle_runtime_s,
            &with,
            &without,
        ))
    }
}

/// The machine's 1-minute load average, recorded beside the profile (NaN where unreadable).
fn loadavg_1m() -> f64 {
    mergetune_kernel::cputime::loadavg_1m(Path::new(PROCFS)).unwrap_or(f64::NAN)
}

/// What calibrate reads and writes under: `--sysfs-root` and the machine's procfs.
fn roots(args: &CalibrateArgs) -> KernelRoots {
    KernelRoots::new(&args.sysfs_root, PROCFS)
}

/// Where the device claims live: `--runtime-dir`, else the daemon's runtime directory on
/// the real machine, and none over a fake sysfs tree.
fn runtime_dir(args: &CalibrateArgs) -> Option<PathBuf> {
    mergetune_daemon::state::runtime_dir(args.runtime_dir.as_deref(), &roots(args))
}

/// Detaches the scratch loop devices a killed calibrate left (their queues put back), before
/// this run attaches its own: every mode that may attach one calls it.
fn clean_leftovers(args: &CalibrateArgs) {
    for name in detach_leftovers(&args.tmpfs_dir, &args.sysfs_root, Path::new(PROCFS)) {
        eprintln!("calibrate: detached {name}, left by an earlier calibrate that was killed");
    }
}

/// The default mode: the merge path sampled (`merge_path`).
fn run_merge_path(args: &CalibrateArgs) -> Result<i32> {
    use super::merge_path::{Plan, run};
    let schedulers = if args.schedulers.is_empty() {
        match &args.device {
            // the device's own, read by run() (a Plan of one, checked there)
            Some(d) => {
                let mut fs = roots(args).fs();
                let info = mergetune_kernel::devices::read_device(&mut fs, d)
                    .with_context(|| format!("--device {d}"))?;
                match info.scheduler {
                    Some(mergetune_kernel::scheduler::Reported::Known(s)) => vec![s],
                    other => bail!(
                        "--device {d}: scheduler {:?} is not one calibrate knows",
                        other.as_ref().map_or("", |r| r.name())
                    ),
                }
            }
            None => Scheduler::ALL.to_vec(),
        }
    } else {
        parse_schedulers(&args.schedulers)?
    };
    let plan = Plan {
        schedulers,
        device: args.device.clone(),
        windows: args.windows.unwrap_or(if args.quick { 4 } else { 10 }),
        window_ms: args
            .runtime_ms
            .unwrap_or(if args.quick { 300 } else { 1000 }),
        submitters: args.submitters,
        rate_iops: args.rate_iops.or(args.device.as_ref().map(|_| 20_000)),
        max_seconds: args.max_seconds,
        state_dir: args.state_dir.clone(),
        tmpfs_dir: args.tmpfs_dir.clone(),
        size_mib: args.size_mib,
        name: if args.name == mergetune_logic::pricing::profile::MEASURED_NAME {
            format!(
                "merge-path-{}",
                run_cmd("uname", &["-r"]).unwrap_or_default()
            )
        } else {
            args.name.clone()
        },
        output: args.output.clone(),
        roots: roots(args),
        runtime_dir: runtime_dir(args),
    };
    plan.check()?;
    check_tools()?;
    clean_leftovers(args);
    if let Some(pairs) = args.sampler_overhead {
        if !(10..=100_000).contains(&pairs) {
            bail!("--sampler-overhead: {pairs} pairs is not in 10..=100000");
        }
        return super::merge_path::overhead(
            &plan,
            pairs,
            &mergetune_logic::pricing::config::PricingConfig::default(),
        );
    }
    run(plan, run_cmd("uname", &["-r"]).unwrap_or_default())
}
