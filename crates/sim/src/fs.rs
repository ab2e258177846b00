//! `BlockFs` over the simulation: the daemon reads and writes simulated devices exactly as
//! it does `/proc/diskstats` and `/sys/block/<dev>/...`, as strings in the kernel's format.
//! Paths in errors read like `sim:/sys/block/sda/queue/nomerges`.

use super::engine::Simulation;
use super::scenario::{DeviceKind, LISTED, iosched_keys};
use mergetune_kernel::biosense::{TapBatch, TapDrain, TapError, TapParams};
use mergetune_kernel::blockfs::{BioTap, FsError, HostFacts, MergeSampler, Sysfs};
use mergetune_kernel::scheduler::Scheduler;
use mergetune_kernel::tunable::Tunable;

fn path(dev: &str, rel: &str) -> String {
    if rel.is_empty() {
        format!("sim:/sys/block/{dev}")
    } else {
        format!("sim:/sys/block/{dev}/{rel}")
    }
}

fn not_found(dev: &str, rel: &str) -> FsError {
    FsError::NotFound {
        path: path(dev, rel),
    }
}

fn invalid(dev: &str, rel: &str, value: &str) -> FsError {
    FsError::InvalidValue {
        path: path(dev, rel),
        value: value.to_string(),
    }
}

/// Plain files under a request-based device's `queue/`.
const QUEUE_FILES: [&str; 9] = [
    "chunk_sectors",
    "logical_block_size",
    "max_hw_sectors_kb",
    "max_sectors_kb",
    "max_segments",
    "nomerges",
    "nr_requests",
    "rotational",
    "scheduler",
];

impl Simulation {
    fn scheduler_line(&self, d: usize) -> String {
        let dev = &self.devs[d];
        if dev.kind.is_dm() {
            return Scheduler::None.name().into();
        }
        LISTED
            .iter()
            .map(|s| {
                if *s == dev.sched {
                    format!("[{s}]")
                } else {
                    s.to_string()
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn read_dev_attr(&mut self, d: usize, dev: &str, rel: &str) -> Result<String, FsError> {
        let dm = self.devs[d].kind.is_dm();
        if let Some(key) = rel.strip_prefix("queue/iosched/") {
            if dm || !iosched_keys(self.devs[d].sched).contains(&key) {
                return Err(not_found(dev, rel));
            }
            return self.devs[d]
                .tun
                .get(key)
                .map(|v| v.to_string())
                .ok_or_else(|| not_found(dev, rel));
        }
        if rel == "stat" {
            return Ok(mergetune_kernel::diskstats::format_stat_fields(
                &self.stat_of(d),
            ));
        }
        if rel == "queue/scheduler" {
            return Ok(self.scheduler_line(d));
        }
        let x = &self.devs[d];
        let chunk = match self.dm_table(dev) {
            Some(t) if t.stripe => t.chunk_sectors,
            _ => 0,
        };
        let x_nr_requests = if dm { 0 } else { x.queue_depth * 2 };
        Ok(match rel {
            "dev" => format!("{}:{}", x.major, x.minor),
            "size" => x.capacity_sectors.to_string(),
            "ro" | "removable" => "0".into(),
            "dm/name" if dm => x.name.clone(),
            "queue/nomerges" => x.nomerges.to_string(),
            "queue/rotational" => u8::from(x.kind == DeviceKind::Hdd).to_string(),
            "queue/max_sectors_kb" => x.max_sectors_kb.to_string(),
            "queue/max_hw_sectors_kb" => x.max_sectors_kb.max(1280).to_string(),
            "queue/max_segments" => x.max_segments.to_string(),
            "queue/nr_requests" => x_nr_requests.to_string(),
            "queue/logical_block_size" => "512".into(),
            "queue/chunk_sectors" => chunk.to_string(),
            _ => return Err(not_found(dev, rel)),
        })
    }
}

impl Simulation {
    /// Writes any simulated sysfs file a real one could be written through (`nomerges`,
    /// `scheduler`, `max_sectors_kb`, `iosched/*`): the scenario set-up and tests use it;
    /// the daemon goes through [`Sysfs::write_tunable`].
    pub fn write_attr(&mut self, dev: &str, rel: &str, value: &str) -> Result<(), FsError> {
        let d = self.dev_index(dev).ok_or_else(|| not_found(dev, rel))?;
        let v = value.trim();
        let dm = self.devs[d].kind.is_dm();
        match rel {
            "queue/nomerges" => {
                let n: u8 = v.parse().map_err(|_| invalid(dev, rel, value))?;
                if n > 2 {
                    return Err(invalid(dev, rel, value));
                }
                self.set_nomerges(d, n);
                Ok(())
            }
            "queue/scheduler" => {
                if dm {
                    return if v == Scheduler::None.name() {
                        Ok(())
                    } else {
                        Err(invalid(dev, rel, value))
                    };
                }
                let s = v.parse().map_err(|_| invalid(dev, rel, value))?;
                self.set_scheduler(d, s);
                Ok(())
            }
            "queue/max_sectors_kb" if !dm => {
                let n: u32 = v.parse().map_err(|_| invalid(dev, rel, value))?;
                if !(4..=self.devs[d].max_sectors_kb.max(1280)).contains(&n) {
                    return Err(invalid(dev, rel, value));
                }
                self.devs[d].max_sectors_kb = n;
                Ok(())
            }
            _ => {
                if let Some(key) = rel.strip_prefix("queue/iosched/") {
                    if dm || !iosched_keys(self.devs[d].sched).contains(&key) {
                        return Err(not_found(dev, rel));
                    }
                    let n: u64 = v.parse().map_err(|_| invalid(dev, rel, value))?;
                    if self.set_tunable(d, key, n) {
                        return Ok(());
                    }
                    return Err(invalid(dev, rel, value));
                }
                if self.read_dev_attr(d, dev, rel).is_ok() {
                    Err(FsError::PermissionDenied {
                        path: path(dev, rel),
                    })
                } else {
                    Err(not_found(dev, rel))
                }
            }
        }
    }
}

impl Simulation {
    fn tap_dev(&self, dev: &str) -> Result<usize, TapError> {
        self.dev_index(dev).ok_or_else(|| TapError::Io {
            path: path(dev, ""),
            message: "no such device".into(),
        })
    }
}

impl Sysfs for Simulation {
    fn read_diskstats(&mut self) -> Result<Vec<u8>, FsError> {
        let mut out = String::new();
        for d in 0..self.devs.len() {
            let st = self.stat_of(d);
            let dev = &self.devs[d];
            out.push_str(&mergetune_kernel::diskstats::format_diskstats_line(
                &mergetune_kernel::diskstats::DiskStat {
                    major: dev.major,
                    minor: dev.minor,
                    name: dev.name.clone(),
                    fields: st,
                },
            ));
            out.push('\n');
        }
        Ok(out.into_bytes())
    }

    fn list_block_devices(&mut self) -> Result<Vec<String>, FsError> {
        let mut v = self.device_names();
        v.sort();
        Ok(v)
    }

    fn read_attr(&mut self, dev: &str, rel: &str) -> Result<String, FsError> {
        let d = self.dev_index(dev).ok_or_else(|| not_found(dev, rel))?;
        self.read_dev_attr(d, dev, rel)
    }

    fn write_tunable(&mut self, dev: &str, tunable: Tunable, value: &str) -> Result<(), FsError> {
        Simulation::write_attr(self, dev, tunable.rel_path(), value)
    }

    fn list_dir(&mut self, dev: &str, rel: &str) -> Result<Vec<String>, FsError> {
        let Some(d) = self.dev_index(dev) else {
            return Err(not_found(dev, rel));
        };
        let x = &self.devs[d];
        let names = |ids: &[u32]| -> Vec<String> {
            let mut v: Vec<String> = ids
                .iter()
                .map(|&i| self.devs[i as usize].name.clone())
                .collect();
            v.sort();
            v
        };
        Ok(match rel.trim_end_matches('/') {
            "slaves" => names(&x.slaves),
            "holders" => names(&x.holders),
            "queue" => {
                let mut v: Vec<String> = QUEUE_FILES.iter().map(|s| s.to_string()).collect();
                if !x.kind.is_dm() && x.sched != Scheduler::None {
                    v.push("iosched".into());
                    v.sort();
                }
                v
            }
            "queue/iosched" if !x.kind.is_dm() => {
                let mut v: Vec<String> = iosched_keys(x.sched)
                    .iter()
                    .map(|s| s.to_string())
                    .collect();
                v.sort();
                v
            }
            _ => Vec::new(),
        })
    }

    fn attr_exists(&mut self, dev: &str, rel: &str) -> bool {
        let Some(d) = self.dev_index(dev) else {
            return false;
        };
        let dm = self.devs[d].kind.is_dm();
        match rel.trim_end_matches('/') {
            "" | "queue" | "slaves" | "holders" => true,
            "queue/iosched" => !dm && self.devs[d].sched != Scheduler::None,
            "dm" => dm,
            r => self.read_dev_attr(d, dev, r).is_ok(),
        }
    }
}

// The bio tap: the engine records the requests made and issued on a tapped device
// (crates/sim/src/tap.rs), as the kernel's block_getrq and block_rq_issue tracepoints do.
impl BioTap for Simulation {
    fn tap_available(&mut self, dev: &str) -> Result<(), TapError> {
        self.tap_dev(dev).map(|_| ())
    }

    fn tap_open(&mut self, dev: &str, _params: &TapParams) -> Result<(), TapError> {
        let d = self.tap_dev(dev)?;
        self.taps.open(d);
        Ok(())
    }

    fn tap_drain(&mut self, dev: &str, batch: TapBatch<'_>) -> Result<TapDrain, TapError> {
        self.dev_index(dev)
            .and_then(|d| self.taps.drain(d, batch))
            .ok_or_else(|| TapError::NotOpen {
                path: path(dev, ""),
            })
    }

    fn tap_close(&mut self, dev: &str) -> Result<(), TapError> {
        if let Some(d) = self.dev_index(dev) {
            self.taps.close(d);
        }
        Ok(())
    }
}

impl MergeSampler for Simulation {
    fn merge_sampler_open(
        &mut self,
        period_ns: u64,
    ) -> Result<(), mergetune_kernel::perf::PerfError> {
        self.merge_meter.open(period_ns);
        Ok(())
    }

    fn merge_sampler_enable(&mut self, on: bool) {
        self.merge_meter.on = on;
    }

    fn merge_sampler_drain(&mut self) -> mergetune_kernel::perf::MergeSamples {
        let devs = &self.devs;
        self.merge_meter.drain(|d| devs[d].name.clone())
    }
}

/// A simulation has no kernel release nor boot id: the defaults' none.
impl HostFacts for Simulation {}
