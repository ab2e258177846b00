//! The clap definition of the whole command line: the top-level flags and one variant per
//! subcommand, whose arguments live in the subcommand's own file. The man page and the
//! shell completions (`mergetune generate`) are generated from this one definition.

use crate::cli::common::EXIT_STATUS_HELP;
use clap::Subcommand;
use std::path::PathBuf;

/// The top-level `--help` text; the slice tuner's tunables are its tables'
/// (`logic::tuners::slice_knobs`).
fn long_about() -> String {
    format!(
        "mergetune watches every block device's merge counters and steps request \
merging down where it is wasted and back up where it pays, with hysteresis, probing and a \
reason for every decision. It restores the original values on exit and after a crash.\n\n\
What it changes, by default: only queue/nomerges and, on mq-deadline, \
queue/iosched/front_merges, and only on a device whose merge ratio stays low, where less \
merging saves CPU. By default ([policy] cost_profile = \"live\") that saving is measured on \
this host, by sampling the merge path's CPU, and a step down needs the lower bound of its \
interval to reach the floor ([pricing], 0.5% of a CPU): on a slow or lightly loaded \
device it does not, so there merging stays on and the daemon says why. The slice tuner ([slices], off by \
default, opt-in) writes {} \
when reads starve behind writes. A value an admin set is never touched.",
        mergetune_logic::tuners::slice_knobs()
    )
}

#[derive(clap::Parser, Debug)]
#[command(
    name = "mergetune",
    version,
    about = "Adaptive request-merge control for Linux block devices",
    long_about = long_about(),
    after_help = EXIT_STATUS_HELP
)]
pub struct Cli {
    #[command(flatten)]
    pub log: LogArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// The logging flags, the same on `mergetune` and `mergetune-lab`.
#[derive(clap::Args, Debug)]
pub struct LogArgs {
    /// More log output (-v debug, -vv trace). RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Less log output (warnings and errors only).
    #[arg(short, long, global = true)]
    pub quiet: bool,
    /// Log format: auto (journal under systemd, else text), text, json (one object per
    /// line, for log shippers) or journal.
    #[arg(long, global = true, value_enum, default_value_t)]
    pub log_format: mergetune_export::logging::LogFormat,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the daemon on this machine's block devices (`--once --dry-run`: look, write nothing).
    Run(mergetune_export::entry::RunOptions),
    /// Show a running daemon's devices: level, nomerges, merge ratios, last decision, next probe.
    #[command(after_help = EXIT_STATUS_HELP)]
    Status(crate::cli::status::StatusArgs),
    /// Put back every original value recorded in the state file, then remove it.
    Restore(crate::cli::restore::RestoreArgs),
    /// Validate a config file: exit 0 with a summary, or 1 naming every bad key and the reason.
    CheckConfig(crate::cli::check_config::CheckConfigArgs),
    /// Run the daemon's policy against an in-process simulated block stack in virtual time.
    Simulate(crate::cli::simulate::SimulateCmd),
    /// Run the policy over a recording (`run --record FILE`) and print the decisions it
    /// would make, with reasons: what-if tuning on production data, offline.
    Replay(crate::cli::replay::ReplayCmd),
    /// Write the man pages or the shell completions (for packaging: `make install` runs it).
    #[command(hide = true)]
    Generate(GenerateArgs),
}

/// `make install`'s DOCDIR with its default PREFIX (/usr/local), where the man page says
/// the docs are; the package passes /usr's. (Here, not in generate.rs, which reads [`Cli`].)
pub const DEFAULT_DOC_DIR: &str = "/usr/local/share/doc/mergetune";

/// `mergetune generate` (here, not in its file: the generator reads [`Cli`]).
#[derive(Debug, clap::Args)]
pub struct GenerateArgs {
    #[command(subcommand)]
    pub what: What,
}

#[derive(Debug, clap::Subcommand)]
pub enum What {
    /// Man pages (roff): mergetune.1 and mergetune-COMMAND.1.
    Man {
        /// Directory to write into (created if missing).
        dir: PathBuf,
        /// Where the docs are installed, as FILES and SEE ALSO name them: `make install`
        /// passes its DOCDIR (the default is its default PREFIX's).
        #[arg(long, default_value = DEFAULT_DOC_DIR)]
        doc_dir: PathBuf,
    },
    /// Shell completions for bash, zsh and fish.
    Completions {
        /// Directory to write into (created if missing).
        dir: PathBuf,
    },
}

/// The command line of `C` parsed, without suggesting one of `not_suggested` for an
/// unknown subcommand (`mergetune-lab`'s `calibrate` needs root and runs for about 25
/// minutes on a scratch loop device, not what a mistyped word should lead to).
pub fn parse_not_suggesting<C: clap::Parser>(not_suggested: &[&str]) -> C {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    match C::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let suggests_unwanted = e.kind() == ErrorKind::InvalidSubcommand
                && matches!(
                    e.get(ContextKind::SuggestedSubcommand),
                    Some(ContextValue::Strings(s)) if s.iter().any(|s| not_suggested.contains(&s.as_str()))
                );
            if !suggests_unwanted {
                e.exit();
            }
            let mut cmd = C::command();
            let mut plain = clap::Error::new(ErrorKind::InvalidSubcommand).with_cmd(&cmd);
            if let Some(v) = e.get(ContextKind::InvalidSubcommand) {
                plain.insert(ContextKind::InvalidSubcommand, v.clone());
            }
            plain.insert(
                ContextKind::Usage,
                ContextValue::StyledStr(cmd.render_usage()),
            );
            plain.exit()
        }
    }
}
