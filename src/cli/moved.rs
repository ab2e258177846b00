//! The lab's commands live in their own binary, `mergetune-lab`, so that the daemon's links
//! no plotting code. Called on `mergetune` (`advise`, `calibrate`, `trace`, `simulate
//! --compare`, a `--plot`), they are refused as a usage error (exit 2) with the
//! `mergetune-lab` command line that does what was asked: the same arguments, except that
//! `simulate --compare` is `compare` there (without the flags compare always ignored).
//!
//! The lab's commands are found in the command line as given, not as clap parsed it, so
//! that the answer repeats the operator's own words.

use crate::cli::args::Command;
use crate::cli::common::EXIT_USAGE;

/// The subcommands that moved whole, under the same name.
const LAB_COMMANDS: [&str; 3] = ["advise", "calibrate", "trace"];

/// `simulate` flags that `--compare` always ignored, with whether each takes a value: the
/// compare command does not take them.
const IGNORED_BY_COMPARE: [(&str, bool); 5] = [
    ("--compare", false),
    ("--bench", false),
    ("--policy", true),
    ("--metrics-listen", true),
    ("--speed", true),
];

/// The command line after the program's name, as given.
pub fn given() -> Vec<String> {
    std::env::args_os()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect()
}

/// Where the subcommand is: the first argument that is neither a global flag nor
/// `--log-format`'s value.
fn subcommand_at(args: &[String]) -> Option<usize> {
    let mut i = 0;
    while let Some(a) = args.get(i) {
        if a == "--log-format" {
            i += 2;
        } else if a.starts_with('-') {
            i += 1;
        } else {
            return Some(i);
        }
    }
    None
}

/// A lab command called on `mergetune`: what was called and the `mergetune-lab` command
/// line that does it.
#[derive(Debug, PartialEq, Eq)]
pub struct Moved {
    pub what: &'static str,
    pub line: String,
}

/// Before parsing: a subcommand that moved whole.
pub fn lab_command_called(args: &[String]) -> Option<Moved> {
    let i = subcommand_at(args)?;
    let what = LAB_COMMANDS.into_iter().find(|c| *c == args[i])?;
    Some(Moved {
        what,
        line: lab_line(args.to_vec()),
    })
}

/// After parsing: a flag of the lab's given to `simulate` or `replay`.
pub fn lab_flag_given(cmd: &Command, args: &[String]) -> Option<Moved> {
    let i = subcommand_at(args)?;
    let (what, line) = match cmd {
        Command::Simulate(s) if s.compare => {
            let mut line = args.to_vec();
            line[i] = "compare".into();
            ("simulate --compare", without_ignored(line))
        }
        Command::Simulate(s) if s.plot.is_some() => ("simulate --plot", args.to_vec()),
        Command::Replay(r) if r.plot.is_some() => ("replay --plot", args.to_vec()),
        _ => return None,
    };
    Some(Moved {
        what,
        line: lab_line(line),
    })
}

/// `args` without the flags (and their values) compare ignores.
fn without_ignored(args: Vec<String>) -> Vec<String> {
    let mut out = Vec::new();
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        let flag = a.split('=').next().unwrap_or_default();
        match IGNORED_BY_COMPARE.iter().find(|(f, _)| *f == flag) {
            Some((_, true)) if !a.contains('=') => {
                it.next();
            }
            Some(_) => {}
            None => out.push(a),
        }
    }
    out
}

/// `mergetune-lab ARGS`, each argument quoted for a shell where it needs it.
fn lab_line(args: Vec<String>) -> String {
    let mut line = String::from("mergetune-lab");
    for a in args {
        line.push(' ');
        let plain = !a.is_empty()
            && a.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
        if plain {
            line.push_str(&a);
        } else {
            line.push_str(&format!("'{}'", a.replace('\'', r"'\''")));
        }
    }
    line
}

/// Says where the command went; the exit code of a usage error.
pub fn refuse(moved: &Moved) -> i32 {
    eprintln!(
        "mergetune: error: `{}` is the lab's, in its own binary: run `{}`",
        moved.what,
        mergetune_logic::printable::printable(&moved.line)
    );
    EXIT_USAGE
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Vec<String> {
        s.split(' ').map(String::from).collect()
    }

    #[test]
    fn a_moved_subcommand_keeps_its_arguments_and_global_flags() {
        assert_eq!(
            lab_command_called(&v("-v --log-format json advise t.txt --json")),
            Some(Moved {
                what: "advise",
                line: "mergetune-lab -v --log-format json advise t.txt --json".into()
            })
        );
        assert_eq!(lab_command_called(&v("status --json")), None);
        assert_eq!(
            lab_line(vec!["it's".into(), "a b".into()]),
            r"mergetune-lab 'it'\''s' 'a b'"
        );
    }

    #[test]
    fn compare_drops_what_it_always_ignored() {
        assert_eq!(
            without_ignored(v("compare --compare --policy off a.toml --speed=2 --json")),
            v("compare a.toml --json")
        );
    }
}
