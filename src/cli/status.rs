//! `mergetune status`: a running daemon's device table, fetched from its `/status`
//! endpoint. The address comes from `--addr`, else from the config's `[metrics] listen`
//! (`--config`, or /etc/mergetune/mergetune.toml when it exists), else the default.
//! Exit 3 when nothing answers there, like `systemctl status` of a stopped unit.

use crate::cli::common::{EXIT_NOT_RUNNING, EXIT_OK, load_config};
use anyhow::bail;
use mergetune_export::status::StatusError;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// The daemon's metrics endpoint, IP:PORT [default: the config's metrics.listen,
    /// 127.0.0.1:9725].
    #[arg(long)]
    pub addr: Option<String>,
    /// Config file to take metrics.listen from [default: /etc/mergetune/mergetune.toml if
    /// it exists].
    #[arg(short, long)]
    pub config: Option<PathBuf>,
    /// Print the /status JSON document.
    #[arg(long)]
    pub json: bool,
}

/// Where to ask: `--addr`, else the config's listen address.
pub fn address(args: &StatusArgs) -> anyhow::Result<String> {
    if let Some(a) = &args.addr {
        return Ok(a.clone());
    }
    let (cfg, path) = load_config(args.config.as_deref())?;
    if cfg.metrics.listen.trim().is_empty() {
        bail!(
            "{}: [metrics] listen = \"\": the endpoint `mergetune status` reads is off (set it, or pass --addr)",
            path.map_or_else(|| "built-in defaults".into(), |p| p.display().to_string())
        );
    }
    Ok(cfg.metrics.listen.trim().to_string())
}

pub fn run(args: StatusArgs) -> anyhow::Result<i32> {
    let addr = address(&args)?;
    let timeout = Duration::from_secs(5);
    let snapshot = match mergetune_export::status::fetch(&addr, timeout) {
        Ok(s) => s,
        Err(e @ StatusError::NotRunning { .. }) => {
            eprintln!(
                "mergetune: {}",
                mergetune_logic::printable::printable_lines(&e.to_string())
            );
            if args.json {
                // A script reading stdout gets a document either way (exit status 3 too).
                println!(
                    "{}",
                    serde_json::json!({"running": false, "addr": addr, "error": e.to_string()})
                );
            }
            return Ok(EXIT_NOT_RUNNING);
        }
        Err(e) => return Err(e.into()),
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&snapshot)?);
    } else {
        print!("{}", mergetune_export::table::format_status(&snapshot));
    }
    Ok(EXIT_OK)
}
