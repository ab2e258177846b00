//! The device table, one layout for `mergetune status` (from a running daemon's `/status`),
//! `mergetune run --once` and `mergetune replay` (from the daemon in the same process): all
//! three render the same [`DeviceStatus`] rows, so the columns and their `--json` field
//! names are the same everywhere.
//!
//! Columns are as wide as their widest cell (device names and schedulers vary in length);
//! the last column, the decision or the reason for holding, is not padded. No colour: the
//! table is read in terminals, pipes and bug reports alike. Every cell and the header's
//! version may come from a peer (`status --addr` against any endpoint) or a recording
//! (`replay`): each goes through [`printable`] so no control character reaches the terminal.

use crate::status::{DeviceStatus, StatusSnapshot};
use mergetune_logic::decision::{Applied, Decision};
use mergetune_logic::printable::printable;

const HEADER: [&str; COLUMNS] = [
    "DEVICE",
    "SCHEDULER",
    "STATUS",
    "LEVEL",
    "NOMERGES",
    "RD-MRG",
    "WR-MRG",
    "BIOS/S",
    "NEXT-PROBE",
    "PRICED BY: NEXT STEP SAVING [LO, HI] (COVERAGE) / FLOOR",
    "LAST DECISION / REASON",
];
const COLUMNS: usize = 11;
/// The last column (not padded).
const LAST: usize = COLUMNS - 1;
/// Columns aligned right (numbers).
const RIGHT: [bool; COLUMNS] = [
    false, false, false, false, true, true, true, true, false, false, false,
];

fn opt(v: Option<f64>, prec: usize, suffix: &str) -> String {
    match v {
        Some(x) => format!("{x:.prec$}{suffix}"),
        None => "-".into(),
    }
}

/// `12s`, `5m`, `1.5h`.
pub fn span(secs: f64) -> String {
    if secs < 90.0 {
        format!("{secs:.0}s")
    } else if secs < 5400.0 {
        format!("{:.0}m", secs / 60.0)
    } else {
        format!("{:.1}h", secs / 3600.0)
    }
}

/// `L3 off`: the ladder level and the policy's mode, `-` when not managed.
fn level(d: &DeviceStatus) -> String {
    match (d.level, d.mode) {
        (Some(l), Some(m)) => format!("{l} {}", m.as_str()),
        (Some(l), None) => l.to_string(),
        (None, _) => "-".into(),
    }
}

/// `0`, or `0→2` when mergetune changed it (or would have, in a dry run).
fn nomerges(d: &DeviceStatus) -> String {
    let orig = d.original_nomerges.as_deref().unwrap_or("-");
    let now = d.nomerges.as_deref().unwrap_or("-");
    if orig == now || orig == "-" {
        now.to_string()
    } else {
        format!("{orig}\u{2192}{now}")
    }
}

/// What the last column says first of a loop device re-attached to the same backing file
/// while mergetune held records of it: the records stand, and a value equal to
/// mergetune's may be an operator's (the daemon's log says the same, once).
pub const REATTACHED_NOTE: &str = "re-attached to the same backing file, records kept (a value equal to mergetune's may be an operator's: `restore --reattached leave` leaves it)";

/// The last decision with its age and reason, or why the device holds, or why it is not
/// managed; led by the re-attach note where there is one.
fn last(d: &DeviceStatus) -> String {
    let text = last_text(d);
    if d.reattached {
        format!("{REATTACHED_NOTE}; {text}")
    } else {
        text
    }
}

fn last_text(d: &DeviceStatus) -> String {
    if !d.management.is_managed() {
        return d.management.why().to_string();
    }
    let last = last_decision(d);
    match d.changes_last_hour.filter(|_| d.change_cap_reached) {
        Some(n) => {
            format!("hourly cap reached ({n} changes in the last hour): steps down refused; {last}")
        }
        None => last,
    }
}

fn last_decision(d: &DeviceStatus) -> String {
    match &d.last_decision {
        Some(x) => format!(
            "{} {} {} ago{}: {}",
            x.kind,
            Decision::render_changes(&x.changes, ", ", "\u{2192}"),
            span(x.ago_secs),
            match &x.applied {
                Applied::Yes => "",
                Applied::DryRun => " (dry-run: not written)",
                Applied::NothingToWrite => " (nothing to write)",
                _ => " (not applied)",
            },
            x.reason
        ),
        None if d.last_reason.is_empty() => "no decision yet".into(),
        None => format!("no decision yet: {}", d.last_reason),
    }
}

/// One row's cells, in [`HEADER`] order.
fn cells(d: &DeviceStatus) -> [String; COLUMNS] {
    [
        d.device.clone(),
        d.scheduler
            .as_ref()
            .map_or_else(|| "-".to_string(), ToString::to_string),
        d.management.label().to_string(),
        level(d),
        nomerges(d),
        opt(d.read_merge_percent, 1, "%"),
        opt(d.write_merge_percent, 1, "%"),
        opt(d.bios_per_sec, 0, ""),
        d.next_probe_in_secs
            .map(|s| format!("in {}", span(s)))
            .unwrap_or_else(|| "-".into()),
        d.pricing
            .as_ref()
            .map(|p| p.cell())
            .unwrap_or_else(|| "-".into()),
        last(d),
    ]
}

/// The table: a header line, then one line per device.
pub fn render(devices: &[DeviceStatus]) -> String {
    let rows: Vec<[String; COLUMNS]> = std::iter::once(HEADER.map(String::from))
        .chain(
            devices
                .iter()
                .map(|d| cells(d).map(|c| printable(&c).into_owned())),
        )
        .collect();
    let mut width = [0usize; COLUMNS];
    for r in &rows {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    for r in &rows {
        let mut line = String::new();
        for (i, c) in r.iter().enumerate() {
            if i > 0 {
                line.push_str(if i == LAST { "  " } else { " " });
            }
            let pad = width[i].saturating_sub(c.chars().count());
            if i == LAST {
                line.push_str(c);
            } else if RIGHT[i] {
                line.push_str(&" ".repeat(pad));
                line.push_str(c);
            } else {
                line.push_str(c);
                line.push_str(&" ".repeat(pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// The table `mergetune status` prints: one header line, then one line per device.
pub fn format_status(s: &StatusSnapshot) -> String {
    let managed = s
        .devices
        .iter()
        .filter(|d| d.management.is_managed())
        .count();
    let mut out = format!(
        "{}mergetune {}: {} of {} devices managed{}{}, up {:.0}s, {} ticks, interval {} ms, last tick {:.2} ms, worst lag {:.1} ms, {} write error(s){}\n",
        // A simulator's devices are not the host's: said first, where no one can miss it.
        if s.simulated { "SIMULATED: " } else { "" },
        printable(&s.version),
        managed,
        s.devices.len(),
        if s.dry_run { ", DRY-RUN" } else { "" },
        if s.policy_enabled {
            ""
        } else {
            ", policy disabled"
        },
        s.uptime_secs,
        s.ticks,
        s.interval_ms,
        s.last_tick_duration_ms,
        s.max_tick_lag_ms,
        s.write_errors,
        match &s.pricing {
            Some(p) if p.profile == mergetune_logic::pricing::profile::LIVE => format!(
                ", priced live ({}), floor {:.2} ms/s",
                printable(&p.origin),
                p.floor_ms_per_sec
            ),
            Some(p) => format!(
                ", priced by profile {} ({})",
                printable(&p.profile),
                printable(&p.origin)
            ),
            None => String::new(),
        }
    );
    if let Some(why) = s
        .pricing
        .as_ref()
        .and_then(|p| p.sampler_unavailable.as_ref())
    {
        out.push_str(&format!(
            "merge-path sampler unavailable: {}\n",
            printable(why)
        ));
        match s.pricing.as_ref().and_then(|p| p.fallback_profile.as_ref()) {
            Some(f) => out.push_str(&format!(
                "  priced meanwhile by [pricing] fallback_profile {}\n",
                printable(f)
            )),
            None => out.push_str(
                "  no [pricing] fallback_profile: nothing is priced, no device steps down\n",
            ),
        }
    }
    out.push_str(&render(&s.devices));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::DecisionStatus;
    use mergetune_kernel::scheduler::{Reported, Scheduler};
    use mergetune_kernel::tunable::Tunable;
    use mergetune_logic::decision::{Change, DecisionKind, Level};
    use mergetune_logic::devices::Management;
    use mergetune_logic::policy::Mode;

    fn managed(name: &str) -> DeviceStatus {
        DeviceStatus {
            scheduler: Some(Scheduler::MqDeadline.into()),
            mode: Some(Mode::Merging),
            level: Some(Level::L0),
            original_nomerges: Some("0".into()),
            nomerges: Some("0".into()),
            bios_per_sec: Some(1234.4),
            read_merge_percent: Some(0.04),
            write_merge_percent: None,
            last_reason: "window still open".into(),
            ..DeviceStatus::new(name, Management::Managed)
        }
    }

    #[test]
    fn columns_line_up_whatever_the_name_lengths() {
        let mut long = managed("nvme10n1p1-long-name");
        long.last_decision = Some(DecisionStatus {
            at_ms: 1000,
            ago_secs: 5.0,
            kind: DecisionKind::StepDown,
            changes: vec![Change {
                tunable: Tunable::FrontMerges,
                from: "1".into(),
                to: "0".into(),
            }],
            reason: "merge ratio 0.0% < 1.0% for 3 windows".into(),
            applied: Applied::DryRun,
        });
        let excluded = DeviceStatus {
            scheduler: Some(Scheduler::None.into()),
            ..DeviceStatus::new("loop0", Management::Excluded("loop device".into()))
        };
        let t = render(&[managed("sda"), long, excluded]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 4, "{t}");
        // Every row's SCHEDULER and LEVEL cells start in the header's column.
        for col in ["SCHEDULER", "LEVEL"] {
            let at = lines[0].find(col).unwrap();
            for l in &lines[1..] {
                assert_ne!(&l[at..at + 1], " ", "{col} misaligned:\n{t}");
                assert_eq!(&l[at - 1..at], " ", "{col} misaligned:\n{t}");
            }
        }
        assert!(
            lines[1].contains("L0 merging") && lines[1].contains("0.0%"),
            "{t}"
        );
        assert!(
            lines[1].ends_with("no decision yet: window still open"),
            "{t}"
        );
        assert!(
            lines[2].ends_with(
                "step_down queue/iosched/front_merges 1\u{2192}0 5s ago (dry-run: not written): merge ratio 0.0% < 1.0% for 3 windows"
            ),
            "{t}"
        );
        assert!(
            lines[3].ends_with("loop device") && lines[3].contains(" - "),
            "{t}"
        );
    }

    #[test]
    fn no_control_character_from_a_peer_reaches_the_terminal() {
        let evil = "\x1b]0;pwned\x07\x1b[2J";
        let mut d = managed(&format!("sda{evil}"));
        d.scheduler = Some(Reported::Other(format!("none{evil}")));
        d.last_reason = format!("because\n{evil}");
        let s = StatusSnapshot {
            version: format!("0.1{evil}"),
            devices: vec![d],
            ..Default::default()
        };
        let t = format_status(&s);
        assert!(!t.contains(['\x1b', '\x07']), "{t:?}");
        assert_eq!(
            t.lines().count(),
            3,
            "a newline in a field forges no line: {t}"
        );
        assert!(t.contains("sda\\x1b]0;pwned\\x07"), "{t}");
        assert!(t.starts_with("mergetune 0.1\\x1b]0;pwned"), "{t}");
    }

    #[test]
    fn a_reattached_loop_device_says_so_in_its_row() {
        let mut d = managed("loop2");
        let plain = render(std::slice::from_ref(&d));
        assert!(!plain.contains("re-attached"), "{plain}");
        d.reattached = true;
        let t = render(&[d]);
        let row = t.lines().nth(1).unwrap();
        assert!(
            row.ends_with(&format!(
                "{REATTACHED_NOTE}; no decision yet: window still open"
            )),
            "{t}"
        );
        assert!(row.contains("--reattached leave"), "{t}");
    }

    #[test]
    fn nomerges_shows_the_change_from_the_original() {
        let mut d = managed("sda");
        d.nomerges = Some("2".into());
        d.level = Some(Level::L3);
        d.mode = Some(Mode::AtL3);
        assert_eq!(nomerges(&d), "0\u{2192}2");
        assert_eq!(level(&d), "L3 off");
        assert_eq!(span(30.0), "30s");
        assert_eq!(span(600.0), "10m");
        assert_eq!(span(7200.0), "2.0h");
    }
}
