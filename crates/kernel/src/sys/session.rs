//! A child in a session of its own: `setsid()` between fork and exec. The lab's A/B test
//! starts fio this way so that fio is an autogroup of its own, whose nice value it sets
//! (`cputime::set_autogroup_nice`) without touching the measuring process. The `setsid`
//! program would do the same but exec one more binary and change the errors a missing
//! tool gives; std's `process_group` makes a process group, not a session.

use std::os::unix::process::CommandExt;
use std::process::Command;

/// Makes the child that `cmd` spawns the leader of a new session (and so of a new
/// autogroup). The spawned pid is still the command's own: no extra fork.
pub fn new_session_on_spawn(cmd: &mut Command) -> &mut Command {
    // SAFETY: the closure runs in the forked child before exec, where only
    // async-signal-safe calls are allowed: it calls setsid(2) alone (a plain syscall,
    // async-signal-safe per POSIX), allocates nothing and takes no lock. Its result is
    // ignored as before: the child is never a process group leader here (it was just
    // forked into its parent's group), so setsid cannot fail with EPERM.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The session id of a pid, field 6 of `/proc/<pid>/stat`.
    fn sid_of(stat: &str) -> i64 {
        let close = stat.rfind(')').unwrap();
        stat[close + 1..]
            .split_whitespace()
            .nth(6 - 3)
            .unwrap()
            .parse()
            .unwrap()
    }

    #[test]
    fn the_child_leads_a_session_of_its_own_under_its_own_pid() {
        // `sh` reads its own stat: its session id is its pid only if setsid ran in it.
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "cat /proc/$$/stat"]);
        let out = new_session_on_spawn(&mut cmd).output().unwrap();
        assert!(out.status.success());
        let stat = String::from_utf8(out.stdout).unwrap();
        let pid: i64 = stat.split_whitespace().next().unwrap().parse().unwrap();
        assert_eq!(sid_of(&stat), pid, "{stat}");
        let own = std::fs::read_to_string("/proc/self/stat").unwrap();
        assert_ne!(sid_of(&own), pid);
    }
}
