//! Empty: cargo reads `[build-dependencies]` only of a package with a build script, and this
//! package exists for what its build-dependencies turn on (Cargo.toml).
fn main() {}
