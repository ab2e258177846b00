//! The `mergetune` binary: everything is in [`mergetune::cli`], one module per subcommand.
#![forbid(unsafe_code)]

fn main() {
    std::process::exit(mergetune::cli::main());
}
