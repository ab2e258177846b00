//! What a comparison measures, as data: per phase of one run the CPU in both cost profiles,
//! the bytes and the worst p99 ([`PhaseFigures`], read from the simulator by
//! [`phase_figures`]); per policy its run ([`PolicyRun`]) and its summary against the
//! kernel default and the oracle ([`PolicySummary`]); per scenario all of them
//! ([`ScenarioComparison`]).

use mergetune_kernel::blockfs::Sysfs;
use mergetune_logic::decision::Decision;
use mergetune_logic::decision::{Level, level_index};
use mergetune_sim::engine::Simulation;
use serde::Serialize;

/// What one phase cost and delivered under one policy.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseFigures {
    pub name: String,
    pub start_ms: u64,
    pub end_ms: u64,
    /// Block-layer CPU over all devices, in the scenario's cost profile.
    pub cycles: u64,
    /// The same in the second profile.
    pub cycles_second: u64,
    /// Bytes completed on the top devices (those nothing is stacked on).
    pub bytes: u64,
    /// The worst p99 completion latency over top devices and directions, in µs.
    pub p99_us: f64,
}

/// One policy's run of one scenario.
#[derive(Debug, Clone, Serialize)]
pub struct PolicyRun {
    pub policy: String,
    pub phases: Vec<PhaseFigures>,
    pub decisions: Vec<Decision>,
    /// `queue/nomerges` writes (each a queue freeze) and the time they kept queues frozen.
    pub nomerges_writes: u64,
    pub frozen_ms: f64,
    /// The simulator's report and the sampled time series, for `--plot`.
    #[serde(skip)]
    pub report: Option<mergetune_sim::report::Report>,
    #[serde(skip)]
    pub series: Option<crate::plot::series::Series>,
}

/// The figures of every phase of a finished simulation.
pub fn phase_figures(sim: &mut Simulation) -> Vec<PhaseFigures> {
    let devs = sim.device_names();
    let top: Vec<String> = devs
        .iter()
        .filter(|d| sim.list_dir(d, "holders").unwrap_or_default().is_empty())
        .cloned()
        .collect();
    let phases = sim.phases().to_vec();
    phases
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut f = PhaseFigures {
                name: p.name.clone(),
                start_ms: p.start_ns / 1_000_000,
                end_ms: p.end_ns / 1_000_000,
                cycles: 0,
                cycles_second: 0,
                bytes: 0,
                p99_us: 0.0,
            };
            for d in &devs {
                let Some(acc) = sim.phase_acc(i, d) else {
                    continue;
                };
                f.cycles += acc.cycles;
                f.cycles_second += acc.cycles_second;
                if top.contains(d) {
                    f.bytes += (acc.sectors[0] + acc.sectors[1]) * 512;
                    for h in &acc.lat {
                        if h.count() > 0 {
                            f.p99_us = f.p99_us.max(h.quantile(0.99) as f64 / 1000.0);
                        }
                    }
                }
            }
            f
        })
        .collect()
}

/// The comparison of one scenario.
#[derive(Debug, Clone, Serialize)]
pub struct ScenarioComparison {
    pub scenario: String,
    pub duration_s: f64,
    /// The cost profiles of `cpu_saved_percent` and `cpu_saved_second_percent`.
    pub profile: String,
    pub second_profile: String,
    /// The oracle's level per phase (in JSON, indices: `[0, 3]`).
    #[serde(serialize_with = "level_index::vec::serialize")]
    pub oracle_levels: Vec<Level>,
    pub rows: Vec<PolicySummary>,
    pub runs: Vec<PolicyRun>,
}

/// The figures that matter, per policy.
#[derive(Debug, Clone, Serialize)]
pub struct PolicySummary {
    pub policy: String,
    /// Block-layer CPU saved against the kernel default, percent of its CPU, in the
    /// scenario's cost profile.
    pub cpu_saved_percent: f64,
    /// The same in the second profile.
    pub cpu_saved_second_percent: f64,
    /// `queue/nomerges` writes and the time their freezes kept queues from dispatching.
    pub nomerges_writes: u64,
    pub frozen_ms: f64,
    /// This policy's saving as a share of the oracle's, percent (100 when the oracle saves
    /// nothing and neither does this policy).
    pub of_oracle_percent: f64,
    /// The worst phase's throughput loss against the kernel default, percent.
    pub worst_throughput_loss_percent: f64,
    pub worst_throughput_loss_phase: String,
    /// The worst phase's p99 latency change against the kernel default, percent.
    pub worst_p99_change_percent: f64,
    pub level_changes: usize,
    pub level_changes_per_hour: f64,
    /// Level changes after settling at the oracle's level of their phase (probes, trials,
    /// flapping: convergence excluded), the most in any rolling hour.
    pub settled_changes_per_hour_max: usize,
    /// Per phase change: ms until the policy moved toward the oracle's level (None: it
    /// never did within the phase; 0: it was already there).
    pub reaction_ms: Vec<Option<u64>>,
}
