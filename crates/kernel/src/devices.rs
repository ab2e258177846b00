//! Device discovery: which block devices exist and what their queues look like. All reads
//! go through [`Sysfs`] (the boot id of an identity through
//! [`crate::blockfs::HostFacts`]); whether mergetune may manage a device is the logic's
//! (`logic::devices`), a pure function of what was read here.

use crate::blockfs::{BlockFs, FsError, Sysfs};
use crate::scheduler::{Reported, Scheduler};
use serde::Serialize;

/// What was read about one device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeviceInfo {
    pub name: String,
    /// The active scheduler (the bracketed entry), or None without a queue/scheduler file.
    pub scheduler: Option<Reported>,
    /// The raw queue/nomerges value, or None when the device has no request queue.
    pub nomerges: Option<String>,
    pub rotational: Option<bool>,
    /// `queue/iosched/front_merges`, where it exists (mq-deadline).
    pub front_merges: Option<String>,
    /// The devices this one is stacked on (slaves/): dm and md members.
    pub slaves: Vec<String>,
    /// The devices stacked on this one (holders/).
    pub holders: Vec<String>,
}

impl DeviceInfo {
    /// The scheduler the device runs as the layers above see it ([`Reported::known`]).
    pub fn known_scheduler(&self) -> Option<Scheduler> {
        Reported::known(self.scheduler.as_ref())
    }

    /// Whether the scheduler has a `front_merges` knob (mq-deadline's).
    pub fn has_front_merges(&self) -> bool {
        self.front_merges.is_some()
    }
}

/// Which disk a `/sys/block` name stands for now. A name outlives its disk: a loop device
/// detached and attached to another file, or a disk removed and another added, keeps the
/// name (and a loop device its major:minor) while being another device. `diskseq` (5.15+)
/// is new for every disk the kernel makes in a boot, so the three together tell a disk
/// from its successor; on a kernel without `diskseq`, major:minor alone is compared.
///
/// A loop device is the exception `diskseq` cannot see: its request queue (and with it
/// `queue/nomerges`) survives a detach and a re-attach, while `diskseq` moves at each
/// (measured on 6.18: 153 attached, 154 detached, 155 re-attached, nomerges 2 throughout).
/// Its backing file (`loop/backing_file`, numbered by the file's device and inode) tells
/// the two cases apart: the same file again is the same disk, its queue holding what it
/// held; another file is another disk. A loop device seen detached (no backing file) under
/// the same number is the same queue waiting for its file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceIdentity {
    /// `/sys/block/X/dev`.
    pub dev: DevNumber,
    /// `/sys/block/X/diskseq`, where the kernel has it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diskseq: Option<u64>,
    /// The boot `diskseq` was counted in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
    /// A loop device's backing file, where it has one and it could be numbered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backing: Option<BackingFile>,
}

/// A loop device's backing file: the device number of its file system and its inode
/// (a path can be renamed or reused; the pair cannot, while the file exists).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackingFile {
    pub fs_dev: u64,
    pub inode: u64,
}

/// How the disk under a name now relates to the one a record was made on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sameness {
    /// The same disk (every number both sides have agrees).
    Same,
    /// The same loop device's queue, re-attached to the same backing file: `diskseq`
    /// moved; the queue kept its values.
    SameQueue,
    /// A loop device under the same number with no backing file now: detached (its queue
    /// waits for a file), or removed and made again; which file comes next decides. Nothing
    /// is written to it meanwhile, and its records are kept.
    Detached,
    /// Another disk.
    Another,
}

impl DeviceIdentity {
    /// Whether `now` is this same disk. What one side lacks (an older kernel's `diskseq`,
    /// a world without a boot id) is not held against it; what both have must agree.
    pub fn same_device(&self, now: &DeviceIdentity) -> bool {
        matches!(self.compare(now), Sameness::Same | Sameness::SameQueue)
    }

    /// How `now` relates to this disk: see [`Sameness`]. A loop device's queue is the same
    /// across a `diskseq` change only when this record names its backing file and `now`
    /// names the same one; none is "detached", to be decided at the next attach. A record
    /// without one (made before backing files were recorded) keeps `diskseq`'s verdict.
    pub fn compare(&self, now: &DeviceIdentity) -> Sameness {
        fn agree<T: PartialEq>(a: &Option<T>, b: &Option<T>) -> bool {
            match (a, b) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            }
        }
        if self.dev != now.dev || !agree(&self.boot_id, &now.boot_id) {
            return Sameness::Another;
        }
        if agree(&self.diskseq, &now.diskseq) {
            // A recorded backing file that differs is another disk even at one diskseq
            // (a world without diskseq).
            if self.backing.is_some() && now.backing.is_some() && self.backing != now.backing {
                return Sameness::Another;
            }
            return Sameness::Same;
        }
        match (self.backing, now.backing) {
            (Some(b), Some(n)) if b == n => Sameness::SameQueue,
            (Some(_), None) => Sameness::Detached,
            _ => Sameness::Another,
        }
    }
}

impl std::fmt::Display for DeviceIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "dev {}", self.dev)?;
        if let Some(s) = self.diskseq {
            write!(f, " diskseq {s}")?;
        }
        // Two disks that differ only in their boot must not read as one.
        if let Some(b) = &self.boot_id {
            write!(f, " boot {b}")?;
        }
        if let Some(b) = &self.backing {
            write!(f, " backing file inode {} on fs {}", b.inode, b.fs_dev)?;
        }
        Ok(())
    }
}

/// A device number, `major:minor` as `/sys/block/X/dev` and the state file write it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct DevNumber {
    pub major: u32,
    pub minor: u32,
}

impl std::fmt::Display for DevNumber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.major, self.minor)
    }
}

impl DevNumber {
    /// The `major,minor` form (`8,0`) blktrace and the block tracepoints print.
    pub fn traced(self) -> impl std::fmt::Display {
        Traced(self)
    }
}

/// [`DevNumber::traced`].
struct Traced(DevNumber);

impl std::fmt::Display for Traced {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{},{}", self.0.major, self.0.minor)
    }
}

impl From<DevNumber> for String {
    fn from(d: DevNumber) -> String {
        d.to_string()
    }
}

impl TryFrom<String> for DevNumber {
    type Error = String;
    fn try_from(s: String) -> Result<DevNumber, String> {
        crate::biosense::parse_dev_number(&s)
            .map(|(major, minor)| DevNumber { major, minor })
            .ok_or_else(|| format!("{s:?} is not a major:minor device number"))
    }
}

/// Reads which disk `name` stands for now; None where the world has no `dev` file for it
/// (a simulated stack, a device gone). An unreadable `diskseq` is left out, not an error.
pub fn read_identity(fs: &mut dyn BlockFs, name: &str) -> Result<Option<DeviceIdentity>, FsError> {
    let dev = match fs.read_attr(name, "dev") {
        Ok(text) => text,
        Err(FsError::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    let Ok(dev) = DevNumber::try_from(dev) else {
        return Ok(None);
    };
    let diskseq = match fs.read_attr(name, "diskseq") {
        Ok(text) => text.trim().parse().ok(),
        Err(FsError::NotFound { .. }) => None,
        Err(e) => return Err(e),
    };
    let backing = match fs.read_attr(name, "loop/backing_file") {
        Ok(path) => fs
            .file_identity(path.trim_end_matches('\n'))
            .map(|(fs_dev, inode)| BackingFile { fs_dev, inode }),
        Err(_) => None,
    };
    Ok(Some(DeviceIdentity {
        dev,
        diskseq,
        boot_id: fs.boot_id(),
        backing,
    }))
}

/// Reads one device's queue facts. A device that vanished mid-read is an error.
pub fn read_device(fs: &mut dyn Sysfs, name: &str) -> Result<DeviceInfo, FsError> {
    let opt = |r: Result<String, FsError>| match r {
        Ok(v) => Ok(Some(v)),
        Err(FsError::NotFound { .. }) => Ok(None),
        Err(e) => Err(e),
    };
    let scheduler = opt(fs.read_attr(name, "queue/scheduler"))?.and_then(|s| Reported::parse(&s));
    let nomerges = opt(fs.read_attr(name, "queue/nomerges"))?.map(|s| s.trim().to_string());
    let rotational = opt(fs.read_attr(name, "queue/rotational"))?.map(|s| s.trim() == "1");
    let front_merges =
        opt(fs.read_attr(name, "queue/iosched/front_merges"))?.map(|s| s.trim().to_string());
    let slaves = fs.list_dir(name, "slaves")?;
    let holders = fs.list_dir(name, "holders")?;
    Ok(DeviceInfo {
        name: name.to_string(),
        scheduler,
        nomerges,
        rotational,
        front_merges,
        slaves,
        holders,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_disk_is_its_successor_only_where_every_number_both_sides_have_agrees() {
        let id = |minor, diskseq, boot: Option<&str>| DeviceIdentity {
            dev: DevNumber { major: 7, minor },
            diskseq,
            boot_id: boot.map(str::to_string),
            backing: None,
        };
        let recorded = id(20, Some(59), Some("b1"));
        assert!(recorded.same_device(&id(20, Some(59), Some("b1"))));
        // A loop device re-attached: same name and number, new diskseq.
        assert!(!recorded.same_device(&id(20, Some(62), Some("b1"))));
        // Another disk under the name.
        assert!(!recorded.same_device(&id(99, Some(59), Some("b1"))));
        // The same diskseq in another boot is another disk.
        assert!(!recorded.same_device(&id(20, Some(59), Some("b2"))));
        // A kernel without diskseq: the number alone.
        assert!(id(20, None, None).same_device(&id(20, Some(3), Some("b1"))));
        assert!(!id(20, None, None).same_device(&id(21, None, None)));
    }

    #[test]
    fn a_loop_devices_backing_file_tells_a_reattach_from_another_disk() {
        let id = |diskseq, backing: Option<u64>| DeviceIdentity {
            dev: DevNumber { major: 7, minor: 2 },
            diskseq: Some(diskseq),
            boot_id: Some("b1".into()),
            backing: backing.map(|inode| BackingFile { fs_dev: 64, inode }),
        };
        let recorded = id(45, Some(10));
        assert_eq!(recorded.compare(&id(45, Some(10))), Sameness::Same);
        // Re-attached to the same file: the same queue.
        assert_eq!(recorded.compare(&id(47, Some(10))), Sameness::SameQueue);
        assert!(recorded.same_device(&id(47, Some(10))));
        // Detached: decided at the next attach; not the same disk to write meanwhile.
        assert_eq!(recorded.compare(&id(46, None)), Sameness::Detached);
        assert!(!recorded.same_device(&id(46, None)));
        // Another file: another disk.
        assert_eq!(recorded.compare(&id(47, Some(11))), Sameness::Another);
        // A record without a backing file keeps diskseq's verdict.
        assert_eq!(id(45, None).compare(&id(47, Some(10))), Sameness::Another);
    }

    #[test]
    fn a_device_number_reads_and_writes_as_major_colon_minor() {
        let d = DevNumber::try_from("259:3\n".to_string()).unwrap();
        assert_eq!((d.major, d.minor), (259, 3));
        assert_eq!(String::from(d), "259:3");
        assert!(DevNumber::try_from("259".to_string()).is_err());
    }
}
