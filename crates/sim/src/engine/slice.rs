//! The sync/async time-slice scheduler that stands for bfq (CFQ's knobs of the seeds'
//! readers-vs-writer and spool workloads).
//!
//! Two classes: sync (reads, O_DIRECT writes; the elevator's FIFO 0) and async (buffered
//! writes; FIFO 1). The active class owns the disk for `slice_sync` or `slice_async` ms;
//! with both busy they alternate. With `slice_idle` > 0 an emptied sync class keeps the
//! disk that long waiting for its next request (an idle timer event, cancelled by a
//! generation bump). With `low_latency=1` async requests are not dispatched while sync I/O
//! is in flight, and the async depth ramps up with the time since the last sync
//! completion (one request per `slice_sync` elapsed).

use super::elevator::Elevator;
use super::queue::{EvKind, EventQueue, GEN_MASK};
use super::sched::Tunables;
use super::slab::ReqSlab;

/// Class index of sync I/O; async is 1.
const SYNC: usize = 0;
const ASYNC: usize = 1;

/// The slice scheduler's per-device state.
pub(super) struct SliceSched {
    /// The class owning the disk, if any.
    active: Option<usize>,
    /// The class that had the last slice (the other one goes next when both are busy).
    last: usize,
    end_ns: u64,
    pub(super) idling: bool,
    /// Bumped whenever a pending idle timer must be ignored.
    idle_gen: u32,
    sync_inflight: u32,
    async_inflight: u32,
    last_sync_done_ns: u64,
}

impl SliceSched {
    pub(super) fn new() -> SliceSched {
        SliceSched {
            active: None,
            last: ASYNC,
            end_ns: 0,
            idling: false,
            idle_gen: 0,
            sync_inflight: 0,
            async_inflight: 0,
            last_sync_done_ns: 0,
        }
    }

    /// The next request of device `d` to dispatch, or None (nothing queued, the active
    /// class is held back, or it idles; an idle timer is then pushed onto `events`).
    pub(super) fn select(
        &mut self,
        d: u32,
        elv: &mut Elevator,
        reqs: &ReqSlab,
        tun: &Tunables,
        now: u64,
        events: &mut EventQueue,
    ) -> Option<u32> {
        loop {
            match self.active {
                Some(c) => {
                    if now >= self.end_ns {
                        self.expire(c);
                        continue;
                    }
                    if c == ASYNC && tun.low_latency == 1 {
                        // CFQ's low_latency: no async dispatch while sync I/O is in flight,
                        // and the async depth ramps up with the time since the last sync
                        // completion (one request right after it), so reads never queue
                        // behind a full device of writes.
                        if self.sync_inflight > 0 {
                            return None;
                        }
                        let since = now.saturating_sub(self.last_sync_done_ns);
                        let depth =
                            (since / tun.slice_sync.max(1).saturating_mul(1_000_000)).max(1);
                        if self.async_inflight as u64 >= depth {
                            return None;
                        }
                    }
                    if let Some(r) = elv.fifo_pop(c, reqs) {
                        return Some(r);
                    }
                    if self.idling {
                        return None;
                    }
                    if c == SYNC && tun.slice_idle > 0 {
                        if self.sync_inflight > 0 {
                            // Wait for the class's in-flight I/O before idling (CFQ).
                            return None;
                        }
                        self.idling = true;
                        self.idle_gen = self.idle_gen.wrapping_add(1);
                        let t = now
                            .saturating_add(tun.slice_idle.saturating_mul(1_000_000))
                            .min(self.end_ns);
                        events.push(t, EvKind::Idle, d, self.idle_gen);
                        return None;
                    }
                    self.expire(c);
                }
                None => {
                    let s = elv.fifo_peek(SYNC, reqs).is_some();
                    let a = elv.fifo_peek(ASYNC, reqs).is_some();
                    let c = match (s, a) {
                        (true, true) => 1 - self.last,
                        (true, false) => SYNC,
                        (false, true) => ASYNC,
                        (false, false) => return None,
                    };
                    let slice_ms = if c == SYNC {
                        tun.slice_sync
                    } else {
                        tun.slice_async
                    };
                    self.active = Some(c);
                    self.end_ns = now.saturating_add(slice_ms.max(1).saturating_mul(1_000_000));
                }
            }
        }
    }

    fn expire(&mut self, c: usize) {
        self.active = None;
        self.last = c;
        self.idling = false;
        self.idle_gen = self.idle_gen.wrapping_add(1);
    }

    /// The idle timer of generation `gen_` fired: if it is still the pending one, the
    /// slice ends. True if the device should dispatch again.
    pub(super) fn idle_timer(&mut self, gen_: u32) -> bool {
        if self.idling && self.idle_gen & GEN_MASK == gen_ {
            if let Some(c) = self.active {
                self.expire(c);
            }
            return true;
        }
        false
    }

    /// A sync request arrived: idling for one is over.
    #[inline]
    pub(super) fn sync_arrived(&mut self) {
        if self.idling {
            self.idling = false;
            self.idle_gen = self.idle_gen.wrapping_add(1);
        }
    }

    /// The scheduler was switched to: no class is active and no idle timer counts.
    pub(super) fn reset(&mut self) {
        self.active = None;
        self.idling = false;
        self.idle_gen = self.idle_gen.wrapping_add(1);
    }

    #[inline]
    pub(super) fn dispatched(&mut self, sync: bool) {
        if sync {
            self.sync_inflight += 1;
        } else {
            self.async_inflight += 1;
        }
    }

    #[inline]
    pub(super) fn completed(&mut self, sync: bool, now_ns: u64) {
        if sync {
            self.sync_inflight = self.sync_inflight.saturating_sub(1);
            self.last_sync_done_ns = now_ns;
        } else {
            self.async_inflight = self.async_inflight.saturating_sub(1);
        }
    }
}
