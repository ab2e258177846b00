//! `mergetune trace capture|...`: block traces for `advise`. The capture is the lab's
//! ([`mergetune_lab::capture`]); this is the command line's door to it.

pub fn run(cmd: mergetune_lab::capture::TraceCommand) -> anyhow::Result<i32> {
    mergetune_lab::capture::run(cmd)
}
