//! `mergetune generate man|completions DIR` and `mergetune-lab generate ...` (hidden): the
//! man pages and the shell completions of a binary, generated from its clap definition
//! ([`crate::cli::args::Cli`], the lab's own) so they cannot drift from `--help`. `make
//! install` and `packaging/build-deb` run it for both binaries.
//!
//! - `man DIR`: `BINARY.N` and one `BINARY-COMMAND.N` per visible subcommand, each
//!   with the EXIT STATUS, FILES and SEE ALSO sections clap does not know. N is the
//!   binary's [`ManSection`]: 8 for the daemon (`mergetune`, system administration: it
//!   runs as root under systemd), 1 for the lab's tools (`mergetune-lab`: simulate, advise,
//!   compare run as any user).
//!   FILES and SEE ALSO name the docs where `make install` put them (`--doc-dir`, its DOCDIR).
//! - `completions DIR`: `BINARY.bash`, `_BINARY` (zsh) and `BINARY.fish`, of the
//!   visible command line only: clap_complete offers hidden subcommands and flags, so they
//!   are taken out of the definition first.

use crate::cli::args::{GenerateArgs, What};
use crate::cli::common::{EXIT_OK, EXIT_STATUS_HELP};
use anyhow::Context as _;
use std::path::{Path, PathBuf};

/// The manual section of a binary's pages (man-pages(7)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ManSection {
    /// 1: user commands (the lab's tools).
    User,
    /// 8: system administration commands and daemons (the daemon).
    Admin,
}

impl ManSection {
    /// The section's number, as the page's title and file name carry it.
    pub fn number(self) -> &'static str {
        match self {
            ManSection::User => "1",
            ManSection::Admin => "8",
        }
    }

    /// The section of the pages of `binary`.
    pub fn of_binary(binary: Binary) -> ManSection {
        match binary {
            Binary::Daemon => ManSection::Admin,
            Binary::Lab => ManSection::User,
        }
    }
}

/// The two binaries, whose pages name each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binary {
    /// `mergetune`.
    Daemon,
    /// `mergetune-lab`.
    Lab,
}

impl Binary {
    fn name(self) -> &'static str {
        match self {
            Binary::Daemon => "mergetune",
            Binary::Lab => "mergetune-lab",
        }
    }

    /// `name(N)`, as SEE ALSO writes it.
    fn page(self) -> (String, &'static str) {
        (
            self.name().to_string(),
            ManSection::of_binary(self).number(),
        )
    }
}

/// Writes the man pages of `binary`, which `cmd` defines, into `dir` in its section,
/// naming the docs under `doc_dir`; returns the files written.
pub fn man_pages(
    mut cmd: clap::Command,
    binary: Binary,
    dir: &Path,
    doc_dir: &Path,
) -> anyhow::Result<Vec<PathBuf>> {
    let section = ManSection::of_binary(binary);
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    cmd.build();
    let version = cmd.get_version().unwrap_or_default().to_string();
    let name = cmd.get_name().to_string();
    let mut out = vec![write_page(dir, doc_dir, section, &name, cmd.clone())?];
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        // `BINARY-COMMAND` is how man(1) finds a subcommand's page.
        let name = format!("{name}-{}", sub.get_name());
        let sub = sub.clone().name(name.clone()).version(version.clone());
        out.push(write_page(dir, doc_dir, section, &name, sub)?);
    }
    Ok(out)
}

/// The sections clap knows, then EXIT STATUS, FILES and SEE ALSO, which it does not.
fn write_page(
    dir: &Path,
    doc_dir: &Path,
    section: ManSection,
    name: &str,
    cmd: clap::Command,
) -> anyhow::Result<PathBuf> {
    let n = section.number();
    let path = dir.join(format!("{name}.{n}"));
    let manual = match section {
        ManSection::Admin => "System Administration",
        ManSection::User => "User Commands",
    };
    let man = clap_mangen::Man::new(cmd.clone()).section(n).manual(manual);
    let mut buf = Vec::new();
    let render = |buf: &mut Vec<u8>| -> std::io::Result<()> {
        man.render_title(buf)?;
        man.render_name_section(buf)?;
        man.render_synopsis_section(buf)?;
        man.render_description_section(buf)?;
        if cmd.get_arguments().any(|a| !a.is_hide_set()) {
            man.render_options_section(buf)?;
        }
        if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
            man.render_subcommands_section(buf)?;
        }
        buf.extend_from_slice(extra_sections(name, doc_dir).as_bytes());
        man.render_version_section(buf)
    };
    render(&mut buf).with_context(|| format!("rendering {name}.{n}"))?;
    std::fs::write(&path, buf).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// EXIT STATUS from [`EXIT_STATUS_HELP`] (the same lines as `--help`), FILES, SEE ALSO.
fn extra_sections(name: &str, doc_dir: &Path) -> String {
    let docs = roff_escape(&doc_dir.display().to_string());
    let mut s = String::from(".SH \"EXIT STATUS\"\n");
    for line in EXIT_STATUS_HELP.lines().skip(1) {
        let (code, what) = line
            .trim()
            .split_once(char::is_whitespace)
            .unwrap_or(("", line));
        s.push_str(&format!(".TP\n.B {code}\n{}\n", roff_escape(what.trim())));
    }
    s.push_str(&format!(
        ".SH FILES\n.TP\n.I /etc/mergetune/mergetune.toml\n\
         The configuration; every key, with its default, unit, bounds and what a reload does, is\n\
         documented in\n\
         .I {docs}/configuration.md\n\
         and in the example config installed with the docs\n\
         .RI ( {docs}/mergetune.toml.example ).\n\
         .TP\n.I /run/mergetune/state.json\n\
         The original values of every tunable mergetune changed, kept until they are restored.\n"
    ));
    s.push_str(".SH \"SEE ALSO\"\n");
    let mut see: Vec<(String, &str)> = vec![
        ("systemctl".to_string(), "1"),
        ("journalctl".to_string(), "1"),
    ];
    let (daemon, lab) = (Binary::Daemon, Binary::Lab);
    if name != daemon.name() {
        see.insert(0, daemon.page());
    }
    // The two binaries name each other; a lab command's page names its binary's.
    if name == daemon.name() || name.starts_with(&format!("{}-", lab.name())) {
        see.insert(usize::from(name != daemon.name()), lab.page());
    }
    s.push_str(
        &see.iter()
            .map(|(n, sec)| format!(".BR {} ({sec})", roff_escape(n)))
            .collect::<Vec<_>>()
            .join(",\n"),
    );
    s.push_str(&format!(",\n.I {docs}/operator.md\n"));
    s
}

/// Text safe in a roff line: backslashes and hyphens escaped, no leading dot or quote.
fn roff_escape(t: &str) -> String {
    let e = t.replace('\\', "\\e").replace('-', "\\-");
    if e.starts_with(['.', '\'']) {
        format!("\\&{e}")
    } else {
        e
    }
}

/// Writes the bash, zsh and fish completions of the binary `cmd` defines into `dir`;
/// returns the files written.
pub fn completions(cmd: &clap::Command, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    use clap_complete::Shell;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut cmd = visible(cmd);
    let binary = cmd.get_name().to_string();
    let mut out = Vec::new();
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        let p = clap_complete::generate_to(shell, &mut cmd, &binary, dir)
            .with_context(|| format!("writing the {shell} completions into {}", dir.display()))?;
        out.push(p);
    }
    Ok(out)
}

/// `cmd` without its hidden subcommands and arguments (the test roots, `generate`), for the
/// completions: what an operator is offered is what `--help` shows.
fn visible(cmd: &clap::Command) -> clap::Command {
    let hidden_args: Vec<String> = cmd
        .get_arguments()
        .filter(|a| a.is_hide_set())
        .map(|a| a.get_id().to_string())
        .collect();
    let subs: Vec<clap::Command> = cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .map(visible)
        .collect();
    // clap has no way to remove from a Command: rebuild it from its visible parts.
    let mut fresh = clap::Command::new(cmd.get_name().to_string())
        .subcommand_required(cmd.is_subcommand_required_set())
        .args(
            cmd.get_arguments()
                .filter(|a| !hidden_args.contains(&a.get_id().to_string()))
                .cloned(),
        )
        .subcommands(subs);
    if let Some(about) = cmd.get_about() {
        fresh = fresh.about(about.clone());
    }
    if let Some(v) = cmd.get_version() {
        fresh = fresh.version(v.to_string());
    }
    fresh
}

/// `generate` of the binary `cmd` defines.
pub fn run(cmd: clap::Command, binary: Binary, args: GenerateArgs) -> anyhow::Result<i32> {
    let files = match &args.what {
        What::Man { dir, doc_dir } => man_pages(cmd, binary, dir, doc_dir)?,
        What::Completions { dir } => completions(&cmd, dir)?,
    };
    for f in files {
        println!("{}", f.display());
    }
    Ok(EXIT_OK)
}
