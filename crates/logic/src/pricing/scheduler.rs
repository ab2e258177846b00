//! The schedulers a price or a profile cell is keyed by, named as `queue/scheduler` names
//! them. Its own file so that one scheduler type for every layer can replace it alone.

use crate::decision::Level;
use serde::{Deserialize, Serialize};
use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Scheduler {
    #[serde(rename = "none")]
    None,
    #[serde(rename = "mq-deadline")]
    MqDeadline,
    #[serde(rename = "bfq")]
    Bfq,
    #[serde(rename = "kyber")]
    Kyber,
}

impl Scheduler {
    pub const ALL: [Scheduler; 4] = [
        Scheduler::None,
        Scheduler::MqDeadline,
        Scheduler::Bfq,
        Scheduler::Kyber,
    ];
    /// The name `queue/scheduler` uses.
    pub fn name(self) -> &'static str {
        match self {
            Scheduler::None => "none",
            Scheduler::MqDeadline => "mq-deadline",
            Scheduler::Bfq => "bfq",
            Scheduler::Kyber => "kyber",
        }
    }
    pub fn from_name(s: &str) -> Option<Scheduler> {
        Scheduler::ALL.into_iter().find(|x| x.name() == s)
    }
    /// The ladder levels that mean something on this scheduler: L1 (front_merges=0) exists
    /// only on mq-deadline.
    pub fn levels(self) -> &'static [Level] {
        match self {
            Scheduler::MqDeadline => &[Level::L0, Level::L1, Level::L2, Level::L3],
            _ => &[Level::L0, Level::L2, Level::L3],
        }
    }
}

impl fmt::Display for Scheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
