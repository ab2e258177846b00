//! A 100 MB trace: `mergetune-lab advise` streams it with flat memory. The trace is made in a
//! temp file by repeating the mixed fixture's event lines with increasing timestamps; the
//! peak RSS of the advise process (from wait4's rusage) is compared with the peak on a
//! 1 MB trace of the same kind. The internal state is bounded by construction too.

use mergetune_lab::advise::{
    Analyzer, DeviceAcc, MAX_INFLIGHT, MAX_TASKS, SCATTER_POINTS, TIMELINE_BUCKETS,
};
use mergetune_logic::config::PolicyConfig;
use std::io::Write;
use std::path::Path;

/// Writes `target_bytes` of trace: the fixture's events again and again, each copy
/// shifted by the span of the fixture plus 1 ms, tasks renumbered every copy (so the
/// per-task map is exercised past its cap).
fn make_trace(path: &Path, target_bytes: u64) -> u64 {
    let fixture = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/trace_mixed.txt"),
    )
    .unwrap();
    let events: Vec<(&str, f64, &str)> = fixture
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let i = l.find(": block_")?;
            let head = &l[..i];
            let ts_at = head.rfind(' ')?;
            let ts: f64 = head[ts_at + 1..].parse().ok()?;
            Some((&l[..ts_at], ts, &l[i..]))
        })
        .collect();
    let t0 = events[0].1;
    let span = events.last().unwrap().1 - t0 + 0.001;
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut written = 0u64;
    let mut rep = 0u64;
    while written < target_bytes {
        for (head, ts, rest) in &events {
            let t = 1000.0 + rep as f64 * span + (ts - t0);
            let head = head.replace("fio-28", &format!("fio-{}", 100 + rep % 5000));
            let line = format!("{head} {t:.6}{rest}\n");
            written += line.len() as u64;
            f.write_all(line.as_bytes()).unwrap();
        }
        rep += 1;
    }
    f.flush().unwrap();
    written
}

/// Runs `mergetune-lab advise FILE`; returns (exit ok, stdout, peak RSS in KiB: the
/// process's own VmHWM, polled until it exits).
fn advise_peak_rss(path: &Path) -> (bool, String, u64) {
    let out_path = path.with_extension("out");
    let out = std::fs::File::create(&out_path).unwrap();
    let mut child = crate::lab::lab()
        .arg("advise")
        .arg(path)
        .stdout(out)
        .spawn()
        .unwrap();
    let (status, peak) = crate::command::wait_with_peak_rss(&mut child);
    (
        status.success(),
        std::fs::read_to_string(&out_path).unwrap(),
        peak,
    )
}

#[test]
fn a_100_mb_trace_streams_in_flat_memory() {
    let dir = tempfile::tempdir().unwrap();
    let small = dir.path().join("small.txt");
    let big = dir.path().join("big.txt");
    make_trace(&small, 1 << 20);
    let n = make_trace(&big, 100 << 20);
    assert!(n >= 100 << 20);
    let (ok_s, _, rss_small) = advise_peak_rss(&small);
    let (ok_b, text, rss_big) = advise_peak_rss(&big);
    assert!(ok_s && ok_b, "{text}");
    eprintln!("peak RSS: 1 MB trace {rss_small} KiB, 100 MB trace {rss_big} KiB");
    // Flat: the trace never sits in memory; the state is capped (maps, histograms,
    // timeline, scatter sample). Allow the binary's own footprint (32 MiB, a debug build)
    // plus that bound; the small run is printed for comparison (it may end before a poll).
    let bound_kib = (DeviceAcc::state_bound_bytes() / 1024) as u64;
    assert!(
        rss_big <= 32 * 1024 + bound_kib,
        "peak RSS {rss_big} KiB on a 100 MB trace (state bound {bound_kib} KiB)"
    );
    assert!(text.contains("merge level"), "{text}");
    assert!(text.contains("L2"), "{text}");
}

#[test]
fn the_state_is_bounded_by_construction() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("t.txt");
    make_trace(&p, 8 << 20);
    let mut a = Analyzer::new(None);
    a.read_from(std::io::BufReader::new(std::fs::File::open(&p).unwrap()))
        .unwrap();
    let d = a.devices().next().unwrap();
    let (tasks, inflight) = d.map_sizes();
    assert!(tasks <= MAX_TASKS && inflight <= MAX_INFLIGHT);
    assert!(d.scatter.len() <= SCATTER_POINTS);
    assert!(d.timeline.used <= TIMELINE_BUCKETS);
    assert_eq!(d.timeline.bios.len(), TIMELINE_BUCKETS);
    assert!(d.total_bios() > 30_000);
    let r = a.finish(&PolicyConfig::default());
    assert_eq!(
        r.devices[0].recommended_level,
        mergetune_logic::decision::Level::L2
    );
}
