//! Exporters: what the daemon tells the outside. Prometheus metrics and `/status` over the
//! HTTP endpoint, the status client, and the log/journal output. They read what the
//! daemon layer hands them and never reach back into it. The daemon's entry point
//! ([`entry`]) is here too: the service it assembles includes these exporters.
//!
//! No `unsafe` here: the endpoint's system calls go through rustix, and the one socket
//! option without a safe binding is the kernel layer's ([`mergetune_kernel::sys::sockopt`]).

#![forbid(unsafe_code)]

pub mod endpoint;
pub mod entry;
pub mod http;
pub mod live;
pub mod logging;
pub mod metrics;
pub mod status;
pub mod table;
