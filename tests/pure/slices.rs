//! Scheduler slices: favour reads when they starve behind writes, bounded, judged, undone.

use mergetune_kernel::tunable::Tunable;
use mergetune_logic::config::SlicesConfig;
use mergetune_logic::sampler::{Counters, Window};
use mergetune_logic::slices::{SliceState, decide};

/// The tunable of an iosched file name.
fn tunable(name: &str) -> Tunable {
    Tunable::from_rel_path(&format!("queue/iosched/{name}")).unwrap()
}

/// A 2 s window: `r` reads taking `r_ms` each, `w` writes taking `w_ms` each.
fn win(r: u64, r_ms: u64, w: u64, w_ms: u64) -> Window {
    Window {
        counters: Counters {
            reads_completed: r,
            read_ms: r * r_ms,
            writes_completed: w,
            write_ms: w * w_ms,
            ..Default::default()
        },
        duration_ms: 2000,
        sensed: None,
    }
}

struct Dev {
    state: SliceState,
    values: Vec<(&'static str, u64)>,
    owned: Vec<&'static str>,
    sched: &'static str,
    t: u64,
}

impl Dev {
    fn new(sched: &'static str, values: &[(&'static str, u64)]) -> Dev {
        Dev {
            state: SliceState::default(),
            values: values.to_vec(),
            owned: Vec::new(),
            sched,
            t: 0,
        }
    }
    /// An mq-deadline device at these two values (the kernel's are 2 and 500).
    fn mq_deadline(writes_starved: u64, read_expire: u64) -> Dev {
        Dev::new(
            "mq-deadline",
            &[
                ("writes_starved", writes_starved),
                ("read_expire", read_expire),
            ],
        )
    }
    /// Feeds windows; applies every change to `values`; returns the changes' kinds.
    fn feed(&mut self, w: Window, n: usize) -> Vec<(String, &'static str, u64, u64)> {
        let cfg = SlicesConfig::default();
        let mut out = Vec::new();
        for _ in 0..n {
            self.t += 2000;
            let values: Vec<(Tunable, u64)> =
                self.values.iter().map(|(n, v)| (tunable(n), *v)).collect();
            let owned: Vec<Tunable> = self.owned.iter().map(|n| tunable(n)).collect();
            let (s, ch) = decide(
                &self.state,
                &w,
                self.sched.parse().unwrap(),
                &values,
                &owned,
                &cfg,
                self.t,
            );
            self.state = s;
            if let Some(ch) = ch {
                for v in &mut self.values {
                    if tunable(v.0) == ch.tunable {
                        assert_eq!(v.1, ch.from, "{}", ch.reason);
                        v.1 = ch.to;
                    }
                }
                out.push((ch.reason.clone(), ch.kind.as_str(), ch.from, ch.to));
            }
        }
        out
    }
}

#[test]
fn starving_reads_get_one_step_after_three_windows() {
    let mut d = Dev::mq_deadline(2, 500);
    let out = d.feed(win(50, 160, 200, 40), 2);
    assert!(out.is_empty());
    let out = d.feed(win(50, 160, 200, 40), 1);
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].1, out[0].2, out[0].3), ("favour_reads", 2, 3));
    assert!(
        out[0].0.contains("160.0 ms vs writes 40.0 ms"),
        "{}",
        out[0].0
    );
}

#[test]
fn a_step_that_helps_is_followed_by_more_up_to_the_bounds() {
    let mut d = Dev::mq_deadline(7, 500);
    // Each step cuts the reads' time per request by a third (10x, 6.7x, 4.4x the
    // writes'): writes_starved to its max (8), then read_expire halves.
    let mut kinds = Vec::new();
    for read_ms in [400, 266, 177] {
        let out = d.feed(win(50, read_ms, 200, 40), 3);
        kinds.extend(out.iter().map(|o| (o.1, o.2, o.3)));
    }
    assert_eq!(
        kinds,
        vec![
            ("favour_reads", 7, 8),
            ("favour_reads", 500, 250),
            ("favour_reads", 250, 125)
        ]
    );
    let we = d.values.iter().find(|v| v.0 == "read_expire").unwrap().1;
    assert!(we >= 100, "read_expire never under its floor: {we}");
}

#[test]
fn a_step_that_does_not_help_is_undone_and_no_more_are_taken() {
    let mut d = Dev::mq_deadline(2, 500);
    let out = d.feed(win(50, 160, 200, 40), 3);
    assert_eq!((out[0].2, out[0].3), (2, 3));
    let out = d.feed(win(50, 158, 200, 40), 3);
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!((out[0].1, out[0].2, out[0].3), ("undo", 3, 2));
    assert!(out[0].0.contains("did not pay"), "{}", out[0].0);
    assert!(
        d.feed(win(50, 160, 200, 40), 30).is_empty(),
        "stalled while the mix lasts"
    );
}

#[test]
fn the_operators_values_are_never_touched() {
    let mut d = Dev::mq_deadline(4, 500);
    d.owned = vec!["writes_starved"];
    let out = d.feed(win(50, 160, 200, 40), 3);
    // writes_starved is the operator's: the step goes to read_expire.
    assert_eq!((out[0].2, out[0].3), (500, 250), "{out:?}");
    d.owned = vec!["writes_starved", "read_expire"];
    let mut d2 = Dev::mq_deadline(4, 300);
    d2.owned = vec!["writes_starved", "read_expire"];
    assert!(d2.feed(win(50, 160, 200, 40), 20).is_empty());
}

#[test]
fn steps_are_undone_when_the_mix_ends_and_balanced_work_is_left_alone() {
    let mut d = Dev::new("bfq", &[("timeout_sync", 125)]);
    let out = d.feed(win(50, 160, 200, 40), 3);
    assert_eq!((out[0].1, out[0].2, out[0].3), ("favour_reads", 125, 187));
    // Writes stop: the step is undone after three windows.
    let out = d.feed(win(300, 5, 0, 0), 3);
    assert_eq!(
        (out[0].1, out[0].2, out[0].3),
        ("relax", 187, 125),
        "{out:?}"
    );
    // Reads and writes alike: nothing to do, ever.
    let mut e = Dev::mq_deadline(2, 500);
    assert!(e.feed(win(100, 10, 100, 10), 50).is_empty());
    // Too few requests to call it a mix: nothing either.
    let mut f = Dev::mq_deadline(2, 500);
    assert!(f.feed(win(5, 500, 200, 10), 50).is_empty());
}

/// `win`, with writes of `kib` KiB each.
fn win_sized(r: u64, r_ms: u64, w: u64, w_ms: u64, kib: u64) -> Window {
    let mut x = win(r, r_ms, w, w_ms);
    x.counters.sectors_written = w * kib * 2;
    x
}

#[test]
fn a_step_that_costs_writes_more_than_it_gives_reads_is_undone() {
    let mut d = Dev::mq_deadline(2, 500);
    // 200 writes of 512 KiB per 2 s window: 52 MB/s.
    let out = d.feed(win_sized(50, 160, 200, 40, 512), 3);
    assert_eq!((out[0].1, out[0].2, out[0].3), ("favour_reads", 2, 3));
    // Reads 12% faster, but writes lose 30% of their throughput: not worth it.
    let out = d.feed(win_sized(50, 141, 140, 40, 512), 3);
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!((out[0].1, out[0].2, out[0].3), ("undo", 3, 2));
    assert!(
        out[0].0.contains("-12%") && out[0].0.contains("-30%"),
        "{}",
        out[0].0
    );
}

#[test]
fn a_step_that_pays_stays_and_says_why() {
    let mut d = Dev::mq_deadline(2, 500);
    d.feed(win_sized(50, 160, 200, 40, 512), 3);
    // Reads 25% faster for 10% of the writes' throughput; still 3x the writes': the next
    // step follows in the same window as the judgement.
    let out = d.feed(win_sized(50, 120, 180, 40, 512), 3);
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!((out[0].1, out[0].2, out[0].3), ("favour_reads", 3, 4));
    let kept = d.state.kept.clone().expect("a judgement for the log");
    assert!(kept.contains("kept") && kept.contains("-25%"), "{kept}");
}

#[test]
fn fast_reads_are_not_starving_whatever_the_ratio() {
    let mut d = Dev::mq_deadline(2, 500);
    // An SSD with a write cache: reads 6 ms, writes 1 ms per request. 6x, but nobody waits.
    assert!(d.feed(win(500, 6, 2000, 1), 30).is_empty());
}
