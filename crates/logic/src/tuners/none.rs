//! `none`: no elevator, so no scheduler merge lookups to skip and no slices. nomerges=1
//! skips nothing nomerges=0 does here, so only L0 and L3 differ.

use super::Table;
use crate::decision::Level;
use mergetune_kernel::scheduler::Scheduler;

pub const TABLE: Table = Table {
    scheduler: Scheduler::None,
    rungs: &[Level::L0, Level::L3],
    knobs: &[],
};
