//! Device discovery: which block devices exist and what their queues look like. All reads
//! go through [`BlockFs`]; whether mergetune may manage a device is the logic's
//! (`logic::devices`), a pure function of what was read here.

use crate::blockfs::{BlockFs, FsError};
use serde::Serialize;

/// What was read about one device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeviceInfo {
    pub name: String,
    /// The active scheduler (the bracketed entry), or None without a queue/scheduler file.
    pub scheduler: Option<String>,
    /// The raw queue/nomerges value, or None when the device has no request queue.
    pub nomerges: Option<String>,
    pub rotational: Option<bool>,
    /// Whether queue/iosched/front_merges exists (mq-deadline).
    pub has_front_merges: bool,
    /// Its value, where it exists.
    pub front_merges: Option<String>,
    /// The devices this one is stacked on (slaves/): dm and md members.
    pub slaves: Vec<String>,
    /// The devices stacked on this one (holders/).
    pub holders: Vec<String>,
}

/// The bracketed entry of `queue/scheduler` ("none [mq-deadline] kyber" -> "mq-deadline");
/// a single unbracketed entry (older kernels print "none") is taken as is.
pub fn active_scheduler(text: &str) -> Option<String> {
    if let (Some(a), Some(b)) = (text.find('['), text.find(']'))
        && a < b
    {
        return Some(text[a + 1..b].to_string());
    }
    let mut it = text.split_whitespace();
    match (it.next(), it.next()) {
        (Some(one), None) => Some(one.to_string()),
        _ => None,
    }
}

/// Reads one device's queue facts. A device that vanished mid-read is an error.
pub fn read_device(fs: &mut dyn BlockFs, name: &str) -> Result<DeviceInfo, FsError> {
    let opt = |r: Result<String, FsError>| match r {
        Ok(v) => Ok(Some(v)),
        Err(FsError::NotFound { .. }) => Ok(None),
        Err(e) => Err(e),
    };
    let scheduler = opt(fs.read_attr(name, "queue/scheduler"))?.and_then(|s| active_scheduler(&s));
    let nomerges = opt(fs.read_attr(name, "queue/nomerges"))?.map(|s| s.trim().to_string());
    let rotational = opt(fs.read_attr(name, "queue/rotational"))?.map(|s| s.trim() == "1");
    let front_merges =
        opt(fs.read_attr(name, "queue/iosched/front_merges"))?.map(|s| s.trim().to_string());
    let has_front_merges = front_merges.is_some();
    let slaves = fs.list_dir(name, "slaves")?;
    let holders = fs.list_dir(name, "holders")?;
    Ok(DeviceInfo {
        name: name.to_string(),
        scheduler,
        nomerges,
        rotational,
        has_front_merges,
        front_merges,
        slaves,
        holders,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scheduler_parsing() {
        assert_eq!(
            active_scheduler("none [mq-deadline] kyber bfq").as_deref(),
            Some("mq-deadline")
        );
        assert_eq!(
            active_scheduler("[none] mq-deadline").as_deref(),
            Some("none")
        );
        assert_eq!(active_scheduler("none").as_deref(), Some("none"));
        assert_eq!(active_scheduler("a b"), None);
    }
}
