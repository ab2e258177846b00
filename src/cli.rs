//! The command line: one module per subcommand, the clap definition in [`args`], the exit
//! codes and shared lookups in [`common`]. The top of the graph: it may use every layer,
//! and nothing uses it. `src/main.rs` only calls [`main`].
//!
//! A fatal error is said once: on stderr as `mergetune: error: ...`, or, when the log goes
//! to the journal or is JSON lines, as one error event of that log (stderr is the journal
//! then, or a stream a log shipper parses, where a second, plain line would be noise).

pub mod args;
pub mod check_config;
pub mod common;
pub mod generate;
pub mod moved;
pub mod replay;
pub mod restore;
pub mod run;
pub mod simulate;
pub mod status;

use crate::cli::args::Command;
use crate::cli::common::EXIT_ERROR;
use mergetune_export::logging::{LogFormat, LogTarget};

/// Parses the command line, sets up logging, runs the subcommand: the process exit code.
/// A lab command (`advise`, `calibrate`, `trace`, `simulate --compare`, `--plot`) is
/// refused with the `mergetune-lab` command that runs it ([`moved`]).
pub fn main() -> i32 {
    let given = moved::given();
    if let Some(m) = moved::lab_command_called(&given) {
        return moved::refuse(&m);
    }
    let cli: crate::cli::args::Cli = crate::cli::args::parse_not_suggesting(&[]);
    if let Some(m) = moved::lab_flag_given(&cli.command, &given) {
        return moved::refuse(&m);
    }
    if !puts_settings_back(&cli.command) {
        mergetune_kernel::sys::sigpipe::end_quietly_on_a_closed_pipe();
    }
    let target =
        mergetune_export::logging::init(cli.log.verbose, cli.log.quiet, cli.log.log_format);
    match dispatch(cli.command) {
        Ok(code) => code,
        Err(e) => {
            report_fatal("mergetune", &e, target, cli.log.log_format);
            EXIT_ERROR
        }
    }
}

/// The daemon (not `run --once`, which writes nothing) and `restore` put settings back
/// before they end: a reader of their output that goes away must not end them.
fn puts_settings_back(cmd: &Command) -> bool {
    match cmd {
        Command::Run(a) => !a.once,
        Command::Restore(_) => true,
        _ => false,
    }
}

fn dispatch(cmd: Command) -> anyhow::Result<i32> {
    match cmd {
        Command::Run(a) => run::run(a),
        Command::Status(a) => status::run(a),
        Command::Restore(a) => restore::run(a),
        Command::CheckConfig(a) => check_config::run(a),
        Command::Simulate(a) => simulate::run_watched(&a.run, None).map(|()| common::EXIT_OK),
        Command::Replay(a) => replay::run_watched(a.run, None),
        Command::Generate(a) => {
            use clap::CommandFactory;
            generate::run(
                crate::cli::args::Cli::command(),
                generate::Binary::Daemon,
                a,
            )
        }
    }
}

/// Says a fatal error of `program` once, where the operator reads the log.
pub fn report_fatal(program: &str, e: &anyhow::Error, target: LogTarget, format: LogFormat) {
    if target == LogTarget::Journal || format == LogFormat::Json {
        tracing::error!("{e:#}");
    } else {
        eprintln!(
            "{program}: error: {}",
            mergetune_logic::printable::printable_lines(&format!("{e:#}"))
        );
    }
}
