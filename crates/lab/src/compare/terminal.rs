//! `simulate --compare` at the terminal: the suite run one scenario after another, with
//! `[3/7] NAME 42%` on stderr while it runs when stderr is a terminal (nothing on a pipe),
//! and the wall-clock figures (time per scenario, simulated seconds per second) on stderr
//! once it is done. The report itself ([`fn@super::render`], or the JSON) is printed by the
//! caller on stdout and holds virtual-time figures only: the same scenarios, the same
//! bytes.

use super::figures::ScenarioComparison;
use super::runner::{RUNS_PER_SCENARIO, compare_with_progress};
use anyhow::Context as _;
use mergetune_logic::config::Config;
use mergetune_sim::scenario::Scenario;
use std::io::{IsTerminal, Write};
use std::time::Instant;

/// The progress line of scenario `index` (0-based) of `total` at `fraction` (0..=1) done:
/// `[3/7] NAME 42%`. The percentage is rounded down, so 100% means done.
pub fn progress_line(index: usize, total: usize, name: &str, fraction: f64) -> String {
    let percent = (fraction.clamp(0.0, 1.0) * 100.0).floor() as u32;
    format!("[{}/{total}] {name} {percent}%", index + 1)
}

/// Where progress goes: stderr when it is a terminal, nowhere otherwise.
struct Progress {
    enabled: bool,
    /// The percentage last drawn, so a line is written only when it changes.
    shown: Option<(usize, u32)>,
    width: usize,
}

impl Progress {
    fn new(enabled: bool) -> Self {
        Progress {
            enabled,
            shown: None,
            width: 0,
        }
    }

    fn draw(&mut self, index: usize, total: usize, name: &str, fraction: f64) {
        if !self.enabled {
            return;
        }
        let percent = (fraction.clamp(0.0, 1.0) * 100.0).floor() as u32;
        if self.shown == Some((index, percent)) {
            return;
        }
        self.shown = Some((index, percent));
        let line = progress_line(index, total, name, fraction);
        let pad = self.width.saturating_sub(line.len());
        self.width = line.len();
        let _ = write!(std::io::stderr(), "\r{line}{}", " ".repeat(pad));
    }

    /// Ends the current progress line and prints `done` in its place.
    fn done(&mut self, done: &str) {
        if !self.enabled {
            return;
        }
        let pad = self.width.saturating_sub(done.len());
        self.width = 0;
        self.shown = None;
        let _ = writeln!(std::io::stderr(), "\r{done}{}", " ".repeat(pad));
    }
}

/// Compares every scenario (the daemon's per-decision log lines silenced: dozens of runs
/// would drown the table), showing progress on a terminal; then says on stderr how long
/// it took. Returns the comparisons in the scenarios' order.
pub fn run_suite(scenarios: &[Scenario], cfg: &Config) -> anyhow::Result<Vec<ScenarioComparison>> {
    let mut progress = Progress::new(std::io::stderr().is_terminal());
    let total = scenarios.len();
    let started = Instant::now();
    let mut out = Vec::with_capacity(total);
    let mut simulated_s = 0.0;
    for (i, sc) in scenarios.iter().enumerate() {
        let one = Instant::now();
        progress.draw(i, total, &sc.name, 0.0);
        let cmp =
            tracing::subscriber::with_default(tracing::subscriber::NoSubscriber::default(), || {
                compare_with_progress(sc, cfg, &mut |f| progress.draw(i, total, &sc.name, f))
            });
        out.push(cmp.with_context(|| format!("scenario {}", sc.name))?);
        simulated_s += sc.duration_ns() as f64 / 1e9 * RUNS_PER_SCENARIO as f64;
        progress.done(&format!(
            "[{}/{total}] {}: {:.1} s",
            i + 1,
            sc.name,
            one.elapsed().as_secs_f64()
        ));
    }
    let wall_s = started.elapsed().as_secs_f64();
    eprintln!(
        "compared {total} scenario(s), {} simulations, in {wall_s:.1} s wall time ({:.0} simulated s per s)",
        total * RUNS_PER_SCENARIO,
        simulated_s / wall_s.max(1e-9)
    );
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_progress_line_names_the_scenario_and_rounds_down() {
        assert_eq!(progress_line(2, 7, "backup", 0.429), "[3/7] backup 42%");
        assert_eq!(progress_line(0, 1, "x", 0.999), "[1/1] x 99%");
        assert_eq!(progress_line(0, 1, "x", 1.0), "[1/1] x 100%");
        assert_eq!(progress_line(0, 1, "x", 7.0), "[1/1] x 100%");
    }
}
