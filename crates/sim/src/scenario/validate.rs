//! Scenario validation: every number range-checked, every error naming its key.
//!
//! The engine turns times into u64 nanoseconds and rates into intervals, so a value like
//! `bandwidth_mb_s = 1e-300` (a service time past u64, wrapping to zero: full speed) or a
//! sum of phases beyond u64 ns would silently break the model. The [`limits`] are wide
//! enough for any real device and narrow enough that no product of them overflows;
//! iodepth x numjobs is bounded by the engine's cap on bios in flight. Checks run in file
//! order (the top-level keys, then each device, then each phase and its jobs) and stop at
//! the first error.

use super::{
    DeviceSpec, JobSpec, LISTED, MAX_IN_FLIGHT_BIOS, Scenario, ScenarioError, iosched_keys,
};
use crate::cost::Step;
use mergetune_kernel::scheduler::Scheduler;
use mergetune_logic::document::DocumentError;
use std::collections::HashSet;

/// Bounds of the scenario's numbers (see the module doc for why they exist).
pub mod limits {
    /// Device bandwidth, MB/s: 10 kB/s to 1 TB/s.
    pub const BANDWIDTH_MB_S: (f64, f64) = (0.01, 1e6);
    /// Per-request overheads and seek times, µs: up to 10 s.
    pub const SERVICE_US_MAX: f64 = 1e7;
    /// Think time and the trace plug gap, µs: up to 1,000 s.
    pub const PAUSE_US_MAX: f64 = 1e9;
    /// A rate limit, bios per second, when not 0 (unlimited).
    pub const RATE_IOPS: (f64, f64) = (0.001, 1e9);
    /// Simulated time over all phases, s (11.6 days).
    pub const TOTAL_DURATION_S: f64 = 1e6;
    /// Offsets and sizes of a job's region, MB (the largest device is 2^30 MB).
    pub const REGION_MB_MAX: u64 = 1 << 30;
    /// A job's `io_size_mb`.
    pub const IO_SIZE_MB_MAX: u64 = 1 << 40;
    /// One step of the cost model, cycles.
    pub const COST_CYCLES_MAX: u64 = 1_000_000;
}

impl Scenario {
    /// Checks every key of a parsed scenario; `origin` names the file in the error.
    pub fn validate(&self, origin: &str) -> Result<(), ScenarioError> {
        let bad = |key: String, reason: &str| {
            ScenarioError::from(DocumentError::invalid(origin, key, reason))
        };
        if let Some(p) = &self.cost_profile
            && !mergetune_logic::pricing::profile::BUILTIN_NAMES.contains(&p.as_str())
        {
            return Err(bad(
                "cost_profile".into(),
                &format!(
                    "must be one of {}",
                    mergetune_logic::pricing::profile::BUILTIN_NAMES.join(", ")
                ),
            ));
        }
        if self.devices.is_empty() {
            return Err(bad("device".into(), "at least one [[device]] is required"));
        }
        if self.phases.is_empty() {
            return Err(bad("phase".into(), "at least one [[phase]] is required"));
        }
        if let Some(c) = &self.cost {
            for step in Step::ALL {
                if c.step(step) > limits::COST_CYCLES_MAX {
                    return Err(bad(
                        format!("cost.{}", step.key()),
                        &format!("must be at most {} cycles", limits::COST_CYCLES_MAX),
                    ));
                }
            }
        }
        let used_members = self.validate_devices(origin)?;
        self.validate_phases(origin, &used_members)
    }

    /// The `[[device]]` tables; returns the names of the devices that are dm members.
    fn validate_devices(&self, origin: &str) -> Result<HashSet<String>, ScenarioError> {
        let mut names = HashSet::new();
        let mut used_members = HashSet::new();
        for (i, d) in self.devices.iter().enumerate() {
            let bad = |f: &str, reason: &str| {
                ScenarioError::from(DocumentError::invalid(
                    origin,
                    format!("device[{i}].{f}"),
                    reason,
                ))
            };
            if !names.insert(d.name.as_str()) && is_plain_name(&d.name) {
                return Err(bad("name", "duplicate device name"));
            }
            check_device(d, &bad)?;
            if d.kind.is_dm() {
                self.check_dm_members(d, &mut used_members, &bad)?;
            } else if !d.members.is_empty() {
                return Err(bad("members", "only dm devices have members"));
            }
        }
        Ok(used_members)
    }

    /// A dm device's members: there, disks, each a member of one dm device only; its chunk
    /// a power of two.
    fn check_dm_members(
        &self,
        d: &DeviceSpec,
        used_members: &mut HashSet<String>,
        bad: &dyn Fn(&str, &str) -> ScenarioError,
    ) -> Result<(), ScenarioError> {
        if d.members.is_empty() {
            return Err(bad("members", "a dm device needs members"));
        }
        for m in &d.members {
            let Some(md) = self.devices.iter().find(|x| &x.name == m) else {
                return Err(bad("members", &format!("no device named {m:?}")));
            };
            if md.kind.is_dm() {
                return Err(bad("members", "members must be disks, not dm devices"));
            }
            if !used_members.insert(m.clone()) {
                return Err(bad("members", &format!("{m} is already a member")));
            }
        }
        if let Some(c) = d.chunk_kb
            && (c < 4 || !c.is_power_of_two())
        {
            return Err(bad("chunk_kb", "must be a power of two >= 4"));
        }
        Ok(())
    }

    /// The `[[phase]]` tables and their jobs (a dm member takes no job of its own).
    fn validate_phases(
        &self,
        origin: &str,
        used_members: &HashSet<String>,
    ) -> Result<(), ScenarioError> {
        let bad = |key: String, reason: &str| {
            ScenarioError::from(DocumentError::invalid(origin, key, reason))
        };
        let mut total_s = 0.0;
        for (pi, p) in self.phases.iter().enumerate() {
            let k = |f: &str| format!("phase[{pi}].{f}");
            let max_s = limits::TOTAL_DURATION_S;
            if !(p.duration_s.is_finite() && p.duration_s > 0.0 && p.duration_s <= max_s) {
                return Err(bad(k("duration_s"), "must be in (0, 1e6] seconds"));
            }
            total_s += p.duration_s;
            if total_s > max_s {
                return Err(bad(
                    "phase".into(),
                    &format!(
                        "the phases last {total_s} s up to phase[{pi}]; the simulator runs at most {max_s} s in all"
                    ),
                ));
            }
            // Jobs of a phase run at once: their queues add up.
            let mut in_flight = 0u64;
            for (ji, j) in p.jobs.iter().enumerate() {
                let k = |f: &str| format!("phase[{pi}].job[{ji}].{f}");
                let Some(dev) = self.devices.iter().find(|d| d.name == j.device) else {
                    return Err(bad(k("device"), &format!("no device named {:?}", j.device)));
                };
                if used_members.contains(&dev.name) {
                    return Err(bad(
                        k("device"),
                        "is a dm member; submit to the dm device instead",
                    ));
                }
                let bad_job = |f: &str, reason: &str| bad(k(f), reason);
                check_job(j, &bad_job)?;
                let cap = MAX_IN_FLIGHT_BIOS as u64;
                let job_bios = u64::from(j.iodepth) * u64::from(j.numjobs);
                in_flight += job_bios;
                if in_flight > cap {
                    return Err(bad(
                        k("iodepth"),
                        &format!(
                            "iodepth x numjobs = {job_bios}: with the phase's other jobs up to {in_flight} bios in flight, more than the simulator's cap of {cap}"
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// A plain device name like sda: no path, no white space, not `.` or `..`.
fn is_plain_name(name: &str) -> bool {
    !(name.is_empty()
        || name.contains('/')
        || name.contains(char::is_whitespace)
        || name == "."
        || name == "..")
}

/// One device's own fields: its name, queue and media figures, scheduler and iosched
/// tunables in range: one check per field, in the order of `DeviceSpec`, each with its own
/// message.
fn check_device(
    d: &DeviceSpec,
    bad: &dyn Fn(&str, &str) -> ScenarioError,
) -> Result<(), ScenarioError> {
    if !is_plain_name(&d.name) {
        return Err(bad("name", "must be a plain device name like sda"));
    }
    if d.nomerges > 2 {
        return Err(bad("nomerges", "must be 0, 1 or 2"));
    }
    if let Some(q) = d.queue_depth
        && !(1..=4096).contains(&q)
    {
        return Err(bad("queue_depth", "must be in 1..=4096"));
    }
    if !(4..=65536).contains(&d.max_sectors_kb) {
        return Err(bad("max_sectors_kb", "must be in 4..=65536"));
    }
    if !(1..=4096).contains(&d.max_segments) {
        return Err(bad("max_segments", "must be in 1..=4096"));
    }
    if d.size_gib == 0 || d.size_gib > 1 << 20 {
        return Err(bad("size_gib", "must be in 1..=1048576"));
    }
    check_scheduler(d, bad)?;
    check_media(d, bad)
}

/// The device's scheduler (none for a dm device, else mq-deadline when unset) and its
/// iosched tunables: each one the scheduler has, in range.
fn check_scheduler(
    d: &DeviceSpec,
    bad: &dyn Fn(&str, &str) -> ScenarioError,
) -> Result<(), ScenarioError> {
    let Ok(sched) = d.scheduler() else {
        let names: Vec<&str> = LISTED.iter().map(|s| s.name()).collect();
        return Err(bad(
            "scheduler",
            &format!("must be one of {}", names.join(", ")),
        ));
    };
    if d.kind.is_dm() && sched != Scheduler::None {
        return Err(bad("scheduler", "dm devices are bio-based: only none"));
    }
    for key in d.iosched.keys() {
        if !iosched_keys(sched).contains(&key.as_str()) {
            return Err(bad(
                &format!("iosched.{key}"),
                &format!("not a tunable of {sched}"),
            ));
        }
    }
    for (key, v) in &d.iosched {
        if matches!(key.as_str(), "front_merges" | "low_latency") && *v > 1 {
            return Err(bad(&format!("iosched.{key}"), "must be 0 or 1"));
        }
        if key == "fifo_batch" && *v == 0 {
            return Err(bad(&format!("iosched.{key}"), "must be at least 1"));
        }
    }
    Ok(())
}

/// The device's media figures: service times, bandwidth, parallelism and rpm in range.
fn check_media(
    d: &DeviceSpec,
    bad: &dyn Fn(&str, &str) -> ScenarioError,
) -> Result<(), ScenarioError> {
    let service = |v: Option<f64>, f: &str| -> Result<(), ScenarioError> {
        match v {
            Some(x) if !(0.0..=limits::SERVICE_US_MAX).contains(&x) => Err(bad(
                f,
                &format!(
                    "must be a number of µs in 0..={} (10 s)",
                    limits::SERVICE_US_MAX
                ),
            )),
            _ => Ok(()),
        }
    };
    service(d.read_overhead_us, "read_overhead_us")?;
    service(d.write_overhead_us, "write_overhead_us")?;
    service(d.min_seek_us, "min_seek_us")?;
    service(d.max_seek_us, "max_seek_us")?;
    let (lo, hi) = limits::BANDWIDTH_MB_S;
    if let Some(b) = d.bandwidth_mb_s
        && !(lo..=hi).contains(&b)
    {
        return Err(bad(
            "bandwidth_mb_s",
            &format!("must be in {lo}..={hi} MB/s"),
        ));
    }
    if let Some(p) = d.parallelism
        && !(1..=1024).contains(&p)
    {
        return Err(bad("parallelism", "must be in 1..=1024"));
    }
    if let Some(r) = d.rpm
        && !(1000..=30000).contains(&r)
    {
        return Err(bad("rpm", "must be in 1000..=30000"));
    }
    Ok(())
}

/// One job's own fields in range (its device and the phase's queue total are the
/// caller's).
fn check_job(j: &JobSpec, bad: &dyn Fn(&str, &str) -> ScenarioError) -> Result<(), ScenarioError> {
    if !(0.0..=100.0).contains(&j.read_percent) {
        return Err(bad("read_percent", "must be in 0..=100"));
    }
    if !(0.0..=100.0).contains(&j.sequential_percent) {
        return Err(bad("sequential_percent", "must be in 0..=100"));
    }
    let bs = j.block_size_kb.to_vec();
    if bs.is_empty() || bs.iter().any(|&b| b == 0 || b > 65536) {
        return Err(bad("block_size_kb", "each size must be in 1..=65536"));
    }
    if !(1..=65536).contains(&j.iodepth) {
        return Err(bad("iodepth", "must be in 1..=65536"));
    }
    if j.batch == 0 || j.batch > j.iodepth {
        return Err(bad("batch", "must be in 1..=iodepth"));
    }
    if let Some(c) = j.batch_complete
        && (c == 0 || c > j.iodepth)
    {
        return Err(bad("batch_complete", "must be in 1..=iodepth"));
    }
    let pause = limits::PAUSE_US_MAX;
    if !(0.0..=pause).contains(&j.think_time_us) {
        return Err(bad("think_time_us", &format!("must be in 0..={pause} µs")));
    }
    let (lo, hi) = limits::RATE_IOPS;
    if !(j.rate_iops == 0.0 || (lo..=hi).contains(&j.rate_iops)) {
        return Err(bad(
            "rate_iops",
            &format!("must be 0 (unlimited) or in {lo}..={hi} bios/s"),
        ));
    }
    if !(0.0..=pause).contains(&j.trace_plug_gap_us) {
        return Err(bad(
            "trace_plug_gap_us",
            &format!("must be in 0..={pause} µs"),
        ));
    }
    if !(1..=1024).contains(&j.numjobs) {
        return Err(bad("numjobs", "must be in 1..=1024"));
    }
    for (f, v, max) in [
        ("offset_mb", j.offset_mb, limits::REGION_MB_MAX),
        ("size_mb", j.size_mb, limits::REGION_MB_MAX),
        ("io_size_mb", j.io_size_mb, limits::IO_SIZE_MB_MAX),
    ] {
        if v > max {
            return Err(bad(f, &format!("must be at most {max} MB")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `[cost]` step is bounded, and the refusal names its key: validation walks the
    /// steps the model prices, so none is left unchecked.
    #[test]
    fn a_cost_step_above_its_bound_is_refused_naming_its_key() {
        let base = "[[device]]\nname = \"sda\"\nkind = \"ssd\"\n\
            [[phase]]\nname = \"p\"\nduration_s = 1.0\n";
        for step in Step::ALL {
            let key = step.key();
            let at_bound = format!("{base}[cost]\n{key} = {}\n", limits::COST_CYCLES_MAX);
            assert!(
                Scenario::from_toml_str(&at_bound, "s.toml", None).is_ok(),
                "{key}"
            );
            let over = format!("{base}[cost]\n{key} = {}\n", limits::COST_CYCLES_MAX + 1);
            let e = Scenario::from_toml_str(&over, "s.toml", None)
                .unwrap_err()
                .to_string();
            assert!(e.contains(&format!("cost.{key}")), "{key}: {e}");
            assert!(e.contains("must be at most"), "{key}: {e}");
        }
    }
}
