//! The runner: one scenario under the static levels (to find the oracle), then under every
//! contender, each run a fresh simulation sampled tick by tick for `--plot`.
//!
//! A comparison is [`RUNS_PER_SCENARIO`] simulations of the whole scenario; the runner
//! reports how far it is through them (a fraction, in virtual time) so a terminal can show
//! progress. Nothing here reads the wall clock.

use super::baselines::{CONTENDERS, Contender, oracle_levels, oracle_schedule, static_level};
use super::figures::{PolicyRun, ScenarioComparison, phase_figures};
use super::summary::summarize;
use crate::plot::sampling::Sampling;
use mergetune_daemon::controller::Controller;
use mergetune_logic::config::Config;
use mergetune_logic::decision::Level;
use mergetune_sim::engine::SimError;
use mergetune_sim::engine::Simulation;
use mergetune_sim::runner::run_scenario;
use mergetune_sim::scenario::Scenario;

/// Simulations per scenario: the four static levels, then the contenders.
pub const RUNS_PER_SCENARIO: usize = 4 + CONTENDERS.len();

/// How far a comparison is, from 0 to 1: runs done and the virtual time of the current one.
pub type ProgressFn<'a> = dyn FnMut(f64) + 'a;

fn run_one(
    sc: &Scenario,
    controller: &mut dyn Controller,
    label: &str,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<PolicyRun, SimError> {
    let mut sim = Simulation::new(sc)?;
    let mut sampling = Sampling::new(controller);
    let report = run_scenario(&mut sim, &mut sampling, label, progress);
    if let Some(e) = sim.halted() {
        return Err(e.clone());
    }
    let series = sampling.finish();
    let (nomerges_writes, frozen_ns) = sim.nomerges_freezes();
    Ok(PolicyRun {
        policy: label.to_string(),
        phases: phase_figures(&mut sim),
        decisions: report.decisions.clone(),
        nomerges_writes,
        frozen_ms: frozen_ns as f64 / 1e6,
        report: Some(report),
        series: Some(series),
    })
}

/// Runs the whole comparison for one scenario.
pub fn compare(sc: &Scenario, cfg: &Config) -> Result<ScenarioComparison, SimError> {
    compare_with_progress(sc, cfg, &mut |_| {})
}

/// [`compare`], calling `progress(fraction done)` as the runs advance.
pub fn compare_with_progress(
    sc: &Scenario,
    cfg: &Config,
    progress: &mut ProgressFn<'_>,
) -> Result<ScenarioComparison, SimError> {
    // The daemon reads the scenario's cost profile, the one the oracle is chosen in.
    let cfg = &sc.daemon_config(cfg);
    let interval_ms = cfg.daemon.interval_ms;
    let (profile, second_profile) = {
        let sim = Simulation::new(sc)?;
        let (a, b) = sim.cost_names();
        (a.to_string(), b.to_string())
    };
    let mut done = 0usize;
    let step = |done: usize| {
        move |now: u64, end: u64| {
            let within = if end == 0 {
                1.0
            } else {
                now as f64 / end as f64
            };
            (done as f64 + within.min(1.0)) / RUNS_PER_SCENARIO as f64
        }
    };
    let mut run = |c: &mut dyn Controller, label: &str, done: &mut usize| {
        let at = step(*done);
        let r = run_one(sc, c, label, &mut |now, end| progress(at(now, end)));
        *done += 1;
        r
    };
    // Static levels, for the oracle.
    let mut statics = Vec::new();
    for level in Level::ALL {
        let mut c = static_level(interval_ms, level);
        statics.push(run(&mut c, &format!("static-{level}"), &mut done)?);
    }
    let oracle_levels = oracle_levels(&statics);
    let schedule = oracle_schedule(&statics[0], &oracle_levels);
    let mut runs = Vec::with_capacity(CONTENDERS.len());
    for c in CONTENDERS {
        let mut ctl = c.controller(cfg, &schedule);
        runs.push(run(ctl.as_mut(), c.label(), &mut done)?);
    }
    let duration_s = sc.duration_ns() as f64 / 1e9;
    let total = |r: &PolicyRun| r.phases.iter().map(|p| p.cycles).sum::<u64>() as f64;
    let base = &runs[0];
    let base_cycles = total(base);
    let oracle = CONTENDERS
        .iter()
        .position(|c| *c == Contender::Oracle)
        .map(|i| &runs[i])
        .unwrap_or(base);
    let oracle_saved = if base_cycles > 0.0 {
        (base_cycles - total(oracle)) / base_cycles * 100.0
    } else {
        0.0
    };
    let rows = runs
        .iter()
        .map(|r| summarize(r, base, oracle_saved, &oracle_levels, duration_s))
        .collect();
    Ok(ScenarioComparison {
        scenario: sc.name.clone(),
        duration_s,
        profile,
        second_profile,
        oracle_levels,
        rows,
        runs,
    })
}
