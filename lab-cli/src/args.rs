//! The clap definition of `mergetune-lab`: the same top-level flags as `mergetune`, one
//! variant per lab command. A command keeps the arguments it had under `mergetune`, so
//! `mergetune` can name the exact command that replaces an old one (`simulate --compare`
//! became `compare`); the man pages and completions are generated from this definition.

use mergetune::cli::common::EXIT_STATUS_HELP;

#[derive(clap::Parser, Debug)]
#[command(
    name = "mergetune-lab",
    version,
    about = "The mergetune lab: advice from block traces, cost calibration, policy comparisons and plots",
    long_about = "mergetune-lab holds the tools that judge mergetune's policy rather than run \
it: advice from a captured block trace, the measurement of what merging costs on this kernel \
(a cost profile for the daemon), the comparison of the policy with its baselines on the \
simulator, and the SVG plots of a simulation or a replay. The daemon itself is mergetune.",
    after_help = EXIT_STATUS_HELP
)]
pub struct Cli {
    #[command(flatten)]
    pub log: mergetune::cli::args::LogArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// Read a captured block trace and suggest the merge level, scheduler and slice
    /// settings, each with its evidence (`--what-if`: their modelled effect).
    Advise(mergetune_lab::advise::AdviseArgs),
    /// Measure what merging costs in CPU per scheduler and level, and what a nomerges
    /// write costs in latency, on a scratch loop device; write a cost profile.
    Calibrate(Box<mergetune_lab::calibrate::CalibrateArgs>),
    /// Capture block traces for `advise`.
    Trace {
        #[command(subcommand)]
        command: mergetune_lab::capture::TraceCommand,
    },
    /// Run scenarios under the kernel default, static nomerges=2, a naive toggle, the
    /// adaptive policy and an oracle, and print the figures that matter side by side.
    Compare(crate::compare::CompareArgs),
    /// `mergetune simulate` with a plot: the same run and report, drawn as an SVG.
    Simulate(crate::plot::SimulatePlotArgs),
    /// `mergetune replay` with a plot: the same decisions and table, drawn as an SVG.
    Replay(crate::plot::ReplayPlotArgs),
    /// Write the man pages or the shell completions (for packaging: `make install` runs it).
    #[command(hide = true)]
    Generate(mergetune::cli::args::GenerateArgs),
}

/// Subcommands never offered as "a similar subcommand exists" for a typo: `calibrate` needs
/// root and runs for about 25 minutes on a scratch loop device, not what a mistyped word
/// should lead to.
const NOT_SUGGESTED: &[&str] = &["calibrate"];

/// [`Cli`] parsed, without suggesting a `NOT_SUGGESTED` subcommand for an unknown one.
pub fn parse() -> Cli {
    mergetune::cli::args::parse_not_suggesting(NOT_SUGGESTED)
}
