//! The one socket option the metrics endpoint needs that no safe binding offers:
//! `TCP_DEFER_ACCEPT` (rustix, socket2 and nix have none; std's `set_deferaccept` is
//! unstable). It lives here, in the one audited module, so that the export crate stays
//! free of `unsafe`.

use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::time::Duration;

/// Sets `TCP_DEFER_ACCEPT` on a listening socket: the kernel completes `accept` only once
/// the client has sent data (or `wait` has passed), so a client that connects and never
/// speaks is held by the kernel, not by the server. The kernel takes whole seconds; the
/// value is rounded up, and a zero `wait` turns the option off.
pub fn set_tcp_defer_accept(listener: &impl AsFd, wait: Duration) -> io::Result<()> {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    let secs = libc::c_int::try_from(secs).unwrap_or(libc::c_int::MAX);
    let fd = listener.as_fd();
    // SAFETY: `fd` is a descriptor borrowed for the call; the option value is a local c_int
    // whose size is passed with it.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_DEFER_ACCEPT,
            (&secs as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `TCP_DEFER_ACCEPT` in force on a socket, in seconds as the kernel reports it (it
    /// keeps the option as a count of SYN-ACK retransmissions and converts it back, so it may
    /// differ from what was set).
    fn tcp_defer_accept_secs(socket: &impl AsFd) -> io::Result<u32> {
        let mut secs: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        let fd = socket.as_fd();
        // SAFETY: `secs` and `len` are locals that outlive the call; `len` holds their size.
        let r = unsafe {
            libc::getsockopt(
                fd.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_DEFER_ACCEPT,
                (&mut secs as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        if r == 0 {
            Ok(u32::try_from(secs).unwrap_or(0))
        } else {
            Err(io::Error::last_os_error())
        }
    }

    #[test]
    fn a_listener_defers_its_accepts_and_zero_turns_it_off() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        assert_eq!(tcp_defer_accept_secs(&l).unwrap(), 0);
        set_tcp_defer_accept(&l, Duration::from_secs(5)).unwrap();
        assert!(tcp_defer_accept_secs(&l).unwrap() >= 5);
        set_tcp_defer_accept(&l, Duration::ZERO).unwrap();
        assert_eq!(tcp_defer_accept_secs(&l).unwrap(), 0);
    }
}
