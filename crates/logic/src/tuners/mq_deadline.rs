//! mq-deadline: the whole ladder, L1 (front_merges=0) existing only here; reads are
//! favoured by letting writes be starved one batch longer (`writes_starved` + 1), then by
//! halving the read deadline (`read_expire`).

use super::{Bound, Knob, Table};
use crate::decision::Level;
use mergetune_kernel::scheduler::Scheduler;
use mergetune_kernel::tunable::Tunable;

pub const TABLE: Table = Table {
    scheduler: Scheduler::MqDeadline,
    rungs: &[Level::L0, Level::L1, Level::L2, Level::L3],
    knobs: &[
        Knob {
            tunable: Tunable::WritesStarved,
            default: 2,
            bound: Bound {
                key: "writes_starved_max",
                default: 8,
                min: 2,
                max: 64,
            },
            step: |v, max| (v < max).then_some(v + 1),
        },
        Knob {
            tunable: Tunable::ReadExpire,
            default: 500,
            bound: Bound {
                key: "read_expire_min_ms",
                default: 100,
                min: 10,
                max: 500,
            },
            step: |v, min| (v > min).then(|| (v / 2).max(min)),
        },
    ],
};
