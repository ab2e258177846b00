//! `mergetune generate man|completions DIR` (hidden): the man pages and the shell
//! completions, generated from the clap definition ([`crate::cli::args::Cli`]) so they
//! cannot drift from `--help`. `make install` and `packaging/build-deb` run it.
//!
//! - `man DIR`: `mergetune.1` and one `mergetune-COMMAND.1` per visible subcommand, each
//!   with the exit status section.
//! - `completions DIR`: `mergetune.bash`, `_mergetune` (zsh) and `mergetune.fish`.

use crate::cli::args::Cli;
use crate::cli::common::{EXIT_OK, EXIT_STATUS_HELP};
use anyhow::Context as _;
use clap::CommandFactory;
use std::path::{Path, PathBuf};

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
    },
    /// Shell completions for bash, zsh and fish.
    Completions {
        /// Directory to write into (created if missing).
        dir: PathBuf,
    },
}

/// Writes the man pages into `dir`; returns the files written.
pub fn man_pages(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let cmd = Cli::command();
    let mut out = Vec::new();
    out.push(write_page(dir, "mergetune", cmd.clone())?);
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("mergetune-{}", sub.get_name());
        // A subcommand's page carries the exit codes too, and names itself as
        // `mergetune-COMMAND` (how man(1) finds it).
        let sub = sub
            .clone()
            .name(name.clone())
            .after_help(EXIT_STATUS_HELP)
            .version(cmd.get_version().unwrap_or_default().to_string());
        out.push(write_page(dir, &name, sub)?);
    }
    Ok(out)
}

fn write_page(dir: &Path, name: &str, cmd: clap::Command) -> anyhow::Result<PathBuf> {
    let path = dir.join(format!("{name}.1"));
    let mut buf = Vec::new();
    clap_mangen::Man::new(cmd)
        .section("1")
        .manual("System administration")
        .render(&mut buf)
        .with_context(|| format!("rendering {name}.1"))?;
    std::fs::write(&path, buf).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// Writes the bash, zsh and fish completions into `dir`; returns the files written.
pub fn completions(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    use clap_complete::Shell;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut cmd = Cli::command();
    let mut out = Vec::new();
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        let p = clap_complete::generate_to(shell, &mut cmd, "mergetune", dir)
            .with_context(|| format!("writing the {shell} completions into {}", dir.display()))?;
        out.push(p);
    }
    Ok(out)
}

pub fn run(args: GenerateArgs) -> anyhow::Result<i32> {
    let files = match &args.what {
        What::Man { dir } => man_pages(dir)?,
        What::Completions { dir } => completions(dir)?,
    };
    for f in files {
        println!("{}", f.display());
    }
    Ok(EXIT_OK)
}
