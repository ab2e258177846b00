//! The simulator's model checked against the kernel rules in DESIGN.md, the kernel's own
//! measurements and the seeds. Every test is quick in a debug build.

use mergetune_daemon::controller::{Controller, KernelDefault};
use mergetune_kernel::blockfs::{BlockFs, Sysfs};
use mergetune_kernel::trace::Dir;
use mergetune_kernel::tunable::Tunable;
use mergetune_logic::decision::Decision;
use mergetune_logic::decision::DecisionKind;
use mergetune_sim::engine::BioSpec;
use mergetune_sim::engine::DmTable;
use mergetune_sim::engine::Simulation;
use mergetune_sim::runner::run_scenario;
use mergetune_sim::scenario::Scenario;
use std::path::Path;

fn scenario(text: &str) -> Scenario {
    Scenario::from_toml_str(text, "test", None).unwrap()
}

fn one_device(sched: &str, nomerges: u8, queue_depth: u32, extra: &str) -> Simulation {
    let text = format!(
        "[[device]]\nname = \"sda\"\nkind = \"ssd\"\nscheduler = \"{sched}\"\n\
         nomerges = {nomerges}\nqueue_depth = {queue_depth}\n{extra}\n\
         [[phase]]\nname = \"p\"\nduration_s = 1.0\n"
    );
    Simulation::new(&scenario(&text)).unwrap()
}

fn w(sector: u64) -> BioSpec {
    BioSpec {
        dir: Dir::Write,
        sector,
        nr_sectors: 8,
    }
}

/// Merges on a crafted stream: `busy` first occupies the only tag with a far-away read so
/// that the following bios wait in the scheduler.
fn merges(sched: &str, nomerges: u8, extra: &str, busy: bool, batches: &[&[BioSpec]]) -> u64 {
    let mut sim = one_device(sched, nomerges, 1, extra);
    if busy {
        sim.submit_plugged(
            "sda",
            &[BioSpec {
                dir: Dir::Read,
                sector: 50_000_000,
                nr_sectors: 8,
            }],
        )
        .unwrap();
    }
    for b in batches {
        sim.submit_plugged("sda", b).unwrap();
    }
    sim.run_to_end();
    let st = sim.device_stat("sda").unwrap();
    assert_eq!(st.in_flight(), 0);
    st.merged(Dir::Write)
}

/// (case, scheduler, extra tunables, tag busy first, bio batches, merges at nomerges 0/1/2)
type Case<'a> = (
    &'a str,
    &'a str,
    &'a str,
    bool,
    &'a [&'a [BioSpec]],
    [u64; 3],
);

#[test]
fn nomerges_semantics_table() {
    // (case, scheduler, extra tunables, [merges at nomerges 0, 1, 2])
    let plug: &[&[BioSpec]] = &[&[w(0), w(8)]];
    let one_hit: &[&[BioSpec]] = &[&[w(0)], &[w(8)]];
    let back: &[&[BioSpec]] = &[&[w(0)], &[w(1000)], &[w(1008)]];
    let front: &[&[BioSpec]] = &[&[w(0)], &[w(1000)], &[w(992)]];
    let no_fm = "[device.iosched]\nfront_merges = 0";
    let cases: Vec<Case> = vec![
        ("plug", "mq-deadline", "", false, plug, [1, 1, 0]),
        ("plug", "none", "", false, plug, [1, 1, 0]),
        ("one-hit", "mq-deadline", "", true, one_hit, [1, 1, 0]),
        ("one-hit", "none", "", true, one_hit, [1, 1, 0]),
        ("back (hash)", "mq-deadline", "", true, back, [1, 0, 0]),
        ("back (hash)", "none", "", true, back, [1, 1, 0]),
        ("front", "mq-deadline", "", true, front, [1, 0, 0]),
        ("front", "mq-deadline", no_fm, true, front, [0, 0, 0]),
        ("front", "none", "", true, front, [1, 1, 0]),
        // Without tag pressure nothing waits, so only the plug can merge.
        (
            "back, idle device",
            "mq-deadline",
            "",
            false,
            one_hit,
            [0, 0, 0],
        ),
    ];
    let mut table = String::new();
    for (case, sched, extra, busy, stream, want) in cases {
        let got: Vec<u64> = (0..3)
            .map(|n| merges(sched, n, extra, busy, stream))
            .collect();
        table.push_str(&format!("{case:<18} {sched:<12} {extra:<30} {got:?}\n"));
        assert_eq!(got, want, "{case} under {sched} {extra}\n{table}");
    }
    println!("{table}");
}

#[test]
fn request_size_limits_stop_merging() {
    // max_sectors_kb = 8: two 4 KiB bios fit, a third does not.
    let mut sim = one_device("none", 0, 1, "max_sectors_kb = 8");
    sim.submit_plugged("sda", &[w(0), w(8), w(16)]).unwrap();
    sim.run_to_end();
    let st = sim.device_stat("sda").unwrap();
    assert_eq!((st.completed(Dir::Write), st.merged(Dir::Write)), (2, 1));
    let mut sim = one_device("none", 0, 1, "max_segments = 2");
    sim.submit_plugged("sda", &[w(0), w(8), w(16), w(24)])
        .unwrap();
    sim.run_to_end();
    let st = sim.device_stat("sda").unwrap();
    assert_eq!((st.completed(Dir::Write), st.merged(Dir::Write)), (2, 2));
}

fn fio_job(pattern: &str, batch: u32, nomerges: u8, rw: &str) -> (u64, u64) {
    fio_job_c(pattern, batch, batch, nomerges, rw)
}

fn fio_job_c(pattern: &str, batch: u32, complete: u32, nomerges: u8, rw: &str) -> (u64, u64) {
    // A loop device: tags 128, mq-deadline; fio iodepth 64, 4 KiB, 32 MiB.
    let read = if rw == "read" { 100.0 } else { 0.0 };
    let text = format!(
        "[[device]]\nname = \"sda\"\nkind = \"ssd\"\nscheduler = \"mq-deadline\"\n\
         queue_depth = 128\nnomerges = {nomerges}\n\
         [[phase]]\nname = \"fio\"\nduration_s = 5.0\n\
         [[phase.job]]\nname = \"f\"\ndevice = \"sda\"\npattern = \"{pattern}\"\n\
         read_percent = {read}\nblock_size_kb = 4\niodepth = 64\nbatch = {batch}\n\
         batch_complete = {complete}\n\
         io_size_mb = 32\nsize_mb = 512\n"
    );
    let mut sim = Simulation::new(&scenario(&text)).unwrap();
    sim.run_to_end();
    let st = sim.device_stat("sda").unwrap();
    let d = if rw == "read" { Dir::Read } else { Dir::Write };
    (st.completed(d), st.merged(d))
}

#[test]
fn kernel_fio_jobs_merge_as_measured() {
    // Kernel 6.18: 128 writes + 8,064 merged at nomerges 0 and 1; 8,192 + 0 at 2, exact on
    // every run: pinned on the kernel by real_kernel_facts (docs/testing.md, "The figures
    // they pin"), and the captured 4 MiB run of the same job
    // (tests/fixtures/trace_seq_batched_write.meta.toml) has the same 63 merges per batch of
    // 64 (16 requests, 1,008 merged).
    let fixture: toml::Table = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/trace_seq_batched_write.meta.toml"),
    )
    .unwrap()
    .parse()
    .unwrap();
    let delta = |k: &str| fixture["stat_delta"][k].as_integer().unwrap() as u64;
    assert_eq!((delta("writes"), delta("writes_merged")), (16, 1008));
    for rw in ["write", "read"] {
        for n in [0u8, 1] {
            let (done, merged) = fio_job("sequential", 64, n, rw);
            assert_eq!(done + merged, 8192);
            assert_eq!((done, merged), (128, 8064), "{rw} nomerges={n}");
            // The fixture's ratio, per request.
            assert_eq!(merged * delta("writes"), delta("writes_merged") * done);
        }
        assert_eq!(fio_job("sequential", 64, 2, rw), (8192, 0));
        // Unbatched and random jobs: about no merges.
        let (done, merged) = fio_job("sequential", 1, 0, rw);
        assert!(merged * 100 <= done + merged, "unbatched {rw}: {merged}");
        let (done, merged) = fio_job("random", 1, 0, rw);
        assert!(merged * 100 <= done + merged, "random {rw}: {merged}");
        // iodepth_batch_submit=64 alone: only the first batch merges (the kernel gave 63 of
        // 8,192 in a hand run, docs/design.md; no fixture keeps it, so the test holds the
        // mechanism: some merges, at most one plug's 63).
        let (done, merged) = fio_job_c("sequential", 64, 1, 0, rw);
        assert_eq!(done + merged, 8192, "{rw}");
        assert!((1..=63).contains(&merged), "{rw}: {merged} merged");
    }
}

#[test]
fn seed002_dm_stripe_splits_at_chunk_boundaries() {
    // 128 KiB chunks = 256 sectors, 2 members; a 2 MiB read at sector 224.
    let t = DmTable {
        stripe: true,
        chunk_sectors: 256,
        member_sectors: vec![1 << 30, 1 << 30],
    };
    let mut pieces = Vec::new();
    t.map(224, 4096, &mut pieces);
    let bounds: Vec<(u64, u64)> = pieces
        .iter()
        .map(|p| (p.dm_sector, p.dm_sector + p.nr_sectors as u64))
        .collect();
    assert_eq!(bounds[0], (224, 256));
    assert_eq!(bounds[1], (256, 512));
    assert_eq!(bounds[2], (512, 768));
    assert_eq!(*bounds.last().unwrap(), (4096, 4320));
    assert_eq!(bounds.len(), 17);
    for w in bounds.windows(2) {
        assert_eq!(w[0].1, w[1].0);
        assert_eq!(w[1].0 % 256, 0);
    }
    // Alternating members; chunk c lands at (c / 2) * 256 on member c % 2.
    assert_eq!((pieces[0].member, pieces[0].member_sector), (0, 224));
    assert_eq!((pieces[1].member, pieces[1].member_sector), (1, 0));
    assert_eq!((pieces[2].member, pieces[2].member_sector), (0, 256));
    // The blktrace in the seed: Q R 2504 + 1792 split at 2560, 2816, ..., 4096.
    t.map(2504, 1792, &mut pieces);
    let starts: Vec<u64> = pieces.iter().skip(1).map(|p| p.dm_sector).collect();
    assert_eq!(starts, vec![2560, 2816, 3072, 3328, 3584, 3840, 4096]);

    // Through the simulated stack: the dm device counts one bio, the members the pieces.
    let text = "[[device]]\nname = \"sdb\"\nkind = \"ssd\"\n\
                [[device]]\nname = \"sdc\"\nkind = \"ssd\"\n\
                [[device]]\nname = \"dm-0\"\nkind = \"dm-stripe\"\nmembers = [\"sdb\", \"sdc\"]\n\
                chunk_kb = 128\n[[phase]]\nname = \"p\"\nduration_s = 1.0\n";
    let mut sim = Simulation::new(&scenario(text)).unwrap();
    sim.submit_plugged(
        "dm-0",
        &[BioSpec {
            dir: Dir::Read,
            sector: 224,
            nr_sectors: 4096,
        }],
    )
    .unwrap();
    sim.run_to_end();
    let dm = sim.device_stat("dm-0").unwrap();
    let b = sim.device_stat("sdb").unwrap();
    let c = sim.device_stat("sdc").unwrap();
    assert_eq!((dm.completed(Dir::Read), dm.merged(Dir::Read)), (1, 0));
    assert_eq!(dm.sectors(Dir::Read), 4096);
    assert_eq!(b.sectors(Dir::Read) + c.sectors(Dir::Read), 4096);
    assert_eq!(
        b.completed(Dir::Read) + b.merged(Dir::Read) + c.completed(Dir::Read) + c.merged(Dir::Read),
        17
    );
    assert_eq!(sim.list_dir("dm-0", "slaves").unwrap(), vec!["sdb", "sdc"]);
    assert_eq!(sim.list_dir("sdb", "holders").unwrap(), vec!["dm-0"]);
}

fn shipped(name: &str) -> Scenario {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("config/scenarios")
        .join(name);
    Scenario::load_file(&path).unwrap()
}

fn run_off(sc: &Scenario) -> mergetune_sim::report::Report {
    let mut sim = Simulation::new(sc).unwrap();
    let mut c = KernelDefault { interval_ms: 1000 };
    run_scenario(&mut sim, &mut c, "off", &mut |_, _| {})
}

/// Shipped scenario `name`, its first phase cut to `secs`, with the `iosched` tunables set
/// on its first device, run with the kernel's defaults.
fn shipped_off(name: &str, secs: f64, iosched: &[(&str, u64)]) -> mergetune_sim::report::Report {
    let mut sc = shipped(name);
    sc.phases[0].duration_s = secs;
    for (tunable, value) in iosched {
        sc.devices[0].iosched.insert((*tunable).into(), *value);
    }
    run_off(&sc)
}

#[test]
fn seed003_larger_sync_slice_gives_reads_more() {
    let share = |slice_sync: u64| {
        let r = shipped_off("seed003_spool.toml", 10.0, &[("slice_sync", slice_sync)]);
        let d = &r.phases[0].devices[0];
        (d.read.mb_per_s, d.write.mb_per_s)
    };
    let (r100, w100) = share(100);
    let (r300, w300) = share(300);
    println!("slice_sync 100: read {r100:.1} MB/s write {w100:.1} MB/s");
    println!("slice_sync 300: read {r300:.1} MB/s write {w300:.1} MB/s");
    assert!(r100 / (r100 + w100) < r300 / (r300 + w300));
    assert!(r300 > r100 && w300 < w100);
}

#[test]
fn seed001_idling_bounds_readers_max_latency() {
    let lat = |slice_idle: u64| {
        let r = shipped_off(
            "seed001_readers_vs_writer.toml",
            20.0,
            &[
                ("slice_idle", slice_idle),
                ("low_latency", u64::from(slice_idle > 0)),
            ],
        );
        let d = &r.phases[0].devices[0];
        (
            d.read.lat_max_us / 1000.0,
            d.read.lat_p99_us / 1000.0,
            d.read.iops,
        )
    };
    let (max_idle, p99_idle, iops_idle) = lat(8);
    let (max_noidle, p99_noidle, iops_noidle) = lat(0);
    println!("slice_idle 8: readers max {max_idle:.0} ms p99 {p99_idle:.0} ms {iops_idle:.0} IOPS");
    println!(
        "slice_idle 0: readers max {max_noidle:.0} ms p99 {p99_noidle:.0} ms {iops_noidle:.0} IOPS"
    );
    assert!(max_idle < max_noidle);
}

fn cycles_per_io(nomerges: u8) -> f64 {
    let text = format!(
        "cost_profile = \"lkml-2008\"\n\
         [[device]]\nname = \"sda\"\nkind = \"ssd\"\nscheduler = \"mq-deadline\"\n\
         queue_depth = 32\nparallelism = 8\nnomerges = {nomerges}\n\
         [[phase]]\nname = \"p\"\nduration_s = 0.5\n\
         [[phase.job]]\nname = \"r\"\ndevice = \"sda\"\npattern = \"random\"\n\
         read_percent = 100.0\nblock_size_kb = 4\niodepth = 32\n"
    );
    let r = run_off(&scenario(&text));
    assert_eq!(r.phases[0].devices[0].read.merged, 0);
    r.phases[0].devices[0].cycles_per_io
}

#[test]
fn cost_model_random_4k_qd32_saves_20_to_25_percent_at_nomerges_2() {
    let c0 = cycles_per_io(0);
    let c2 = cycles_per_io(2);
    let saving = (c0 - c2) / c0 * 100.0;
    println!("cycles/IO: nomerges=0 {c0:.0}, nomerges=2 {c2:.0}, saving {saving:.1}%");
    assert!((20.0..=25.0).contains(&saving), "{saving}");
    let m = mergetune_sim::cost::CostModel::default();
    assert!(m.plug_merged_bio_cycles() < m.unmerged_bio_cycles(2));
}

/// A controller that turns merging off everywhere at its first tick, through BlockFs.
struct NoMergesNow(bool);
impl Controller for NoMergesNow {
    fn interval_ms(&self) -> u64 {
        100
    }
    fn tick(&mut self, now_ms: u64, fs: &mut dyn BlockFs) -> Vec<Decision> {
        if self.0 {
            return Vec::new();
        }
        self.0 = true;
        fs.write_tunable("sda", Tunable::Nomerges, "2").unwrap();
        vec![crate::decisions::applied(
            now_ms,
            "sda",
            DecisionKind::Disable,
            crate::decisions::nomerges("0", "2"),
        )]
    }
    fn restore(&mut self, _: u64, _: &mut dyn BlockFs) -> Vec<Decision> {
        Vec::new()
    }
}

#[test]
fn a_controller_writing_nomerges_changes_merging() {
    let sc = shipped("seed004_batched_aio.toml");
    let mut sc1 = sc.clone();
    sc1.phases.truncate(1);
    sc1.phases[0].duration_s = 0.5;
    let off = run_off(&sc1);
    assert!(off.phases[0].devices[0].write.merge_percent > 95.0);
    let mut sim = Simulation::new(&sc1).unwrap();
    let r = run_scenario(&mut sim, &mut NoMergesNow(false), "test", &mut |_, _| {});
    assert_eq!(r.phases[0].devices[0].write.merged, 0);
    assert_eq!(r.decisions.len(), 1);
    assert_eq!(r.nomerges_timeline.last().unwrap().value, 2);
}

#[test]
fn static_policy_pins_bottom_devices_only() {
    let mut sc = shipped("seed002_dm_stripe_oltp.toml");
    sc.phases.truncate(1);
    sc.phases[0].duration_s = 0.2;
    let mut sim = Simulation::new(&sc).unwrap();
    let mut c = mergetune_sim::runner::Policy::Static(2).controller(Default::default());
    let r = run_scenario(&mut sim, c.as_mut(), "static:2", &mut |_, _| {});
    let mut devs: Vec<&str> = r.decisions.iter().map(|d| d.device.as_str()).collect();
    devs.sort();
    assert_eq!(devs, vec!["sdb", "sdc"]);
    assert_eq!(sim.nomerges("dm-0"), Some(0));
    assert_eq!(sim.nomerges("sdb"), Some(2));
}

#[test]
fn same_seed_same_report() {
    let mut sc = shipped("mix_50_50.toml");
    sc.phases[0].duration_s = 2.0;
    let a = run_off(&sc);
    let b = run_off(&sc);
    assert_eq!(a, b);
    assert_eq!(a.to_json(), b.to_json());
    sc.seed += 1;
    let c = run_off(&sc);
    assert_ne!(a.phases, c.phases);
}
