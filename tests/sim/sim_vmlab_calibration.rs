//! The simulator against the VM lab's slow device (vmlab/guest/slow.sh): a null_blk disk
//! with a 0.5 ms completion and 4 tags under mq-deadline, where requests wait in the
//! scheduler and the elevator's merges happen, as loop devices never show. Each fixture
//! (tests/fixtures/vmlab/, README.md there) is the tracing filesystem's block events of
//! one 4 KiB libaio QD32 stream (sequential, or backwards with `--rw=write:-8k`) at one
//! merge level, captured in a Debian guest, with the stat deltas of the same run. Replayed
//! at the kernel's own submission times on a device modelled like the null_blk one, the
//! simulator must merge what the kernel merged at that level: within the band measured when
//! the fixtures were added ([`BAND_PCT`]) at L0 (all merges), L1 (no elevator front merges)
//! and L2 (nomerges=1), none at L3. On these single
//! streams L1 and L2 keep nearly every merge on both sides: the one-hit `last_merge` cache
//! catches a sequential stream's back merges and a backwards stream's front merges.
//!
//! Under TCG the guest submits slowly, so a generated job of the same shape would not
//! queue the same way: the trace replay carries the guest's real timing.

use mergetune_kernel::trace::Dir;
use mergetune_kernel::trace::{EventKind, parse_event};
use mergetune_sim::engine::DmTable;
use mergetune_sim::engine::Simulation;
use mergetune_sim::scenario::Scenario;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/vmlab")
}

struct Meta {
    nomerges: u8,
    front_merges: u8,
    writes: u64,
    writes_merged: u64,
    queued: u64,
    backmerges: u64,
    frontmerges: u64,
}

fn meta(path: &Path) -> Meta {
    let v: toml::Table = std::fs::read_to_string(path).unwrap().parse().unwrap();
    let n = |k: &str| {
        v.get(k)
            .and_then(|x| x.as_integer())
            .unwrap_or_else(|| panic!("{}: no {k}", path.display())) as u64
    };
    Meta {
        nomerges: n("nomerges") as u8,
        front_merges: n("front_merges") as u8,
        writes: n("writes"),
        writes_merged: n("writes_merged"),
        queued: n("queued"),
        backmerges: n("backmerges"),
        frontmerges: n("frontmerges"),
    }
}

/// Every fixture: (trace, meta).
fn cases() -> Vec<(PathBuf, Meta)> {
    let mut v: Vec<_> = std::fs::read_dir(fixtures())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "txt"))
        .map(|p| {
            let m = meta(&p.with_extension("meta.toml"));
            (p, m)
        })
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(v.len() >= 4, "the vmlab fixtures are missing");
    v
}

/// The mean time from issue to completion of the trace's requests, in µs: the guest's
/// null_blk completes 0.5 ms after issue by its timer, but under TCG the timer fires late
/// (median about 0.6 ms, a tail to several ms), so the device model takes the service time
/// the same run measured.
fn mean_service_us(text: &str) -> f64 {
    let mut issued: HashMap<(u64, u32), u64> = HashMap::new();
    let (mut sum_ns, mut n) = (0u64, 0u64);
    for line in text.lines() {
        let Ok(ev) = parse_event(line) else { continue };
        let Some(extent) = ev.extent else { continue };
        match ev.kind {
            EventKind::Issue => {
                issued.insert(extent, ev.t_ns);
            }
            EventKind::Complete => {
                if let Some(t) = issued.remove(&extent) {
                    sum_ns += ev.t_ns - t;
                    n += 1;
                }
            }
            _ => {}
        }
    }
    assert!(n > 0, "no issue/complete pairs");
    sum_ns as f64 / n as f64 / 1000.0
}

/// Replays one trace on a device shaped like the guest's null_blk (4 tags served in
/// parallel, the measured service time whatever the request's size, mq-deadline) at the
/// fixture's level. (completed, merged).
fn replay(trace: &Path, m: &Meta) -> (u64, u64) {
    let (w, wm, _) = replay_at(trace, m.nomerges, m.front_merges);
    (w, wm)
}

/// [`replay`] at the given `nomerges` and `front_merges`, priced in the 2008 figures (where
/// every lookup costs something): (completed, merged, block-layer cycles).
fn replay_at(trace: &Path, nomerges: u8, front_merges: u8) -> (u64, u64, u64) {
    let service_us = mean_service_us(&std::fs::read_to_string(trace).unwrap());
    let text = format!(
        "cost_profile = \"lkml-2008\"\n\
         [[device]]\nname = \"nullb\"\nkind = \"ssd\"\nscheduler = \"mq-deadline\"\n\
         queue_depth = 4\nparallelism = 4\nread_overhead_us = {service_us}\nwrite_overhead_us = {service_us}\n\
         bandwidth_mb_s = 1000000.0\nnomerges = {}\niosched = {{ front_merges = {} }}\n\
         [[phase]]\nname = \"replay\"\nduration_s = 60.0\n\
         [[phase.job]]\nname = \"fio\"\ndevice = \"nullb\"\ntrace = \"{}\"\ntrace_plug_gap_us = 0.0\n",
        nomerges,
        front_merges,
        trace.file_name().unwrap().to_string_lossy()
    );
    let sc = Scenario::from_toml_str(&text, "vmlab", Some(&fixtures())).unwrap();
    let mut sim = Simulation::new(&sc).unwrap();
    sim.run_to_end();
    let cycles = sim.phase_acc(0, "nullb").unwrap().cycles;
    let st = sim.device_stat("nullb").unwrap();
    (st.completed(Dir::Write), st.merged(Dir::Write), cycles)
}

#[test]
fn fixtures_agree_with_their_meta() {
    for (trace, m) in cases() {
        let text = std::fs::read_to_string(&trace).unwrap();
        let count = |ev: &str| text.lines().filter(|l| l.contains(ev)).count() as u64;
        let name = trace.display();
        assert_eq!(count(" block_bio_queue:"), m.queued, "{name}");
        assert_eq!(count(" block_bio_backmerge:"), m.backmerges, "{name}");
        assert_eq!(count(" block_bio_frontmerge:"), m.frontmerges, "{name}");
        // The kernel's own bookkeeping: every bio queued is a request or a merge, and the
        // merge events are the stat file's merged count.
        assert_eq!(m.writes + m.writes_merged, m.queued, "{name}");
        assert_eq!(m.backmerges + m.frontmerges, m.writes_merged, "{name}");
        if m.nomerges == 2 {
            assert_eq!(m.writes_merged, 0, "{name}: nomerges 2 merged");
        }
    }
}

#[test]
fn replayed_guest_traces_merge_like_the_guest_kernel() {
    let mut report = Vec::new();
    let mut off = Vec::new();
    for (trace, m) in cases() {
        let (w, wm) = replay(&trace, &m);
        let name = trace.file_name().unwrap().to_string_lossy().to_string();
        let k = m.writes_merged as f64;
        let dev_pct = if k > 0.0 {
            (wm as f64 - k) / k * 100.0
        } else {
            0.0
        };
        report.push(format!(
            "{name}: kernel {} requests {} merged; simulator {w} requests {wm} merged ({dev_pct:+.1}%)",
            m.writes, m.writes_merged
        ));
        assert_eq!(w + wm, m.queued, "{name}: every bio replayed");
        if m.nomerges == 2 {
            assert_eq!(wm, 0, "{name}");
        } else if dev_pct < BAND_PCT.0 || dev_pct > BAND_PCT.1 {
            off.push(name);
        }
    }
    eprintln!("{}", report.join("\n"));
    assert!(
        off.is_empty(),
        "outside {BAND_PCT:?}%: {off:?}\n{}",
        report.join("\n")
    );
}

/// The simulator's merges against the kernel's, in percent, at L0, L1 and L2. Measured when
/// the fixtures were added and on every run since (the replay is deterministic; last
/// 2026-12-02): from -3.7% (6.1 sequential, L1) to +10.0% (6.1 backwards, L1) over both
/// kernels' 12 traces; the band is that with one point either side. What the replay cannot
/// carry exactly is the guest's completion jitter under TCG (the service time is modelled
/// as the trace's mean, the kernel's has a tail to several ms). The kernel's own merges vary
/// more than this between runs (docs/vmlab.md, "Slow device: merges per level"), so the
/// band pins the simulator where it was measured: a model change that moves it must say so.
const BAND_PCT: (f64, f64) = (-4.7, 11.0);

/// mq-deadline's `front_merges = 0` takes the scheduler's front-merge search away (its
/// `elv_merge` path; the one-hit `last_merge` cache, tried first, still front-merges). On the
/// L1 traces the kernel kept its front merges through that cache, and so does the
/// simulator: the same merges with the search as without it. What the search costs must
/// then be gone at front_merges 0: the same trace replayed at front_merges 1 costs more.
#[test]
fn at_front_merges_0_the_simulator_keeps_the_cached_merges_and_skips_the_search() {
    let mut seen = 0;
    for (trace, m) in cases() {
        if m.nomerges != 0 || m.front_merges != 0 {
            continue;
        }
        seen += 1;
        let name = trace.file_name().unwrap().to_string_lossy().to_string();
        let (w0, wm0, cycles_gated) = replay_at(&trace, 0, 0);
        let (w1, wm1, cycles_searching) = replay_at(&trace, 0, 1);
        assert_eq!(
            (w0, wm0),
            (w1, wm1),
            "{name}: the one-hit cache finds them all"
        );
        assert!(
            cycles_gated < cycles_searching,
            "{name}: front_merges 0 cost {cycles_gated} cycles, 1 cost {cycles_searching}: the search was not skipped"
        );
    }
    assert_eq!(seen, 4, "the L1 fixtures: two kernels, two streams");
}

/// Seed 002 in the guest (vmlab/guest/stacked.sh): `dd bs=2M count=1 iflag=direct` at
/// sector 224 of a dm-stripe with 128 KiB chunks over two null_blk members. The bios dm gets
/// depend on how dd's buffer pages come: in the 6.1 capture two (224 + 3872, 4096 + 224,
/// cut at a chunk boundary), in the 6.12 one two 1 MiB bios (224 + 2048, 2272 + 2048: a bio
/// holds at most 256 pages) that meet inside chunk 8. dm-stripe cuts them at the chunk
/// boundaries the simulator uses (224-256, 256-512, ..., 4096-4320): the 17 pieces of the 2020 dm-devel split thread's example, in
/// the 6.1 capture, 18 in the 6.12 one (the extra cut where the two bios meet). Mapped by the
/// simulator's dm table, the kernel's own top bios must give exactly the kernel's member
/// bios, member by member, in order.
#[test]
fn guest_dm_stripe_split_matches_the_simulator() {
    for (file, want_pieces) in [
        ("split/6.1_dm_stripe.txt", 17),
        ("split/6.12_dm_stripe.txt", 18),
    ] {
        let text = std::fs::read_to_string(fixtures().join(file)).unwrap();
        let queued: Vec<_> = text
            .lines()
            .filter_map(|l| parse_event(l).ok())
            .filter(|e| e.kind == EventKind::Queue)
            .collect();
        let top = queued[0].dev.unwrap();
        let mut members: Vec<(u32, u32)> = queued
            .iter()
            .filter_map(|e| e.dev)
            .filter(|d| *d != top)
            .collect();
        members.sort();
        members.dedup();
        assert_eq!(members.len(), 2, "{file}: two stripe members");
        let top_bios: Vec<(u64, u32)> = queued
            .iter()
            .filter(|e| e.dev == Some(top))
            .map(|e| e.extent.unwrap())
            .collect();
        // Together the top bios are the read from the 2020 dm-devel split thread: 2 MiB from sector 224.
        assert_eq!(top_bios[0].0, 224, "{file}");
        assert_eq!(
            top_bios.iter().map(|b| b.1 as u64).sum::<u64>(),
            4096,
            "{file}"
        );
        let kernel: Vec<(usize, u64, u32)> = queued
            .iter()
            .filter(|e| e.dev != Some(top))
            .map(|e| {
                let m = members.iter().position(|d| Some(*d) == e.dev).unwrap();
                let (s, n) = e.extent.unwrap();
                (m, s, n)
            })
            .collect();

        let t = DmTable {
            stripe: true,
            chunk_sectors: 256,
            member_sectors: vec![1024 * 2048, 1024 * 2048],
        };
        let mut sim = Vec::new();
        let mut pieces = Vec::new();
        for &(sector, nr) in &top_bios {
            t.map(sector, nr, &mut pieces);
            sim.extend(
                pieces
                    .iter()
                    .map(|p| (p.member, p.member_sector, p.nr_sectors)),
            );
        }
        assert_eq!(kernel.len(), want_pieces, "{file}: {kernel:?}");
        assert_eq!(sim, kernel, "{file}");
    }
}
