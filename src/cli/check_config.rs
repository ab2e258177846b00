//! `mergetune check-config PATH`: load and validate a config file without running anything.
//! Exit 0 with a summary (and any warnings), 1 with every error; `--json` says the same as
//! one document for scripts.

use crate::cli::common::{EXIT_ERROR, EXIT_OK};
use crate::logic::config::{self, ConfigError};
use serde::Serialize;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct CheckConfigArgs {
    /// The TOML file to check.
    pub path: PathBuf,
    /// Print the result as one JSON document ({path, ok, summary, warnings, errors}).
    #[arg(long)]
    pub json: bool,
}

/// The `--json` document.
#[derive(Debug, Serialize)]
pub struct CheckReport {
    pub path: String,
    pub ok: bool,
    /// The effective configuration in one line (empty when not ok).
    pub summary: String,
    pub warnings: Vec<String>,
    /// Every error, one per bad key (or the one read/parse error).
    pub errors: Vec<String>,
}

/// Checks the file: the report and the exit code.
pub fn check(path: &std::path::Path) -> CheckReport {
    let path_s = path.display().to_string();
    match config::load_file(path) {
        Ok(cfg) => CheckReport {
            path: path_s,
            ok: true,
            summary: cfg.summary(),
            warnings: cfg.warnings(),
            errors: Vec::new(),
        },
        Err(e) => CheckReport {
            path: path_s,
            ok: false,
            summary: String::new(),
            warnings: Vec::new(),
            errors: match e {
                ConfigError::Many { errors, .. } => errors.iter().map(|e| e.to_string()).collect(),
                e => vec![e.to_string()],
            },
        },
    }
}

pub fn run(args: CheckConfigArgs) -> anyhow::Result<i32> {
    let r = check(&args.path);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else if r.ok {
        println!("{}: ok: {}", r.path, r.summary);
        for w in &r.warnings {
            println!("{}: warning: {w}", r.path);
        }
    } else {
        for e in &r.errors {
            eprintln!("mergetune: {e}");
        }
    }
    Ok(if r.ok { EXIT_OK } else { EXIT_ERROR })
}
