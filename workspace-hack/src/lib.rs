//! No code. This crate's dependencies turn on, in every build, the features that the
//! tests' dev-dependencies would otherwise turn on only in `cargo test`; a feature set
//! that differs makes cargo compile a crate, and every crate above it, twice
//! (docs/testing.md, "One set of features").
