//! `mergetune calibrate`: measure merge costs on a scratch loop device. The arguments and
//! the work are the lab's ([`mergetune_lab::calibrate`]); this is the command line's door.

pub fn run(args: mergetune_lab::calibrate::CalibrateArgs) -> anyhow::Result<i32> {
    mergetune_lab::calibrate::run(args)
}
