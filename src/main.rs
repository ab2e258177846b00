//! The `mergetune` binary: everything is in [`mergetune::cli`], one module per subcommand.

fn main() {
    std::process::exit(mergetune::cli::main());
}
