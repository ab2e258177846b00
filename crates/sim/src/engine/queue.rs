//! The event queue: one binary heap of packed events ordered by (time, sequence).
//!
//! Equal times pop in the order they were pushed, so a run replays exactly. The heap is the
//! hottest structure of the simulator, so an event is packed into 16 bytes: the time, then
//! `seq` (16 bits, wrapping: equal times pop in submission order unless 65,536 events
//! apart, which is still deterministic), the kind (4 bits), `b` (12 bits) and `a` (32 bits).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// What an event does when its time comes; `a` and `b` are its arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum EvKind {
    /// Request `a` completes on its device.
    Complete = 0,
    /// Job `a` may submit again (think time, rate limit, next trace bio).
    JobWake = 1,
    /// Device `a`'s idle timer of generation `b` fires (slice scheduler).
    Idle = 2,
    /// Phase `a` starts.
    Phase = 3,
    /// Device `a`'s `queue/nomerges` freeze may end.
    Unfreeze = 4,
}

impl EvKind {
    #[inline]
    fn from_bits(k: u8) -> Option<EvKind> {
        Some(match k {
            0 => EvKind::Complete,
            1 => EvKind::JobWake,
            2 => EvKind::Idle,
            3 => EvKind::Phase,
            4 => EvKind::Unfreeze,
            _ => return None,
        })
    }
}

/// Idle-timer generations travel in the event's 12-bit `b`.
pub(super) const GEN_MASK: u32 = 0xFFF;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Ev {
    pub(super) t: u64,
    packed: u64,
}

impl Ev {
    #[inline]
    pub(super) fn kind(self) -> Option<EvKind> {
        EvKind::from_bits(((self.packed >> 44) & 0xF) as u8)
    }
    #[inline]
    pub(super) fn a(self) -> u32 {
        self.packed as u32
    }
    #[inline]
    pub(super) fn b(self) -> u32 {
        ((self.packed >> 32) & 0xFFF) as u32
    }
}

#[derive(Default)]
pub(super) struct EventQueue {
    seq: u64,
    heap: BinaryHeap<Reverse<Ev>>,
}

impl EventQueue {
    #[inline]
    pub(super) fn push(&mut self, t: u64, kind: EvKind, a: u32, b: u32) {
        self.seq += 1;
        let packed = ((self.seq & 0xFFFF) << 48)
            | ((kind as u64 & 0xF) << 44)
            | ((b & GEN_MASK) as u64) << 32
            | a as u64;
        self.heap.push(Reverse(Ev { t, packed }));
    }

    /// The earliest event, left in the queue.
    #[inline]
    pub(super) fn peek(&self) -> Option<Ev> {
        self.heap.peek().map(|r| r.0)
    }

    #[inline]
    pub(super) fn pop(&mut self) {
        self.heap.pop();
    }
}
