//! bfq: nomerges=1 skips its own request merge (L2), but there is no front-merge switch
//! (no L1); reads are favoured by lengthening the sync queues' slice (`timeout_sync` x1.5).

use super::{Bound, Knob, Table};
use crate::decision::Level;
use mergetune_kernel::scheduler::Scheduler;
use mergetune_kernel::tunable::Tunable;

pub const TABLE: Table = Table {
    scheduler: Scheduler::Bfq,
    rungs: &[Level::L0, Level::L2, Level::L3],
    knobs: &[Knob {
        tunable: Tunable::TimeoutSync,
        default: 125,
        bound: Bound {
            key: "timeout_sync_max_ms",
            default: 500,
            min: 125,
            max: 5000,
        },
        step: |v, max| (v < max).then(|| (v * 3 / 2).clamp(v + 1, max)),
    }],
};
