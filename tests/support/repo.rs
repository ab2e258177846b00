//! Files of the repository that tests hold the code to: the docs, the shipped configs.
//! Included with `#[path = "../support/repo.rs"] mod repo;`.

#![allow(dead_code)]

use std::path::Path;

/// The text of `rel`, a path from the repository's root (`docs/fleet.md`).
pub fn text(rel: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}
