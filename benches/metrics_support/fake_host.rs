//! The fake host the metrics benches run the release daemon on: a sysfs tree of block
//! queues and a `/proc/diskstats` that a thread rewrites (by rename, so a reader never sees
//! half a file) until the host is dropped; and the settings every such bench reads. The
//! thread and the atomic write are the tests' fake tree's (tests/support/fakesys.rs).

use super::fakesys::{Ticker, write_atomic};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The queue of an mq-deadline SSD whose merges are all on: each file under `queue/`.
pub const QUEUE: &[(&str, &str)] = &[
    ("nomerges", "0"),
    ("scheduler", "none [mq-deadline] kyber"),
    ("rotational", "0"),
];

pub struct FakeHost {
    pub sys: PathBuf,
    pub proc_: PathBuf,
    /// Rewrites `proc/diskstats` until the host is dropped.
    _kernel: Ticker,
}

impl FakeHost {
    /// Under `root`: `sys/block/NAME/queue/` with the files `queue` for each of `names`,
    /// and `proc/diskstats` as `diskstats(tick)`: tick 0 now, the next every `every`.
    pub fn start(
        root: &Path,
        names: impl Iterator<Item = String>,
        queue: &[(&str, &str)],
        every: Duration,
        diskstats: impl Fn(u64) -> String + Send + 'static,
    ) -> FakeHost {
        let (sys, proc_) = (root.join("sys"), root.join("proc"));
        std::fs::create_dir_all(&proc_).unwrap();
        for name in names {
            let q = sys.join(format!("block/{name}/queue"));
            for (file, value) in queue {
                let path = q.join(file);
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(path, format!("{value}\n")).unwrap();
            }
        }
        let path = proc_.join("diskstats");
        write_atomic(&path, &diskstats(0));
        let mut tick = 1;
        let kernel = Ticker::every(every, move || {
            write_atomic(&path, &diskstats(tick));
            tick += 1;
        });
        FakeHost {
            sys,
            proc_,
            _kernel: kernel,
        }
    }
}

/// The environment's `key`, parsed, or `default`.
pub fn env_or<T: std::str::FromStr>(key: &str, default: T) -> T {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The daemon under test: `$MERGETUNE_BIN`, or this tree's release build.
pub fn release_bin() -> String {
    std::env::var("MERGETUNE_BIN").unwrap_or_else(|_| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("target/release/mergetune")
            .display()
            .to_string()
    })
}

/// The diskstats of `n` busy disks at `tick`, the `i`th named `name(i)`: reads and writes
/// moving at their own rates, with some merges.
pub fn busy_diskstats(n: usize, tick: u64, name: impl Fn(usize) -> String) -> String {
    let mut s = String::new();
    for i in 0..n {
        let r = 1000 + tick * (997 + i as u64);
        let w = 2000 + tick * 1013;
        s.push_str(&format!(
            "   8 {:>7} {} {r} {} {} 4000 {w} {} {} 9000 0 3000 13000 10 0 80 1 50 2\n",
            i * 16,
            name(i),
            r / 10,
            r * 8,
            w / 5,
            w * 8
        ));
    }
    s
}
