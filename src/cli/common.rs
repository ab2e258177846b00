//! What every subcommand shares: the exit codes, the config lookup and the wall clock.
//! The codes are part of the interface (scripts and `systemctl`-style checks read them), so
//! they are named once here and printed in `--help` and the man page from [`EXIT_STATUS_HELP`].

/// Success.
pub const EXIT_OK: i32 = 0;
/// An error: a bad config, a failed restore, an unreadable file.
pub const EXIT_ERROR: i32 = 1;
/// A usage error: an unknown option or a bad argument (clap exits with it).
pub const EXIT_USAGE: i32 = 2;
/// `mergetune status`: no daemon answers at the address (like `systemctl status` of a
/// stopped unit).
pub const EXIT_NOT_RUNNING: i32 = 3;

/// The `EXIT STATUS` text of `--help` and the man page.
pub const EXIT_STATUS_HELP: &str = "Exit status:
  0  success
  1  error (bad config, failed restore, unreadable file, ...)
  2  usage error (unknown option, bad argument)
  3  status: the daemon is not running (nothing answers at its address)";

use mergetune_daemon::controller::Controller;

use mergetune_daemon::snapshot::DaemonSnapshot;
use mergetune_kernel::blockfs::BlockFs;
use mergetune_logic::decision::Decision;

/// The wall clock and the config lookup are the daemon entry's, shared with the other
/// commands.
pub use mergetune_export::entry::{load_config, unix_now_secs};

/// A controller whose log lines carry the virtual time of the tick they come from
/// (`[sim 12.5s]`, `[replay 12.5s]`), not the wall clock: a simulated or replayed decision
/// must never read as a change to a real disk of the same name. `stamp` is the logging
/// layer's setter for that kind of time.
pub struct VirtualClocked<'a> {
    pub inner: &'a mut dyn Controller,
    pub stamp: fn(Option<u64>),
}

impl Controller for VirtualClocked<'_> {
    fn interval_ms(&self) -> u64 {
        self.inner.interval_ms()
    }
    fn next_tick_in_ms(&self) -> u64 {
        self.inner.next_tick_in_ms()
    }
    fn tick(&mut self, now_ms: u64, fs: &mut dyn BlockFs) -> Vec<Decision> {
        (self.stamp)(Some(now_ms));
        self.inner.tick(now_ms, fs)
    }
    fn restore(&mut self, now_ms: u64, fs: &mut dyn BlockFs) -> Vec<Decision> {
        (self.stamp)(Some(now_ms));
        self.inner.restore(now_ms, fs)
    }
    fn snapshot(&self) -> Option<DaemonSnapshot> {
        self.inner.snapshot()
    }
}

/// What the lab puts around a simulate or replay run to draw it (`mergetune-lab simulate
/// --plot`, `replay --plot`): `mergetune` itself draws nothing and links no plotting code,
/// so its runs take this hook instead. `R` is what the run produced (a simulation's report).
pub trait Watch<R> {
    /// Runs `drive` over `inner`, or over a wrapper of it that watches every tick.
    fn around(&mut self, inner: &mut dyn Controller, drive: &mut dyn FnMut(&mut dyn Controller));
    /// After the run, before anything is printed: an error ends the command.
    fn finish(&mut self, outcome: &R) -> anyhow::Result<()>;
}
