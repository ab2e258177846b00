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
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};
    use std::time::Instant;

    /// Whether the listener hands out a connection within `within`: polled, as the
    /// endpoint's accept loop sees it (non-blocking).
    fn accepts_within(listener: &TcpListener, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        loop {
            match listener.accept() {
                Ok(_) => return true,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("accept: {e}"),
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn a_client_that_connects_and_never_speaks_is_held_by_the_kernel() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        set_tcp_defer_accept(&listener, Duration::from_secs(30)).unwrap();
        let mut silent = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        assert!(
            !accepts_within(&listener, Duration::from_millis(300)),
            "a silent client was handed to accept"
        );
        silent.write_all(b"G").unwrap();
        assert!(
            accepts_within(&listener, Duration::from_secs(5)),
            "a client that spoke was not handed to accept"
        );
    }

    #[test]
    fn a_zero_wait_turns_the_option_off() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        set_tcp_defer_accept(&listener, Duration::from_secs(30)).unwrap();
        set_tcp_defer_accept(&listener, Duration::ZERO).unwrap();
        let _silent = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        assert!(
            accepts_within(&listener, Duration::from_secs(5)),
            "with the option off, a silent client was not handed to accept"
        );
    }
}
