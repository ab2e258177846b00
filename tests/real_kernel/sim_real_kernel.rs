//! The simulator against the real kernel (real-kernel test: `MERGETUNE_KERNEL_TESTS=1`, as
//! root; skipped otherwise): capture the batched sequential 4 KiB write job's
//! `block_bio_queue` events from the tracing filesystem on a loop device, replay them in
//! the simulator on a loop-like device, and compare merges with the kernel's stat delta.

use crate::kernel;

use kernel::TraceCapture;
use mergetune_kernel::trace::Dir;
use mergetune_sim::engine::Simulation;
use mergetune_sim::scenario::Scenario;

#[test]
#[ignore = "needs root, fio and loop devices: sudo MERGETUNE_KERNEL_TESTS=1 cargo test --release -- --include-ignored"]
fn replayed_kernel_trace_merges_like_the_kernel() {
    let (_session, dev) = kernel::require_loop("replayed_kernel_trace_merges_like_the_kernel", 600);
    dev.set_scheduler("mq-deadline");
    dev.set_nomerges(0);
    dev.warm_up();
    let job = kernel::job_batched_seq(&dev, "write", "32M");
    let trace = TraceCapture::start(&dev);
    trace.clear();
    let delta = dev.measure(&job);
    let text = trace.read();
    drop(trace);

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("captured.txt"), &text).unwrap();
    let sc = Scenario::from_toml_str(
        "[[device]]\nname = \"loop0\"\nkind = \"ssd\"\nscheduler = \"mq-deadline\"\n\
         queue_depth = 128\n[[phase]]\nname = \"replay\"\nduration_s = 30.0\n\
         [[phase.job]]\nname = \"fio\"\ndevice = \"loop0\"\ntrace = \"captured.txt\"\n",
        "replay",
        Some(dir.path()),
    )
    .unwrap();
    let mut sim = Simulation::new(&sc).unwrap();
    sim.run_to_end();
    let st = sim.device_stat("loop0").unwrap();
    let (w, wm) = (st.completed(Dir::Write), st.merged(Dir::Write));
    eprintln!(
        "kernel: {} writes, {} merged; simulator replay: {w} writes, {wm} merged",
        delta.writes, delta.writes_merged
    );
    assert_eq!(w + wm, delta.writes + delta.writes_merged);
    let kernel_merged = delta.writes_merged as f64;
    assert!(
        (wm as f64 - kernel_merged).abs() <= kernel_merged * 0.05,
        "simulator {wm} vs kernel {kernel_merged}"
    );
}
