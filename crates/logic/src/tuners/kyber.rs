//! kyber: no merge lookups of its own beyond the plug's (nomerges=1 skips nothing here), and
//! no slice knob mergetune moves: its latency targets are left to the operator.

use super::Table;
use crate::decision::Level;
use mergetune_kernel::scheduler::Scheduler;

pub const TABLE: Table = Table {
    scheduler: Scheduler::Kyber,
    rungs: &[Level::L0, Level::L3],
    knobs: &[],
};
