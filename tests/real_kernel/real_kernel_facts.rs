//! Pins the kernel facts of docs/design.md that the simulator is checked against, on a loop
//! device of this machine's kernel (real-kernel test: `MERGETUNE_KERNEL_TESTS=1`, as root):
//!
//! - the batched sequential 4 KiB write job gives exactly 128 writes + 8,064 merged at
//!   nomerges 0 and 1, and 8,192 writes + 0 merged at 2 (mq-deadline); reading, the same;
//! - the unbatched random 4 KiB read job merges (about) nothing;
//! - the tracing filesystem's merge events (back + front) equal the stat delta of merges.
//!
//! With `MERGETUNE_CAPTURE_FIXTURES=1` as well, it rewrites the small trace fixtures under
//! `tests/fixtures/` (trace text plus a `.meta.toml` with the fio command and stat deltas).
//! (`diskstats_6.18_*.txt` are one-off copies of /proc/diskstats that other tests pin; they
//! are not rewritten.)
//! `trace_fixtures_match_their_meta` checks those fixtures on every machine.

use crate::kernel;

use kernel::{LoopDevice, StatDelta, TraceCapture};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

const SCHEDULER: &str = "mq-deadline";

fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// One measured run with the trace on: stat delta and event counts.
struct Traced {
    delta: StatDelta,
    counts: BTreeMap<String, u64>,
    text: String,
}

fn measure_traced(dev: &LoopDevice, trace: &TraceCapture, args: &[String]) -> Traced {
    trace.clear();
    let delta = dev.measure(args);
    let text = trace.read();
    trace.clear();
    let counts = kernel::count_trace_events(&text);
    Traced {
        delta,
        counts,
        text,
    }
}

/// The trace agrees with the stat file: merge events = merged bios, queued bios = bios,
/// issued and completed requests = completed requests.
fn assert_trace_matches_stat(what: &str, t: &Traced) {
    let c = &t.counts;
    for (said, traced, stat) in [
        (
            "tracefs merge events",
            kernel::merge_events(c),
            t.delta.merged(),
        ),
        (
            "queued bios",
            kernel::event_count(c, "block_bio_queue"),
            t.delta.bios(),
        ),
        (
            "completed requests",
            kernel::event_count(c, "block_rq_complete"),
            t.delta.completed(),
        ),
        (
            "issued requests",
            kernel::event_count(c, "block_rq_issue"),
            t.delta.completed(),
        ),
    ] {
        assert_eq!(
            traced, stat,
            "{what}: {said} {c:?} vs stat delta {}",
            t.delta
        );
    }
}

/// `args` run once on `dev` at `nomerges`: the stat delta (said on stderr with the job).
fn measure_at(dev: &LoopDevice, nomerges: u8, args: &[String]) -> StatDelta {
    dev.set_nomerges(nomerges);
    let d = dev.measure(args);
    eprintln!(
        "nomerges={nomerges}: {} -> {d}",
        kernel::fio_command_line(args)
    );
    d
}

#[test]
#[ignore = "needs root, fio and loop devices: sudo MERGETUNE_KERNEL_TESTS=1 cargo test --release -- --include-ignored"]
#[allow(clippy::too_many_lines)] // a test reads best as one story
fn kernel_merge_facts() {
    let (_session, dev) = kernel::require_loop("kernel_merge_facts", 600);
    dev.set_scheduler(SCHEDULER);
    dev.set_nomerges(0);
    dev.warm_up();
    eprintln!(
        "kernel {} / {} ({}:{}) / {SCHEDULER} / loop direct I/O on, backing file on {}",
        kernel::kernel_release(),
        dev.name(),
        dev.major_minor().0,
        dev.major_minor().1,
        dev.backing_fs()
    );

    // 1. The merge-friendly job, exact at every nomerges value.
    let seq = kernel::job_batched_seq(&dev, "write", "32M");
    for (nomerges, writes, merged) in [(0u8, 128u64, 8064u64), (1, 128, 8064), (2, 8192, 0)] {
        let d = measure_at(&dev, nomerges, &seq);
        assert_eq!(
            (d.writes, d.writes_merged),
            (writes, merged),
            "batched sequential 4k write at nomerges={nomerges}: {d}"
        );
        assert_eq!(d.reads_merged, 0, "{d}");
    }
    // The same job reading: the same counts on the read side.
    let seq_read = kernel::job_batched_seq(&dev, "read", "32M");
    for (nomerges, reads, merged) in [(0u8, 128u64, 8064u64), (2, 8192, 0)] {
        let d = measure_at(&dev, nomerges, &seq_read);
        assert_eq!(
            (d.reads, d.reads_merged),
            (reads, merged),
            "batched sequential 4k read at nomerges={nomerges}: {d}"
        );
    }
    dev.set_nomerges(0);

    // 2. The merge-hostile job: 8,192 random reads, unbatched, merge (about) nothing.
    let rand = kernel::job_rand(&dev, "randread", "32M");
    let d = dev.measure(&rand);
    eprintln!("nomerges=0: {} -> {d}", kernel::fio_command_line(&rand));
    assert!(d.reads + d.reads_merged >= 8192, "{d}");
    assert!(
        d.reads_merged <= 8,
        "unbatched random 4k reads merged {} of {} (docs/design.md: 0)",
        d.reads_merged,
        d.reads + d.reads_merged
    );
    assert_eq!(d.writes_merged, 0, "{d}");

    // 3. tracefs merge events equal the stat deltas.
    let trace = TraceCapture::start(&dev);
    for nomerges in [0u8, 2] {
        dev.set_nomerges(nomerges);
        let t = measure_traced(&dev, &trace, &seq);
        eprintln!(
            "traced seq write 32M nomerges={nomerges}: {} | {:?}",
            t.delta, t.counts
        );
        assert_trace_matches_stat(&format!("seq write nomerges={nomerges}"), &t);
        let expect = if nomerges == 0 { 8064 } else { 0 };
        assert_eq!(kernel::merge_events(&t.counts), expect);
    }
    dev.set_nomerges(0);
    let t = measure_traced(&dev, &trace, &rand);
    eprintln!(
        "traced randread 32M nomerges=0: {} | {:?}",
        t.delta, t.counts
    );
    assert_trace_matches_stat("randread", &t);

    // 4. The small jobs whose traces are kept as fixtures; checked on every run, written
    //    only when asked for.
    let capture = std::env::var(kernel::CAPTURE_ENV_VAR).is_ok_and(|v| v.trim() == "1");
    let small: [(&str, Vec<String>); 3] = [
        (
            "trace_seq_batched_write",
            kernel::job_batched_seq(&dev, "write", "4M"),
        ),
        ("trace_rand_read", kernel::job_rand(&dev, "randread", "4M")),
        ("trace_mixed", kernel::job_mixed(&dev, "4M")),
    ];
    for (name, args) in &small {
        let t = measure_traced(&dev, &trace, args);
        eprintln!("traced {name}: {} | {:?}", t.delta, t.counts);
        assert_trace_matches_stat(name, &t);
        if *name == "trace_seq_batched_write" {
            assert_eq!(
                (t.delta.writes, t.delta.writes_merged),
                (16, 1008),
                "{}",
                t.delta
            );
        }
        if capture {
            write_fixture(&dev, name, args, &t);
        }
    }
    drop(trace);
}

fn write_fixture(dev: &LoopDevice, name: &str, args: &[String], t: &Traced) {
    let dir = fixtures_dir();
    std::fs::write(dir.join(format!("{name}.txt")), &t.text).unwrap();
    let (major, minor) = dev.major_minor();
    let mut meta = String::new();
    writeln!(
        meta,
        "# Captured by tests/real_kernel/real_kernel_facts.rs (MERGETUNE_KERNEL_TESTS=1 \
         MERGETUNE_CAPTURE_FIXTURES=1) from the tracing filesystem, events filtered to the\n\
         # loop device. stat_delta is /sys/block/{}/stat after minus before the same run.",
        dev.name()
    )
    .unwrap();
    writeln!(meta, "trace = \"{name}.txt\"").unwrap();
    writeln!(meta, "fio_command = {:?}", kernel::fio_command_line(args)).unwrap();
    writeln!(meta, "kernel = {:?}", kernel::kernel_release()).unwrap();
    writeln!(meta, "device = {:?}", dev.name()).unwrap();
    writeln!(meta, "dev = \"{major},{minor}\"").unwrap();
    writeln!(meta, "loop_direct_io = true").unwrap();
    writeln!(meta, "backing_fs = {:?}", dev.backing_fs()).unwrap();
    writeln!(meta, "scheduler = {:?}", dev.scheduler()).unwrap();
    writeln!(meta, "nomerges = {}", dev.nomerges()).unwrap();
    writeln!(meta, "\n[stat_delta]").unwrap();
    writeln!(meta, "reads = {}", t.delta.reads).unwrap();
    writeln!(meta, "reads_merged = {}", t.delta.reads_merged).unwrap();
    writeln!(meta, "writes = {}", t.delta.writes).unwrap();
    writeln!(meta, "writes_merged = {}", t.delta.writes_merged).unwrap();
    writeln!(meta, "\n[trace_events]").unwrap();
    for ev in kernel::TRACE_EVENTS {
        writeln!(meta, "{ev} = {}", kernel::event_count(&t.counts, ev)).unwrap();
    }
    std::fs::write(dir.join(format!("{name}.meta.toml")), meta).unwrap();
}

/// Runs everywhere: each kept trace fixture agrees with its recorded stat deltas.
#[test]
fn trace_fixtures_match_their_meta() {
    for name in ["trace_seq_batched_write", "trace_rand_read", "trace_mixed"] {
        let dir = fixtures_dir();
        let text = std::fs::read_to_string(dir.join(format!("{name}.txt"))).unwrap();
        assert!(text.len() < 1_000_000, "{name}.txt is {} bytes", text.len());
        let meta: toml::Table = toml::from_str(
            &std::fs::read_to_string(dir.join(format!("{name}.meta.toml"))).unwrap(),
        )
        .unwrap();
        let stat = meta["stat_delta"].as_table().unwrap();
        let get = |k: &str| stat[k].as_integer().unwrap() as u64;
        let delta = StatDelta {
            reads: get("reads"),
            reads_merged: get("reads_merged"),
            writes: get("writes"),
            writes_merged: get("writes_merged"),
        };
        let counts = kernel::count_trace_events(&text);
        let events = meta["trace_events"].as_table().unwrap();
        for ev in kernel::TRACE_EVENTS {
            assert_eq!(
                kernel::event_count(&counts, ev),
                events[ev].as_integer().unwrap() as u64,
                "{name}: {ev}"
            );
        }
        let t = Traced {
            delta,
            counts,
            text,
        };
        assert_trace_matches_stat(name, &t);
        assert!(meta["fio_command"].as_str().unwrap().starts_with("fio "));
        assert!(meta["nomerges"].as_integer().is_some());
        assert!(meta["scheduler"].as_str().is_some());
    }
    // The batched sequential 4 MiB write: 1,024 bios in 16 requests of 64.
    let meta: toml::Table = toml::from_str(
        &std::fs::read_to_string(fixtures_dir().join("trace_seq_batched_write.meta.toml")).unwrap(),
    )
    .unwrap();
    assert_eq!(meta["stat_delta"]["writes"].as_integer(), Some(16));
    assert_eq!(meta["stat_delta"]["writes_merged"].as_integer(), Some(1008));
}
