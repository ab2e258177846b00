//! Log lines written through `tracing` while a closure runs, kept in memory for a test
//! to read.
#![allow(dead_code)]

use std::sync::{Arc, Mutex};

#[derive(Clone, Default)]
pub struct Logs(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Logs {
    type Writer = Logs;
    fn make_writer(&'a self) -> Logs {
        self.clone()
    }
}

impl Logs {
    /// `f`'s result, with every line it logs kept here (plain text, no colours).
    pub fn capture<T>(&self, f: impl FnOnce() -> T) -> T {
        let sub = tracing_subscriber::fmt()
            .with_writer(self.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::with_default(sub, f)
    }
    /// All that was logged so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
    /// Forgets what was logged so far.
    pub fn clear(&self) {
        self.0.lock().unwrap().clear();
    }
    pub fn lines(&self) -> Vec<String> {
        self.text().lines().map(str::to_string).collect()
    }
    pub fn warnings_about(&self, what: &str) -> Vec<String> {
        self.lines()
            .into_iter()
            .filter(|l| l.contains("WARN") && l.contains(what))
            .collect()
    }
}

/// The lines of the text log `log` that change nomerges, asserting that there is one at
/// least and that each is timed by the world that decided it (opens with `mark`, `"[sim "`
/// or `"[replay "`), not by the wall clock.
pub fn nomerges_lines_marked<'a>(log: &'a str, mark: &str) -> Vec<&'a str> {
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("queue/nomerges"))
        .collect();
    assert!(!lines.is_empty(), "nothing was decided: {log}");
    for l in &lines {
        assert!(l.starts_with(mark), "not marked {mark:?}: {l}");
        assert!(!l.starts_with("20"), "a wall-clock timestamp: {l}");
    }
    lines
}
