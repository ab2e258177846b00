//! `SIGPIPE` back to its default action for a command whose output is all it does. Rust
//! starts every program with `SIGPIPE` ignored, so a write to a pipe whose reader has gone
//! (`mergetune status | head -1`) fails with `EPIPE`, and `println!`/`eprintln!` panic on
//! that. With the default action the kernel ends the process at that write, silently, as
//! it ends `cat` or `ls`. Not for the daemon nor `restore`: they must finish putting
//! settings back whoever stops reading their output.

/// Lets a closed pipe end this process quietly (see the module's doc).
pub fn end_quietly_on_a_closed_pipe() {
    // SAFETY: `signal` with `SIG_DFL` installs no handler (no code runs in signal context);
    // it changes only the disposition of SIGPIPE, which nothing else in the process sets.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
