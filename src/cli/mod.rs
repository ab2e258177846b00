//! The command line: one module per subcommand. The top of the graph: it may use every
//! layer, and nothing uses it.

pub mod simulate;
