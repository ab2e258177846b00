//! Which devices mergetune may manage, and why not the others: a pure function of what the
//! kernel layer read about a device ([`DeviceInfo`]) and the `[devices]` config.

use mergetune_kernel::devices::DeviceInfo;
use serde::{Deserialize, Serialize};

/// The `[devices]` section of the config: which devices mergetune may manage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DevicesConfig {
    /// Shell globs over /sys/block names; a device is a candidate when one matches.
    pub include: Vec<String>,
    /// Shell globs; a device matching one is never touched.
    pub exclude: Vec<String>,
}

impl Default for DevicesConfig {
    fn default() -> Self {
        DevicesConfig {
            include: vec!["*".to_string()],
            exclude: Vec::new(),
        }
    }
}

/// Whether a device is managed, and if not, why.
/// In JSON `{"status": "admin-owned", "why": "..."}`: the labels of [`Management::label`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", content = "why", rename_all = "kebab-case")]
pub enum Management {
    Managed,
    /// Matched an exclude pattern or no include pattern.
    Excluded(String),
    /// Not a device whose merging can be tuned (ram disk, stacked top, no queue).
    Unsupported(String),
    /// nomerges was non-zero before mergetune touched it: the admin's choice stands.
    AdminOwned(String),
}

impl Management {
    pub fn is_managed(&self) -> bool {
        matches!(self, Management::Managed)
    }
    pub fn label(&self) -> &'static str {
        match self {
            Management::Managed => "managed",
            Management::Excluded(_) => "excluded",
            Management::Unsupported(_) => "unsupported",
            Management::AdminOwned(_) => "admin-owned",
        }
    }
    pub fn why(&self) -> &str {
        match self {
            Management::Managed => "",
            Management::Excluded(w) | Management::Unsupported(w) | Management::AdminOwned(w) => w,
        }
    }
}

fn glob_match(pat: &str, name: &str) -> bool {
    glob::Pattern::new(pat).is_ok_and(|p| p.matches(name))
}

/// Decides whether a device is managed. Pure.
///
/// Rules, in order: exclude patterns win; some include pattern must match; ram and zram
/// disks are never managed; loop devices only when an include pattern names them (starts
/// with "loop"), so a bare "*" never touches them; a device stacked on others (dm, md: it
/// has slaves) is not managed because bio-based stacking does not merge, its members are;
/// a device without queue/nomerges has no request queue; and a non-zero nomerges found
/// before mergetune wrote anything is the admin's.
pub fn classify(info: &DeviceInfo, cfg: &DevicesConfig) -> Management {
    let name = info.name.as_str();
    if let Some(p) = cfg.exclude.iter().find(|p| glob_match(p, name)) {
        return Management::Excluded(format!("matches exclude pattern {p:?}"));
    }
    let Some(inc) = cfg.include.iter().find(|p| glob_match(p, name)) else {
        return Management::Excluded("matches no include pattern".into());
    };
    if name.starts_with("ram") || name.starts_with("zram") {
        return Management::Unsupported("RAM disk: nothing to gain from merge tuning".into());
    }
    if name.starts_with("loop")
        && !cfg
            .include
            .iter()
            .any(|p| p.starts_with("loop") && glob_match(p, name))
    {
        return Management::Excluded(format!(
            "loop device: only managed when an include pattern names it (matched only {inc:?})"
        ));
    }
    if !info.slaves.is_empty() {
        return Management::Unsupported(format!(
            "stacked on {}: merging happens on the members",
            info.slaves.join(", ")
        ));
    }
    let Some(nm) = info.nomerges.as_deref() else {
        return Management::Unsupported("no queue/nomerges (no request queue)".into());
    };
    if nm != "0" {
        return Management::AdminOwned(format!(
            "nomerges was {nm} before mergetune started: left as the admin set it"
        ));
    }
    Management::Managed
}

/// One line for the start-up log.
pub fn describe(info: &DeviceInfo, m: &Management) -> String {
    let mut s = format!(
        "{}: scheduler {}, nomerges {}, rotational {}",
        info.name,
        info.scheduler.as_ref().map_or("-", |s| s.name()),
        info.nomerges.as_deref().unwrap_or("-"),
        match info.rotational {
            Some(true) => "yes",
            Some(false) => "no",
            None => "-",
        }
    );
    if !info.slaves.is_empty() {
        s.push_str(&format!(", stacked on {}", info.slaves.join("+")));
    }
    if !info.holders.is_empty() {
        s.push_str(&format!(", under {}", info.holders.join("+")));
    }
    match m {
        Management::Managed => s.push_str(": managed"),
        other => s.push_str(&format!(": {} ({})", other.label(), other.why())),
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use mergetune_kernel::scheduler::Scheduler;

    fn info(name: &str, nomerges: Option<&str>, slaves: &[&str]) -> DeviceInfo {
        DeviceInfo {
            name: name.into(),
            scheduler: Some(Scheduler::MqDeadline.into()),
            nomerges: nomerges.map(Into::into),
            rotational: Some(false),
            front_merges: Some("1".into()),
            slaves: slaves.iter().map(|s| s.to_string()).collect(),
            holders: vec![],
        }
    }

    #[test]
    fn classification_rules() {
        let d = DevicesConfig::default();
        assert!(classify(&info("sda", Some("0"), &[]), &d).is_managed());
        assert!(matches!(
            classify(&info("sda", Some("2"), &[]), &d),
            Management::AdminOwned(_)
        ));
        assert!(matches!(
            classify(&info("dm-0", Some("0"), &["sda", "sdb"]), &d),
            Management::Unsupported(_)
        ));
        assert!(matches!(
            classify(&info("zram0", Some("0"), &[]), &d),
            Management::Unsupported(_)
        ));
        assert!(matches!(
            classify(&info("loop0", Some("0"), &[]), &d),
            Management::Excluded(_)
        ));
        assert!(matches!(
            classify(&info("sdb", None, &[]), &d),
            Management::Unsupported(_)
        ));
        let with_loop = DevicesConfig {
            include: vec!["loop3".into()],
            exclude: vec![],
        };
        assert!(classify(&info("loop3", Some("0"), &[]), &with_loop).is_managed());
        assert!(matches!(
            classify(&info("sda", Some("0"), &[]), &with_loop),
            Management::Excluded(_)
        ));
        let ex = DevicesConfig {
            include: vec!["*".into()],
            exclude: vec!["nvme*".into()],
        };
        assert!(matches!(
            classify(&info("nvme0n1", Some("0"), &[]), &ex),
            Management::Excluded(_)
        ));
    }
}
