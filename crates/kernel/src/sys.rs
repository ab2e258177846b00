//! The one audited module with `unsafe` in the workspace (docs/design.md, "Unsafe"). Every
//! other crate root forbids `unsafe_code` and this crate's root denies it outside here.
//! What is here cannot be written safely with rustix or std:
//!
//! - [`perf`]: the `cpu-clock` sampler's ring buffer: `perf_event_open` (a raw syscall no
//!   safe crate wraps), the `mmap` of the ring, the atomic reads of its head and stores of
//!   its tail that the kernel shares, the copy out of the mapped bytes, and the
//!   `PERF_EVENT_IOC_ENABLE`/`DISABLE` ioctls.
//! - [`session`]: `setsid` in a child between fork and exec (`CommandExt::pre_exec` is
//!   `unsafe` by nature: the closure runs in a forked copy of a threaded process).
//! - [`sockopt`]: `TCP_DEFER_ACCEPT` on the metrics endpoint's listener (rustix, socket2
//!   and nix have no setter; std's is unstable).
//! - [`sigpipe`]: `SIGPIPE` back to its default for the commands whose output is all they
//!   do (rustix offers `sigaction` only as an unsafe runtime call).
//!
//! Each exposes a safe API; each `unsafe` block says, in its `// SAFETY:` comment, why it
//! holds. Keep this module small: a call that rustix offers safely belongs elsewhere.

pub mod perf;
pub mod session;
pub mod sigpipe;
pub mod sockopt;
