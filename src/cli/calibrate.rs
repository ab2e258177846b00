//! `mergetune calibrate`: measure merge costs on a scratch loop device. The arguments and
//! the work are the lab's ([`crate::lab::calibrate`]); this is the command line's door.

pub fn run(args: crate::lab::calibrate::CalibrateArgs) -> anyhow::Result<i32> {
    crate::lab::calibrate::run(args)
}
