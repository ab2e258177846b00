//! `mergetune-lab compare`: scenarios under the adaptive policy and its baselines, side by
//! side (`mergetune simulate --compare` before the lab had a binary of its own). The runs
//! and the report are the lab's ([`mergetune_lab::compare`]); this reads the arguments,
//! draws the plots and prints.

use anyhow::Context as _;
use mergetune_sim::scenario::Scenario;
use std::path::PathBuf;

#[derive(Debug, Clone, clap::Args)]
pub struct CompareArgs {
    /// Scenario files (TOML), any number of them (none: the shipped comparison suite).
    pub scenarios: Vec<PathBuf>,
    /// Draw the policies side by side as an SVG, one file per scenario (FILE's stem +
    /// scenario name).
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// Scale every phase's duration by this factor (the tests' short suite).
    #[arg(long, default_value_t = 1.0, value_name = "FACTOR")]
    pub scale: f64,
    /// Print the report as one JSON document.
    #[arg(long)]
    pub json: bool,
    /// Daemon configuration for the adaptive policy (default: built-in defaults).
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Override the scenarios' seed.
    #[arg(long)]
    pub seed: Option<u64>,
}

pub fn run(args: &CompareArgs) -> anyhow::Result<()> {
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
