//! `mergetune check-config PATH`: load and validate a config file without running anything.
//! Exit 0 with a summary (and any warnings), 1 with every error; `--json` says the same as
//! one document for scripts. Every bad key is named with file:line:column. The summary
//! names what prices a step down (the profile, its origin, whether it matches the running
//! kernel by the daemon's own rule), and a profile of another kernel series is a warning:
//! the daemon will leave every device unknown. The running release is read here, at the
//! edge, and handed to [`check`].

use crate::cli::common::{EXIT_ERROR, EXIT_OK};
use mergetune_logic::config::{self, ConfigError};
use mergetune_logic::pricing::profile::profile_match;
use mergetune_logic::pricing::source::PricingSource;
use mergetune_logic::printable::printable_lines;
use serde::Serialize;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct CheckConfigArgs {
    /// The TOML file to check.
    pub path: PathBuf,
    /// Print the result as one JSON document ({path, ok, summary, pricing, warnings, errors}).
    #[arg(long)]
    pub json: bool,
}

/// The `--json` document.
#[derive(Debug, Serialize)]
pub struct CheckReport {
    pub path: String,
    pub ok: bool,
    /// The effective configuration in one line, ending with `pricing` (empty when not ok).
    pub summary: String,
    /// What prices a step down: the profile's name, its origin and whether it matches the
    /// running kernel (empty when not ok).
    pub pricing: String,
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
            // load_file has resolved the profile once already: it loads. The daemon's own
            // rule decides whether it matches (the same kernel series; stated figures
            // anywhere), so check-config never says otherwise than the daemon will do.
            let source = mergetune_daemon::pricing::source(&cfg);
            if let (Some(running), PricingSource::Profile { profile, .. }) =
                (running_release, &source)
                && let Err(e) = profile_match(profile, Some(running.trim()), None)
            {
                warnings.push(format!(
                    "key `policy.cost_profile`: profile {} {e}: it will not match here, every device stays unknown and merging stays on (run `mergetune-lab calibrate` on this kernel for its own, or use \"live\")",
                    profile.name,
                ));
            }
            let pricing = source.summary(running_release.map(str::trim), cfg.pricing.floor());
            CheckReport {
                path: path_s,
                ok: true,
                summary: format!("{}; {}; {pricing}", cfg.summary(), cfg.tuners()),
                pricing,
                warnings,
                errors: Vec::new(),
            }
        }
        Err(e) => CheckReport {
            path: path_s,
            ok: false,
            summary: String::new(),
            pricing: String::new(),
            warnings: Vec::new(),
            errors: match e {
                ConfigError::Many { errors, .. } => errors.iter().map(|e| e.to_string()).collect(),
                e => vec![e.to_string()],
            },
        },
    }
}

pub fn run(args: CheckConfigArgs) -> anyhow::Result<i32> {
    let running = mergetune_kernel::tracefs::kernel_release(std::path::Path::new(
        mergetune_kernel::roots::PROCFS,
    ));
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
