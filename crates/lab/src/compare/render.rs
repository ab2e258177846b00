//! The comparison as a table for humans: one block per scenario, one row per policy.
//! Everything in it comes from the simulation in virtual time, so the same scenarios give
//! the same bytes (wall-clock figures go to stderr, never here).

use super::figures::ScenarioComparison;

/// Renders comparisons as a table for humans.
pub fn render(comparisons: &[ScenarioComparison], window_ms: u64) -> String {
    let mut s = String::new();
    for c in comparisons {
        s.push_str(&format!(
            "\nscenario {} ({:.0} s; CPU in {}, second column {}; oracle levels per phase: {})\n",
            c.scenario,
            c.duration_s,
            c.profile,
            c.second_profile,
            c.oracle_levels
                .iter()
                .map(|l| l.to_string())
                .collect::<Vec<_>>()
                .join(" ")
        ));
        s.push_str(&format!(
            "  {:<18} {:>9} {:>9} {:>9} {:>11} {:>9} {:>8} {:>9} {:>9} {:>9}  {}\n",
            "policy",
            "CPU sav%",
            "(2nd)",
            "of oracle",
            "worst tput%",
            "p99 chg%",
            "changes",
            "chg/hour",
            "settled/h",
            "frozen ms",
            "reaction per phase change"
        ));
        for r in &c.rows {
            let react: Vec<String> = r
                .reaction_ms
                .iter()
                .map(|m| match m {
                    Some(ms) => format!("{:.1}w", *ms as f64 / window_ms as f64),
                    None => "never".into(),
                })
                .collect();
            s.push_str(&format!(
                "  {:<18} {:>9.2} {:>9.2} {:>9.0} {:>11.2} {:>9.1} {:>8} {:>9.1} {:>9} {:>9.1}  {}\n",
                r.policy,
                r.cpu_saved_percent,
                r.cpu_saved_second_percent,
                r.of_oracle_percent,
                -r.worst_throughput_loss_percent,
                r.worst_p99_change_percent,
                r.level_changes,
                r.level_changes_per_hour,
                r.settled_changes_per_hour_max,
                r.frozen_ms,
                react.join(" ")
            ));
        }
    }
    s
}
