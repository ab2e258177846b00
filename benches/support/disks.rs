//! The in-memory host the tick and metrics benches run the daemon on.

use super::memkernel::{MemDev, MemKernel};

/// `n` mq-deadline disks, sd0 on, whose every other attribute reads "0", whose writes do
/// not stick (the read-back always says "0"), and whose diskstats reads go through `texts`.
pub fn mq_deadline_disks(n: usize, texts: impl IntoIterator<Item = String>) -> MemKernel {
    let mut k = MemKernel::default();
    for i in 0..n {
        let d = k.add(
            &format!("sd{i}"),
            MemDev::with_attrs(&[("queue/scheduler", "none [mq-deadline] kyber")]),
        );
        d.fallback = Some("0".into());
    }
    k.faults.writes_lost = true;
    k.diskstats_script = texts.into_iter().map(String::into_bytes).collect();
    k
}
