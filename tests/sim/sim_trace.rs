//! Trace replay: parsing the tracing filesystem's and blkparse's text, clear errors on bad
//! lines, and replaying the kernel's own captured fio runs to the kernel's merge counts.

use mergetune_kernel::trace::Dir;
use mergetune_kernel::trace::parse_trace;
use mergetune_sim::engine::Simulation;
use mergetune_sim::scenario::Scenario;
use std::path::Path;

fn fixture(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    std::fs::read_to_string(p).unwrap()
}

#[test]
fn parses_tracefs_lines() {
    let text = "# tracer: nop\n\
        fio-8916 [001] ..... 344.612387: block_bio_queue: 7,0 WS 0 + 8 [fio]\n\
        fio-8916 [001] ..... 344.612388: block_bio_backmerge: 7,0 WS 8 + 8 [fio]\n\
        fio-8916 [001] ..... 344.612389: block_bio_queue: 7,0 WS 8 + 8 [fio]\n\
        kworker/1:1-77 [001] d.... 344.700000: block_bio_queue: 7,0 R 4096 + 256 [kworker/1:1]\n\
        fio-8916 [001] ..... 344.800000: block_bio_queue: 7,0 FWS [fio]\n";
    let bios = parse_trace(text, 10_000).unwrap();
    assert_eq!(bios.len(), 3);
    assert_eq!(
        (bios[0].t_ns, bios[0].sector, bios[0].nr_sectors),
        (0, 0, 8)
    );
    assert_eq!(bios[0].dir, Dir::Write);
    assert_eq!(bios[1].t_ns, 2_000);
    assert!(bios[0].plug_start && !bios[1].plug_start);
    assert_eq!(
        (bios[2].dir, bios[2].sector, bios[2].stream),
        (Dir::Read, 4096, 77)
    );
    assert!(bios[2].plug_start);
}

#[test]
fn parses_blkparse_q_events() {
    let text = "\
253,2 17 1 0.000000000 2176 Q R 224 + 4096 [xfs_io]\n\
253,2 17 2 0.000003000 2176 X R 224 / 256 [xfs_io]\n\
  8,0    3        1     0.000081358  2176  Q   R 2504 + 1792 [xfs_io]\n\
  8,0    3        2     0.000090000  2176  P   N [xfs_io]\n\
  8,0    3        3     0.000091000  2176  Q  WS 10 + 8 [xfs_io]\n\
  8,0    3        4     0.000092000  2176  Q  WS 18 + 8 [xfs_io]\n\
  8,0    3        5     0.000093000  2176  U   N [xfs_io] 1\n\
CPU3 (8,0):\n Reads Queued: 2, 2MiB\n";
    let bios = parse_trace(text, 0).unwrap();
    assert_eq!(bios.len(), 4);
    assert_eq!((bios[0].sector, bios[0].nr_sectors), (224, 4096));
    assert_eq!((bios[1].t_ns, bios[1].sector), (81_358, 2504));
    assert!(bios[2].plug_start && !bios[3].plug_start);
}

#[test]
fn bad_lines_name_their_line_number() {
    let cases = [
        (
            "fio-1 [001] ..... 1.0: block_bio_queue: 7,0 WS abc + 8 [fio]\n",
            1,
            "sector",
        ),
        (
            "# c\n\nfio-1 [001] ..... 1.0: block_bio_queue: 7,0 WS 0 - 8 [fio]\n",
            3,
            "SECTOR",
        ),
        (
            "fio-1 [001] ..... 1.0: block_bio_queue: 7,0 QQ 0 + 8 [fio]\n",
            1,
            "RWBS",
        ),
        (
            "fio-1 [001] ..... nonsense: block_bio_queue: 7,0 W 0 + 8\n",
            1,
            "timestamp",
        ),
        (
            "fio-1 [001] ..... 1.0: block_bio_queue: 7,0 W 0 + 8 [fio]\nhello world\n",
            2,
            "not a",
        ),
        ("8,0 3 1 x.y 2176 Q R 0 + 8 [a]\n", 1, "time"),
        (
            "fio-1 [001] ..... 1.0: block_bio_queue: 7,0 W 0 + 99999999999 [fio]\n",
            1,
            "count",
        ),
    ];
    for (text, line, word) in cases {
        let e = parse_trace(text, 0).unwrap_err();
        assert_eq!(e.line, line, "{text:?}: {e}");
        let msg = e.to_string();
        assert!(msg.starts_with(&format!("line {line}:")), "{msg}");
        assert!(msg.contains(word), "{msg}");
    }
}

/// Replays a captured fixture on a loop-like device (mq-deadline, 128 tags).
fn replay(trace: &str) -> (u64, u64, u64, u64) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let text = format!(
        "[[device]]\nname = \"loop0\"\nkind = \"ssd\"\nscheduler = \"mq-deadline\"\n\
         queue_depth = 128\n[[phase]]\nname = \"replay\"\nduration_s = 5.0\n\
         [[phase.job]]\nname = \"fio\"\ndevice = \"loop0\"\ntrace = \"{trace}\"\n"
    );
    let sc = Scenario::from_toml_str(&text, "test", Some(&dir)).unwrap();
    let mut sim = Simulation::new(&sc).unwrap();
    sim.run_to_end();
    let st = sim.device_stat("loop0").unwrap();
    (
        st.completed(Dir::Read),
        st.merged(Dir::Read),
        st.completed(Dir::Write),
        st.merged(Dir::Write),
    )
}

fn within_5_percent(got: u64, want: u64) -> bool {
    (got as f64 - want as f64).abs() <= want as f64 * 0.05
}

#[test]
fn replayed_kernel_traces_give_the_kernels_merge_counts() {
    // Kernel stat deltas from the same runs (tests/fixtures/*.meta.toml).
    let seq = fixture("trace_seq_batched_write.txt");
    assert_eq!(parse_trace(&seq, 10_000).unwrap().len(), 1024);
    let (r, rm, w, wm) = replay("trace_seq_batched_write.txt");
    println!("seq batched write: writes {w} merged {wm} (kernel 16 / 1008)");
    assert_eq!((r, rm), (0, 0));
    assert!(within_5_percent(wm, 1008), "{wm}");
    assert_eq!(w + wm, 1024);
    let (r, rm, _, _) = replay("trace_rand_read.txt");
    println!("random read: reads {r} merged {rm} (kernel 1024 / 0)");
    // Replayed without plug markers, close random bios share a plug: a stray adjacent
    // pair may merge (the kernel shows the same for batched random I/O).
    assert_eq!(r + rm, 1024);
    assert!(rm <= 5, "{rm}");
    let (r, rm, w, wm) = replay("trace_mixed.txt");
    println!("mixed: reads {r} merged {rm}, writes {w} merged {wm} (kernel 1024/0, 16/1008)");
    assert!(rm <= 5, "{rm}");
    assert_eq!(r + rm, 1024);
    assert!(within_5_percent(wm, 1008), "{wm}");
}

#[test]
fn a_bad_trace_in_a_scenario_is_an_error_naming_the_key_and_line() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("bad.txt"),
        "x [001] ..... 1.0: block_bio_queue: 7,0\n",
    )
    .unwrap();
    let text = "[[device]]\nname = \"sda\"\nkind = \"ssd\"\n[[phase]]\nname = \"p\"\n\
                duration_s = 1.0\n[[phase.job]]\nname = \"t\"\ndevice = \"sda\"\n\
                trace = \"bad.txt\"\n";
    let e = Scenario::from_toml_str(text, "s.toml", Some(dir.path()))
        .unwrap_err()
        .to_string();
    assert!(e.contains("phase[0].job[0].trace"), "{e}");
    assert!(e.contains("line 1"), "{e}");
}
