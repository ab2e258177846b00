//! `mergetune-lab simulate --plot` and `mergetune-lab replay --plot`: `mergetune`'s own
//! simulate and replay runs, with the lab's [`Sampling`] around the controller to record
//! every tick, then the SVG. What they print is what `mergetune simulate` and `replay`
//! print; `mergetune` itself draws nothing.

use anyhow::Context as _;
use mergetune::cli::common::Watch;
use mergetune::cli::replay::ReplayArgs;
use mergetune::cli::simulate::SimulateArgs;
use mergetune_daemon::controller::Controller;
use mergetune_lab::plot::{Sampling, Series};
use mergetune_sim::report::Report;
use std::path::PathBuf;

#[derive(Debug, Clone, clap::Args)]
pub struct SimulatePlotArgs {
    /// Draw the run as an SVG: per device the merge ratios, ladder level, bios/s and latency
    /// over time, decisions and probes marked, phases shaded.
    #[arg(long, value_name = "FILE.svg", required = true)]
    pub plot: PathBuf,
    #[command(flatten)]
    pub run: SimulateArgs,
}

#[derive(Debug, clap::Args)]
pub struct ReplayPlotArgs {
    /// Draw merge ratios, ladder level, bios/s and latency per device over time (SVG).
    #[arg(long, value_name = "FILE.svg", required = true)]
    pub plot: PathBuf,
    #[command(flatten)]
    pub run: ReplayArgs,
}

/// Every tick of a run, sampled through [`Sampling`], for the plot.
fn sampled(inner: &mut dyn Controller, drive: &mut dyn FnMut(&mut dyn Controller)) -> Series {
    let mut sampling = Sampling::new(inner);
    drive(&mut sampling);
    sampling.finish()
}

/// A simulation drawn with its phases, from the report and the sampled ticks.
struct DrawRun<'a> {
    path: &'a std::path::Path,
    series: Option<Series>,
}

impl Watch<Report> for DrawRun<'_> {
    fn around(&mut self, inner: &mut dyn Controller, drive: &mut dyn FnMut(&mut dyn Controller)) {
        self.series = Some(sampled(inner, drive));
    }
    fn finish(&mut self, report: &Report) -> anyhow::Result<()> {
        mergetune_lab::plot::plot_run(report, self.series.as_ref(), self.path)
            .with_context(|| format!("plotting to {}", self.path.display()))
    }
}

/// A replay drawn from the sampled ticks, titled with the recording's name.
struct DrawReplay<'a> {
    path: &'a std::path::Path,
    file: &'a std::path::Path,
    series: Option<Series>,
}

impl Watch<()> for DrawReplay<'_> {
    fn around(&mut self, inner: &mut dyn Controller, drive: &mut dyn FnMut(&mut dyn Controller)) {
        self.series = Some(sampled(inner, drive));
    }
    fn finish(&mut self, (): &()) -> anyhow::Result<()> {
        let Some(series) = self.series.as_mut() else {
            return Ok(());
        };
        series.title = format!("replay of {}", self.file.display());
        mergetune_lab::plot::plot_series(series, self.path)?;
        Ok(())
    }
}

/// `mergetune-lab simulate --plot FILE.svg ...`.
pub fn simulate(args: SimulatePlotArgs) -> anyhow::Result<()> {
    let mut draw = DrawRun {
        path: &args.plot,
        series: None,
    };
    mergetune::cli::simulate::run_watched(&args.run, Some(&mut draw))
}

/// `mergetune-lab replay --plot FILE.svg ...`.
pub fn replay(args: ReplayPlotArgs) -> anyhow::Result<i32> {
    let file = args.run.file.clone();
    let mut draw = DrawReplay {
        path: &args.plot,
        file: &file,
        series: None,
    };
    mergetune::cli::replay::run_watched(args.run, Some(&mut draw))
}
