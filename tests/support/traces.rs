//! Block traces written by tests, in tracefs's text format. Included with
//! `#[path = "../support/traces.rs"] mod traces;`.

#![allow(dead_code)]

/// The text of `n` sequential 4 KiB bios, one a millisecond from 10 s on, each starting at
/// the sector after the last (from sector 1000): `lines(t, sector)` writes the events of one.
pub fn sequential(n: u64, lines: impl Fn(f64, u64) -> String) -> String {
    (0..n)
        .map(|i| lines(10.0 + i as f64 * 0.001, 1000 + i * 8))
        .collect()
}
