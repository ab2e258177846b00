//! Golden outputs: what the program says, pinned byte for byte, so that a refactor that
//! must not change behaviour can show it did not. `MERGETUNE_BLESS=1 cargo test --release
//! --test golden` rewrites the expected files (only when behaviour is meant to change, and
//! the diff is then read in review).
//!
//! Pinned: `simulate` (text and JSON, with its virtual-time log) over every shipped
//! scenario, `mergetune-lab compare --json` (was `simulate --compare --json`) over the shipped comparison suite, `replay` of the
//! real recordings in tests/fixtures/recordings, every `Reason` rendered, `check-config`'s
//! errors, and `restore` of the state files of every format.

#[path = "../support/lab.rs"]
mod lab;

mod config_errors;
mod help;
mod reasons;
mod replay;
mod simulate;
mod state;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Compares `actual` with `tests/golden/expected/<name>`; with MERGETUNE_BLESS=1 writes it.
pub fn check_golden(name: &str, actual: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden/expected")
        .join(name);
    if std::env::var_os("MERGETUNE_BLESS").is_some_and(|v| v == "1") {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (bless with MERGETUNE_BLESS=1)", path.display()));
    if expected != actual {
        let first = expected
            .lines()
            .zip(actual.lines())
            .position(|(a, b)| a != b);
        panic!(
            "{name} differs from {} (first differing line: {first:?})\n--- expected\n{expected}\n--- actual\n{actual}",
            path.display()
        );
    }
}

/// The `mergetune` binary under test.
pub fn mergetune() -> Command {
    Command::new(env!("CARGO_BIN_EXE_mergetune"))
}

/// A file of the source tree.
pub fn repo(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// The `.toml` files of a directory, sorted by name.
pub fn tomls_in(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    v.sort();
    v
}

/// Exit code, stdout and the deterministic part of stderr: the lines stamped in virtual or
/// replayed time (`[sim ...]`, `[replay ...]`) and every line that carries no wall-clock
/// timestamp. Lines that start with a wall-clock timestamp or say a wall time are dropped.
pub fn transcript(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let kept: Vec<&str> = stderr
        .lines()
        .filter(|l| !starts_with_wall_clock(l) && !l.contains("wall time"))
        .collect();
    format!(
        "exit: {:?}\n--- stdout\n{}--- stderr\n{}\n",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        kept.join("\n")
    )
}

/// `2026-12-06T04:44:19.731543Z ...`: a line of the text log, stamped with the wall clock.
pub fn starts_with_wall_clock(line: &str) -> bool {
    let b = line.as_bytes();
    b.len() > 20
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b'T'
        && b[..4].iter().all(u8::is_ascii_digit)
}
