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
