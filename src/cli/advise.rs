//! `mergetune advise`: advice from a captured block trace. The arguments and the work are
//! the lab's ([`mergetune_lab::advise`]); this is the command line's door to them.

pub fn run(args: mergetune_lab::advise::AdviseArgs) -> anyhow::Result<i32> {
    mergetune_lab::advise::run(args)
}
