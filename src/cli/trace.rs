//! `mergetune trace capture|...`: block traces for `advise`. The capture is the lab's
//! ([`crate::lab::capture`]); this is the command line's door to it.

pub fn run(cmd: crate::lab::capture::TraceCommand) -> anyhow::Result<i32> {
    crate::lab::capture::run(cmd)
}
