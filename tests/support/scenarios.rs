//! The simulated scenario the daemon's tests share: one SSD on the `none` scheduler (so the
//! ladder goes from L0 to L3 in one step, with no front or simple merges between), a phase
//! of random 4 KiB I/O that takes it to L3, then a phase of batched sequential 4 KiB I/O
//! that merging helps. Each test spells out only what it varies, so that the differences
//! between them are visible and the device is described once.

use mergetune_sim::scenario::Scenario;

/// The knobs the tests turn; everything else is the shared device and job shape.
pub struct RandomThenSequential {
    pub name: &'static str,
    pub seed: u64,
    /// The random phase: its length, read share and rate.
    pub random_s: f64,
    pub random_read_percent: f64,
    pub random_iops: f64,
    /// The sequential phase and its job's name (they appear in a run's report).
    pub sequential_phase: &'static str,
    pub sequential_job: &'static str,
    pub sequential_s: f64,
    pub sequential_read_percent: f64,
    /// `None`: as fast as the queue allows.
    pub sequential_iops: Option<f64>,
}

impl RandomThenSequential {
    pub fn toml(&self) -> String {
        let rate = self
            .sequential_iops
            .map(|r| format!("rate_iops = {r:?}\n"))
            .unwrap_or_default();
        let random = phase(
            "random",
            self.random_s,
            "db",
            "random",
            self.random_read_percent,
        );
        let sequential = phase(
            self.sequential_phase,
            self.sequential_s,
            self.sequential_job,
            "sequential",
            self.sequential_read_percent,
        );
        format!(
            r#"name = "{name}"
seed = {seed}

[[device]]
name = "sda"
kind = "ssd"
scheduler = "none"
queue_depth = 32
parallelism = 4
read_overhead_us = 90.0
write_overhead_us = 40.0
bandwidth_mb_s = 520.0

{random}rate_iops = {random_iops:?}

{sequential}batch = 16
{rate}"#,
            name = self.name,
            seed = self.seed,
            random_iops = self.random_iops,
        )
    }

    pub fn scenario(&self) -> Scenario {
        Scenario::from_toml_str(&self.toml(), self.name, None).unwrap()
    }

    /// Runs the scenario under a simulated daemon with `cfg`, from the first tick to the
    /// end, calling `each` after every tick with the daemon and the tick's time: the
    /// daemon as it ended, and every decision.
    #[allow(dead_code)] // the simulator's tests drive it; the command line's do not
    pub fn drive(
        &self,
        cfg: mergetune_logic::config::Config,
        mut each: impl FnMut(&mergetune_daemon::adaptive::Daemon, u64),
    ) -> (
        mergetune_daemon::adaptive::Daemon,
        Vec<mergetune_logic::decision::Decision>,
    ) {
        use mergetune_daemon::controller::Controller;
        let sc = self.scenario();
        let mut sim = mergetune_sim::engine::Simulation::new(&sc).unwrap();
        let mut d = mergetune_daemon::adaptive::Daemon::simulated(cfg);
        let mut decisions = d.tick(0, &mut sim);
        let mut t_ms = 0;
        while t_ms * 1_000_000 < sim.duration_ns() {
            t_ms += d.next_tick_in_ms();
            sim.advance_to(t_ms * 1_000_000);
            decisions.extend(Controller::tick(&mut d, t_ms, &mut sim));
            each(&d, t_ms);
        }
        (d, decisions)
    }
}

/// Records a simulated daemon with `cfg` on `sc` into `path`, for `ms` of it (the ticks at
/// 0 and `ms` included), as `run --record` would on a host.
#[allow(dead_code)] // the command line's tests replay it; the simulator's do not
pub fn record(
    sc: &Scenario,
    cfg: mergetune_logic::config::Config,
    path: &std::path::Path,
    ms: u64,
) {
    use mergetune_daemon::record::{Recorder, RecordingFs};
    use mergetune_kernel::blockfs::BlockFs;
    let mut sim = mergetune_sim::engine::Simulation::new(sc).unwrap();
    let mut d = mergetune_daemon::adaptive::Daemon::simulated(cfg);
    let mut rec = Recorder::create(path).unwrap();
    let mut t = 0;
    while t <= ms {
        sim.advance_to(t * 1_000_000);
        let fs: &mut dyn BlockFs = &mut sim;
        let mut rfs = RecordingFs::new(fs, t);
        d.tick(t, &mut rfs);
        rec.write(&rfs.finish()).unwrap();
        t += d.next_tick_in_ms();
    }
}

/// A phase of `secs` with one job of 4 KiB I/O at queue depth 32 on sda, up to the job's
/// own further lines.
fn phase(name: &str, secs: f64, job: &str, pattern: &str, read_percent: f64) -> String {
    format!(
        r#"[[phase]]
name = "{name}"
duration_s = {secs:?}
[[phase.job]]
name = "{job}"
device = "sda"
pattern = "{pattern}"
read_percent = {read_percent:?}
block_size_kb = 4
iodepth = 32
"#
    )
}
