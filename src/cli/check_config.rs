//! `mergetune check-config PATH`: load and validate a config file without running anything.
//! Exit 0 with a summary (and any warnings), 1 with every error; `--json` says the same as
//! one document for scripts. Every bad key is named with file:line:column, and a profile
//! measured on another kernel than the running one is a warning: its figures may not hold
//! here. The running release is read here, at the edge, and handed to [`check`].

use crate::cli::common::{EXIT_ERROR, EXIT_OK};
use crate::logic::config::{self, ConfigError};
use crate::logic::printable::printable_lines;
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

/// Checks the file against the running kernel's release (None: unknown): the report.
pub fn check(path: &std::path::Path, running_release: Option<&str>) -> CheckReport {
    let path_s = path.display().to_string();
    match config::load_file(path) {
        Ok(cfg) => {
            let mut warnings = cfg.warnings();
            // load_file has resolved the profile once already: it loads.
            if let (Some(running), Ok(p)) = (
                running_release,
                crate::logic::cost_profile::resolve(&cfg.policy.cost_profile),
            ) && cfg.policy.cost_profile != crate::logic::cost_profile::LIVE
                && p.kernel_release.trim() != running.trim()
            {
                warnings.push(format!(
                    "key `policy.cost_profile`: profile {} was measured on kernel {}, this machine runs {}: its figures may not hold here (run `mergetune calibrate` on this kernel for its own)",
                    p.name,
                    p.kernel_release.trim(),
                    running.trim()
                ));
            }
            CheckReport {
                path: path_s,
                ok: true,
                summary: cfg.summary(),
                warnings,
                errors: Vec::new(),
            }
        }
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
    let running = crate::kernel::tracefs::kernel_release(std::path::Path::new("/proc"));
    let r = check(&args.path, running.as_deref());
    if args.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else if r.ok {
        println!(
            "{}",
            printable_lines(&format!("{}: ok: {}", r.path, r.summary))
        );
        for w in &r.warnings {
            println!("{}", printable_lines(&format!("{}: warning: {w}", r.path)));
        }
    } else {
        for e in &r.errors {
            eprintln!("mergetune: {}", printable_lines(e));
        }
    }
    Ok(if r.ok { EXIT_OK } else { EXIT_ERROR })
}
