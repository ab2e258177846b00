//! The I/O schedulers mergetune knows, by the names `queue/scheduler` gives them. Plain
//! data, no I/O.
//!
//! One type for every layer: the merge-path sampler classifies samples by it, profiles and
//! scenarios name it, the simulator runs it, the tuners are tabled by it. Its name is
//! parsed where the kernel's `queue/scheduler` is read ([`Reported::parse`]) and, for files
//! an operator writes (config, profiles, scenarios), by serde or [`FromStr`]; nothing parses
//! a name the program built itself. [`Scheduler::ALL`] is the one order: arrays indexed by
//! scheduler use [`Scheduler::index`].

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// An I/O scheduler mergetune knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scheduler {
    /// No elevator: bios go to the hardware queues as they come.
    None,
    MqDeadline,
    Bfq,
    Kyber,
}

impl Scheduler {
    /// Every scheduler, in the one order of every table indexed by scheduler.
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

    /// The scheduler `queue/scheduler` calls `name`, if mergetune knows it.
    pub fn from_name(name: &str) -> Option<Scheduler> {
        Scheduler::ALL.into_iter().find(|s| s.name() == name)
    }

    /// Its place in [`Scheduler::ALL`], for arrays indexed by scheduler.
    pub fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Scheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is not one of [`Scheduler::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a scheduler mergetune knows")]
pub struct UnknownScheduler(pub String);

impl FromStr for Scheduler {
    type Err = UnknownScheduler;
    fn from_str(s: &str) -> Result<Scheduler, UnknownScheduler> {
        Scheduler::from_name(s).ok_or_else(|| UnknownScheduler(s.to_string()))
    }
}

/// The scheduler a device's `queue/scheduler` names: one mergetune knows, or another the
/// kernel offers (an out-of-tree or renamed one, `deadline` on old kernels), kept by name
/// only to be shown. Nothing above the kernel layer tells other schedulers apart.
///
/// A scenario names its devices' schedulers the same way (serde reads one from the name):
/// the simulator refuses an other one, as a kernel without it would.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "String", from = "String")]
pub enum Reported {
    Known(Scheduler),
    Other(String),
}

impl Reported {
    /// The bracketed entry of `queue/scheduler` ("none [mq-deadline] kyber" ->
    /// mq-deadline); a single unbracketed entry (older kernels print "none") is taken as is.
    pub fn parse(text: &str) -> Option<Reported> {
        let name = if let (Some(a), Some(b)) = (text.find('['), text.find(']'))
            && a < b
        {
            &text[a + 1..b]
        } else {
            let mut it = text.split_whitespace();
            match (it.next(), it.next()) {
                (Some(one), None) => one,
                _ => return None,
            }
        };
        Some(Reported::from(name.to_string()))
    }

    /// The name the kernel gave.
    pub fn name(&self) -> &str {
        match self {
            Reported::Known(s) => s.name(),
            Reported::Other(n) => n,
        }
    }

    /// The scheduler, if mergetune knows it.
    pub fn scheduler(&self) -> Option<Scheduler> {
        match self {
            Reported::Known(s) => Some(*s),
            Reported::Other(_) => None,
        }
    }

    /// What a device runs, as everything above the kernel layer sees it: a device without
    /// a `queue/scheduler` file runs none (no elevator); one the kernel names but mergetune
    /// does not know is None (no rungs beyond L0 and L3, no price, no slices).
    pub fn known(reported: Option<&Reported>) -> Option<Scheduler> {
        match reported {
            None => Some(Scheduler::None),
            Some(Reported::Known(s)) => Some(*s),
            Some(Reported::Other(_)) => None,
        }
    }
}

impl fmt::Display for Reported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl From<Reported> for String {
    fn from(r: Reported) -> String {
        r.name().to_string()
    }
}

impl From<String> for Reported {
    fn from(name: String) -> Reported {
        Scheduler::from_name(&name).map_or(Reported::Other(name), Reported::Known)
    }
}

impl From<Scheduler> for Reported {
    fn from(s: Scheduler) -> Reported {
        Reported::Known(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_in_one_order() {
        for (i, s) in Scheduler::ALL.into_iter().enumerate() {
            assert_eq!(s.index(), i);
            assert_eq!(s.name().parse::<Scheduler>(), Ok(s));
            assert_eq!(s.to_string(), s.name());
        }
        assert!("deadline".parse::<Scheduler>().is_err());
    }

    #[test]
    fn the_active_entry_is_parsed_once() {
        assert_eq!(
            Reported::parse("none [mq-deadline] kyber bfq"),
            Some(Reported::Known(Scheduler::MqDeadline))
        );
        assert_eq!(
            Reported::parse("[none] mq-deadline"),
            Some(Reported::Known(Scheduler::None))
        );
        assert_eq!(
            Reported::parse("none"),
            Some(Reported::Known(Scheduler::None))
        );
        assert_eq!(
            Reported::parse("noop [deadline] cfq"),
            Some(Reported::Other("deadline".into()))
        );
        assert_eq!(Reported::parse("a b"), None);
        assert_eq!(Reported::known(None), Some(Scheduler::None));
        assert_eq!(Reported::known(Some(&Reported::Other("x".into()))), None);
    }
}
