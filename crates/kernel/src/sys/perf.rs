//! One CPU's sampling event and its ring buffer, behind a safe API: open
//! ([`PerfRing::open`] a `cpu-clock` [`Sampling`], or a tracepoint for the block events
//! that tie a task to its device), [`PerfRing::enable`], [`PerfRing::disable`], and
//! [`PerfRing::drain_into`], which copies out the records written since the last drain.
//! The records' formats (`PERF_SAMPLE_TID | PERF_SAMPLE_CALLCHAIN`, and
//! `PERF_SAMPLE_TID | PERF_SAMPLE_RAW`) are parsed, safely, by [`crate::perf`].
//!
//! Why `unsafe`: rustix has no `perf_event_open`, so it is a raw `syscall`; the ring is a
//! shared mapping that the kernel writes while we read it (`mmap`, the atomic head and
//! tail in its first page, the copy of the bytes between them); the enable and disable
//! requests are ioctls, which no safe crate types for perf.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

/// `struct perf_event_attr` up to `PERF_ATTR_SIZE_VER5` (112 bytes), which every kernel
/// since 4.1 accepts.
#[repr(C)]
#[derive(Default)]
struct PerfEventAttr {
    kind: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
    config2: u64,
    branch_sample_type: u64,
    sample_regs_user: u64,
    sample_stack_user: u32,
    clockid: i32,
    sample_regs_intr: u64,
    aux_watermark: u32,
    sample_max_stack: u16,
    reserved_2: u16,
}

const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_TYPE_TRACEPOINT: u32 = 2;
const PERF_SAMPLE_RAW: u64 = 1 << 10;
const PERF_COUNT_SW_CPU_CLOCK: u64 = 0;
const PERF_SAMPLE_TID: u64 = 1 << 1;
const PERF_SAMPLE_CALLCHAIN: u64 = 1 << 5;
const FLAG_DISABLED: u64 = 1 << 0;
const FLAG_EXCLUDE_USER: u64 = 1 << 4;
const FLAG_EXCLUDE_HV: u64 = 1 << 6;
const FLAG_EXCLUDE_IDLE: u64 = 1 << 7;
const FLAG_EXCLUDE_CALLCHAIN_USER: u64 = 1 << 22;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;
const IOC_ENABLE: libc::c_ulong = 0x2400;
const IOC_DISABLE: libc::c_ulong = 0x2401;
/// Offsets of `data_head` and `data_tail` in `struct perf_event_mmap_page`.
const DATA_HEAD_OFFSET: usize = 1024;
const DATA_TAIL_OFFSET: usize = 1032;

/// Which step of [`PerfRing::open`] failed, with the OS error.
#[derive(Debug)]
pub enum RingError {
    /// `perf_event_open` refused the event.
    Open(std::io::Error),
    /// The ring buffer could not be mapped.
    Map(std::io::Error),
}

/// A `cpu-clock` event on one CPU, system-wide, kernel stacks only, and its mapped ring.
/// Dropping it unmaps the ring and closes the event.
pub struct PerfRing {
    fd: OwnedFd,
    /// Start of the mapping: the `perf_event_mmap_page`, then `data_len` bytes of data.
    base: NonNull<u8>,
    map_len: usize,
    page: usize,
    data_len: usize,
}

// SAFETY: a PerfRing owns its fd and its mapping; nothing in it is tied to the thread that
// made it (the kernel's writes to the ring do not depend on the reading thread), and every
// access to the mapping goes through &self or &mut self.
unsafe impl Send for PerfRing {}

impl Drop for PerfRing {
    fn drop(&mut self) {
        // SAFETY: `base` and `map_len` are what mmap returned for this event, unmapped once
        // here; no reference into the mapping outlives `self`. The fd closes after this,
        // when the OwnedFd field drops.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.map_len);
        }
    }
}

/// What a ring samples.
#[derive(Debug, Clone, Copy)]
pub enum Sampling {
    /// `cpu-clock`: one sample every `period_ns` of CPU time, with the task ids and a kernel
    /// callchain of at most `max_stack` frames. Needs CAP_PERFMON or root, or
    /// `perf_event_paranoid` <= 0.
    CpuClock { period_ns: u64, max_stack: u16 },
    /// A tracepoint (`id`, from tracefs): one event in `every_events`, with the task ids and
    /// the event's raw fields. The raw fields need CAP_PERFMON or root, or
    /// `perf_event_paranoid` <= -1.
    Tracepoint { id: u64, every_events: u64 },
}

impl Sampling {
    /// The event's attributes: disabled, on every task of one CPU.
    fn attr(self) -> PerfEventAttr {
        let attr = match self {
            Sampling::CpuClock {
                period_ns,
                max_stack,
            } => PerfEventAttr {
                kind: PERF_TYPE_SOFTWARE,
                config: PERF_COUNT_SW_CPU_CLOCK,
                sample_period: period_ns,
                sample_type: PERF_SAMPLE_TID | PERF_SAMPLE_CALLCHAIN,
                flags: FLAG_DISABLED
                    | FLAG_EXCLUDE_USER
                    | FLAG_EXCLUDE_HV
                    | FLAG_EXCLUDE_IDLE
                    | FLAG_EXCLUDE_CALLCHAIN_USER,
                sample_max_stack: max_stack,
                ..Default::default()
            },
            Sampling::Tracepoint { id, every_events } => PerfEventAttr {
                kind: PERF_TYPE_TRACEPOINT,
                config: id,
                sample_period: every_events.max(1),
                sample_type: PERF_SAMPLE_TID | PERF_SAMPLE_RAW,
                flags: FLAG_DISABLED,
                ..Default::default()
            },
        };
        PerfEventAttr {
            size: std::mem::size_of::<PerfEventAttr>() as u32,
            ..attr
        }
    }
}

impl PerfRing {
    /// Opens `sampling` as a disabled event on `cpu` (every task), and maps a ring of
    /// `data_pages` pages (rounded up to a power of two) plus the control page.
    pub fn open(
        cpu: libc::c_int,
        sampling: Sampling,
        data_pages: usize,
    ) -> Result<PerfRing, RingError> {
        let attr = sampling.attr();
        // SAFETY: perf_event_open reads `attr` (a valid, fully initialised struct of the
        // size it states, alive for the call) and returns a new fd or -1; no memory is
        // shared and nothing is written into our memory.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_perf_event_open,
                &attr as *const PerfEventAttr,
                -1 as libc::pid_t,
                cpu,
                -1 as libc::c_int,
                PERF_FLAG_FD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(RingError::Open(std::io::Error::last_os_error()));
        }
        let Ok(fd) = libc::c_int::try_from(fd) else {
            return Err(RingError::Open(std::io::Error::from(
                std::io::ErrorKind::InvalidData,
            )));
        };
        // SAFETY: `fd` is the new event's descriptor, returned just now and owned by
        // nothing else; the OwnedFd closes it exactly once (also on the error paths below).
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let page = rustix::param::page_size();
        let data_len = page * data_pages.next_power_of_two();
        let map_len = page + data_len;
        // SAFETY: a new shared read-write mapping of the event's fd, of 1 + 2^n pages as
        // perf requires, at an address the kernel picks (so nothing of ours is replaced);
        // the result is checked against MAP_FAILED before any use.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(RingError::Map(std::io::Error::last_os_error()));
        }
        let Some(base) = NonNull::new(base.cast::<u8>()) else {
            return Err(RingError::Map(std::io::Error::from(
                std::io::ErrorKind::InvalidData,
            )));
        };
        Ok(PerfRing {
            fd,
            base,
            map_len,
            page,
            data_len,
        })
    }

    /// Starts sampling (`PERF_EVENT_IOC_ENABLE`).
    pub fn enable(&self) {
        self.ioctl(IOC_ENABLE);
    }

    /// Stops sampling (`PERF_EVENT_IOC_DISABLE`); what was written stays in the ring.
    pub fn disable(&self) {
        self.ioctl(IOC_DISABLE);
    }

    fn ioctl(&self, req: libc::c_ulong) {
        // SAFETY: an argument-less perf ioctl (the third argument is ignored) on the
        // event's own, open fd; it touches none of our memory.
        unsafe { libc::ioctl(self.fd.as_raw_fd(), req as _, 0) };
    }

    fn head_tail(&self) -> (&AtomicU64, &AtomicU64) {
        // SAFETY: the first page of the mapping is the `perf_event_mmap_page`, whose
        // `data_head` and `data_tail` are u64s at these 8-aligned offsets (the mapping is
        // page-aligned), inside the page. The kernel writes the head and reads the tail
        // concurrently, hence atomics (AtomicU64 has u64's size and an alignment these
        // offsets meet). The references borrow `self`, so the mapping outlives them.
        unsafe {
            (
                &*(self.base.as_ptr().add(DATA_HEAD_OFFSET) as *const AtomicU64),
                &*(self.base.as_ptr().add(DATA_TAIL_OFFSET) as *const AtomicU64),
            )
        }
    }

    /// Replaces `out` with the bytes the kernel wrote since the last drain (whole records,
    /// in order, unwrapped from the ring) and gives their space back to the kernel.
    pub fn drain_into(&mut self, out: &mut Vec<u8>) {
        out.clear();
        let (head, tail) = {
            let (head_a, tail_a) = self.head_tail();
            // Acquire: the record bytes up to `head` are visible once `head` is.
            (
                head_a.load(Ordering::Acquire),
                tail_a.load(Ordering::Relaxed),
            )
        };
        let avail = usize::try_from(head.wrapping_sub(tail)).unwrap_or(0);
        let avail = avail.min(self.data_len);
        let start = (tail as usize) % self.data_len;
        let first = avail.min(self.data_len - start);
        // SAFETY: the data area is the `data_len` bytes after the first page of the
        // mapping; the ranges copied lie within it (start < data_len,
        // first <= data_len - start, avail - first <= start < data_len), and the kernel
        // does not write between tail and head until the tail is moved past them below.
        unsafe {
            let data = self.base.as_ptr().add(self.page);
            out.extend_from_slice(std::slice::from_raw_parts(data.add(start), first));
            out.extend_from_slice(std::slice::from_raw_parts(data, avail - first));
        }
        // Release: our reads of the bytes happen before the kernel may overwrite them.
        self.head_tail().1.store(head, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_attr_is_the_size_every_kernel_since_4_1_accepts() {
        // PERF_ATTR_SIZE_VER5: a wrong size is refused (E2BIG) or misread by the kernel.
        assert_eq!(std::mem::size_of::<PerfEventAttr>(), 112);
    }
}
