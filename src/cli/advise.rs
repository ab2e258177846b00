//! `mergetune advise`: advice from a captured block trace. The arguments and the work are
//! the lab's ([`crate::lab::advise`]); this is the command line's door to them.

pub fn run(args: crate::lab::advise::AdviseArgs) -> anyhow::Result<i32> {
    crate::lab::advise::run(args)
}
