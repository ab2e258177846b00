//! `mergetune calibrate`: measures what merging costs in CPU on this kernel, per scheduler
//! and ladder level, and what one `queue/nomerges` write (a queue freeze) costs in latency,
//! and writes a cost profile (`cost_profile`) for the simulator and the policy.
//!
//! Method, and why:
//! - CPU-bound: a scratch loop device over a tmpfs file (never an existing device), so that
//!   there is no device time to wait for; fio pinned to one CPU saturates it.
//! - What is counted: the CPU time (`/proc/PID/task/*/schedstat`, ns) of fio's threads plus
//!   that of every kworker over a measured window. The submission path (plug, merge
//!   lookups, request allocation, insertion, dispatch) runs in fio's thread; the loop
//!   device's work (the copy to and from the tmpfs file and the completion) runs in a
//!   kworker; block completions that come back by IPI run as softirqs in whatever task they
//!   interrupt, and this kernel has no IRQ time accounting, so on fio's saturated CPU they
//!   land in fio's time. Whole-machine busy time from `/proc/stat` is recorded beside it
//!   but not used: the machine is shared, and it counts other tenants' builds.
//! - I/O counts and merges come from `/sys/block/loopN/stat` deltas over the same window
//!   (never fio's figures); a bio is completed + merged.
//! - Levels are interleaved within each repetition (and the order shuffled from a seed),
//!   so slow drift of the shared machine hits every level alike; a level's change against
//!   L0 is the median of per-repetition paired differences, with a distribution-free 95%
//!   interval from order statistics ([`stats`]). An interval that contains 0 is "no
//!   measurable difference".
//!
//! This folder is the only code that names `/dev/loop*`, losetup, tmpfs paths and fio; the
//! scratch loop device's queue is read and written under the sysfs root it is given, the CPU
//! times come from `kernel::cputime`. It acts on the scratch device it created and on
//! nothing the daemon reads.

pub mod fio;
pub mod merge_path;
pub mod profile;
pub mod run;
pub mod scratch;
mod signals;
pub mod stats;

pub use run::{CalibrateArgs, run};
