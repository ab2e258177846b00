//! `mergetune trace capture|...`: block traces for `advise`. The tracefs work is the kernel
//! layer's ([`crate::kernel::tracefs`]); this is the command line's door to it.

pub fn run(cmd: crate::kernel::tracefs::TraceCommand) -> anyhow::Result<i32> {
    crate::kernel::tracefs::run(cmd)
}
