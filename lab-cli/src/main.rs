//! `mergetune-lab`: the tools that judge the policy rather than run it (docs/design.md,
//! "Layout"), in a binary of their own so that the daemon's, `mergetune`, links no plotting
//! code. The work is the lab crate's ([`mergetune_lab`]); simulate and replay with
//! `--plot` are `mergetune`'s own runs ([`mergetune::cli`]) with the lab's sampler around
//! the controller. Each command prints what `mergetune` printed for it before the move.
#![forbid(unsafe_code)]

mod args;
mod compare;
mod plot;

use args::Command;
use mergetune::cli::common::EXIT_ERROR;

fn main() {
    std::process::exit(run());
}

/// Parses the command line, sets up logging, runs the subcommand: the process exit code.
fn run() -> i32 {
    let cli = args::parse();
    let target =
        mergetune_export::logging::init(cli.log.verbose, cli.log.quiet, cli.log.log_format);
    match dispatch(cli.command) {
        Ok(code) => code,
        Err(e) => {
            mergetune::cli::report_fatal("mergetune-lab", &e, target, cli.log.log_format);
            EXIT_ERROR
        }
    }
}

fn dispatch(cmd: Command) -> anyhow::Result<i32> {
    use mergetune::cli::common::EXIT_OK;
    match cmd {
        Command::Advise(a) => mergetune_lab::advise::run(a),
        Command::Calibrate(a) => mergetune_lab::calibrate::run(*a),
        Command::Trace { command } => mergetune_lab::capture::run(command),
        Command::Compare(a) => compare::run(&a).map(|()| EXIT_OK),
        Command::Simulate(a) => plot::simulate(a).map(|()| EXIT_OK),
        Command::Replay(a) => plot::replay(a),
        Command::Generate(a) => {
            use clap::CommandFactory;
            mergetune::cli::generate::run(
                args::Cli::command(),
                mergetune::cli::generate::Binary::Lab,
                a,
            )
        }
    }
}
