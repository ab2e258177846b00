//! Every `Reason` the policy can give, rendered with `Display` (one line per case, in
//! `reasons.txt`) and with `Serialize` (`reasons.json`), so that moving the wordings (say,
//! splitting `Reason::fmt`, one arm per variant) shows it changed none of them.
//!
//! The numbers are chosen to be distinctive and to reach each branch of the formatting:
//! a ratio under 10% (one decimal) and over (none), durations in whole and in fractional
//! seconds, counts of one and of several, `Option` both ways, booleans both ways, every
//! `Mode`, every `SignatureChange`, and every kind of `Worth` (unpriced, profile with and
//! without intervals, scheduler and coverage, untrusted, live, and each `UnknownWhy`) with
//! each kind of saving (ms/s with and without an interval, percent with and without one, a
//! cost, not measured).
//!
//! Every type here is constructible from outside the crate (all fields are public), so no
//! case goes through the policy's functions.
//!
//! [`every_variant!`] writes an exhaustive `match` over `Reason` (no wildcard arm): a new
//! variant breaks the build until it is named there, and naming it fails
//! `every_reason_variant_has_a_case` until a case of it is added to [`cases`].

use mergetune_kernel::scheduler::Scheduler;
use mergetune_logic::decision::Level;
use mergetune_logic::policy::reason::{
    ChangeAnsweredByTap, ChangeUnconfirmed, KnownHostileToL3, NoL3,
};
use mergetune_logic::policy::signature::SignatureChange;
use mergetune_logic::policy::{Mode, Reason, Signature};
use mergetune_logic::pricing::floor::SavingFloor;
use mergetune_logic::pricing::profile::Verdict;
use mergetune_logic::pricing::worth::{Basis, Saving, SavingUnit, UnknownWhy, Worth};
use std::borrow::Cow;

/// `VARIANTS`, every variant's name, and `variant`, an exhaustive match naming the variant
/// of a reason. `Reason::X { .. }` matches unit, tuple and struct variants alike. `X as
/// "Y"` names a renamed variant by the name the pinned outputs know it by.
macro_rules! every_variant {
    (@name $v:ident) => { stringify!($v) };
    (@name $v:ident $label:literal) => { $label };
    ($($v:ident $(as $label:literal)?),* $(,)?) => {
        const VARIANTS: &[&str] = &[$(every_variant!(@name $v $($label)?)),*];

        fn variant(r: &Reason) -> &'static str {
            match r {
                $(Reason::$v { .. } => every_variant!(@name $v $($label)?),)*
            }
        }
    };
}

every_variant!(
    Text,
    Idle,
    Pays,
    LowWindow,
    AtL3,
    NotWorth,
    StillMerging,
    LeaveNotWorth,
    BlindAtL3,
    // Pinned as FloorRaised, before the deepest allowed level had a name apart from the
    // saving floor.
    L3NoLongerAllowed as "FloorRaised",
    DeepestAllowed,
    SensedMergeable,
    AnsweredByTap,
    ProbeOnChange,
    WindowOpen,
    IdleDoesNotCount,
    TrialStart,
    Dwell,
    CapReached,
    StepDown,
    StepToL3,
    KnownHostileToL3,
    L3HeldOff,
    NothingMergesToL3,
    KnownHostileChange,
    ChangeUnconfirmed,
    RateChangeAwaitsTap,
    SensedOnce,
    SavingUnknown,
    WorthChanged,
    ChangeAnsweredByTap,
    TimedProbe,
    ProbeWindow,
    ProbeInconclusive,
    ProbeLowNoL3,
    ProbeFoundNone,
    ProbeFoundMerges,
    TrialInconclusive,
    TrialMeasuring,
    TrialKeptMerges,
    TrialLostMerges,
);

const RATE_UP: SignatureChange = SignatureChange::Rate {
    from_per_sec: 43706.4,
    to_per_sec: 78370.6,
};
const RATE_DOWN: SignatureChange = SignatureChange::Rate {
    from_per_sec: 188982.2,
    to_per_sec: 106170.7,
};
const READ_SHARE: SignatureChange = SignatureChange::ReadShare {
    from: 0.123,
    to: 0.876,
};
const BIO_SIZE: SignatureChange = SignatureChange::BioSize {
    from_sectors: 8.0,
    to_sectors: 255.0,
};

fn saving(value: f64, ci: Option<[f64; 2]>, unit: SavingUnit, verdict: Verdict) -> Saving {
    Saving {
        value,
        ci,
        unit,
        verdict,
    }
}

/// A measured-here table: L3 with an interval, L2 without, L1 not measured.
fn live(scheduler: Option<Scheduler>) -> Worth {
    Worth {
        basis: Basis::Live {
            floor: SavingFloor::from_percent_cpu(0.425),
        },
        scheduler,
        levels: [
            None,
            None,
            Some(saving(
                2.345,
                None,
                SavingUnit::CpuMsPerSec,
                Verdict::NoMeasurableDifference,
            )),
            Some(saving(
                1.234,
                Some([0.812, 1.678]),
                SavingUnit::CpuMsPerSec,
                Verdict::NoMeasurableDifference,
            )),
        ],
        coverage_percent: 95.0,
        untrusted: false,
    }
}

/// A cost profile's table: L1 a saving without interval, L2 a cost with one, L3 no
/// measurable difference with one.
fn profile(scheduler: Option<Scheduler>, coverage_percent: f64, untrusted: bool) -> Worth {
    Worth {
        basis: Basis::Profile,
        scheduler,
        levels: [
            None,
            Some(saving(
                -8.75,
                None,
                SavingUnit::PercentPerIo,
                Verdict::Saves,
            )),
            Some(saving(
                3.21,
                Some([1.04, 5.67]),
                SavingUnit::PercentPerIo,
                Verdict::Costs,
            )),
            Some(saving(
                -6.1,
                Some([-25.6, 17.5]),
                SavingUnit::PercentPerIo,
                Verdict::NoMeasurableDifference,
            )),
        ],
        coverage_percent,
        untrusted,
    }
}

fn not_worth(at: Level, below: [bool; 4], worth: Worth) -> Reason {
    Reason::NotWorth {
        at,
        below,
        worth: Box::new(worth),
    }
}

fn saving_unknown(at: Level, worth: Worth) -> Reason {
    Reason::SavingUnknown {
        at,
        worth: Box::new(worth),
    }
}

/// Every case: a name and the reason. Names are unique (checked).
fn cases() -> Vec<(&'static str, Reason)> {
    const L1_L2_L3: [bool; 4] = [false, true, true, true];
    const ONLY_L3: [bool; 4] = [false, false, false, true];
    let mut v: Vec<(&'static str, Reason)> = vec![
        (
            "text_borrowed",
            Reason::from("write of queue/nomerges failed: Permission denied (os error 13)"),
        ),
        (
            "text_owned",
            Reason::from(String::from("retrying sda in 2.5s (attempt 3 of 7)")),
        ),
        (
            "text_cow_owned",
            Reason::Text(Cow::Owned("state dir /run/x: read-only".into())),
        ),
        (
            "idle",
            Reason::Idle {
                bios: 321,
                min_bios: 1000,
            },
        ),
        (
            "pays_ratio_over_10pct",
            Reason::Pays {
                level: Level::L0,
                ratio: 0.4567,
                low: 0.0123,
                bios_per_sec: 12345.6,
            },
        ),
        (
            "pays_ratio_under_10pct",
            Reason::Pays {
                level: Level::L1,
                ratio: 0.0734,
                low: 0.125,
                bios_per_sec: 987.4,
            },
        ),
        (
            "low_window",
            Reason::LowWindow {
                ratio: 0.0042,
                low: 0.0125,
                bios_per_sec: 98765.4,
                n: 2,
                k: 3,
                next: Level::L1,
            },
        ),
        (
            "at_l3_whole_secs",
            Reason::AtL3 {
                next_probe_in_ms: 1_800_000,
            },
        ),
        (
            "at_l3_fractional_secs",
            Reason::AtL3 {
                next_probe_in_ms: 2_345,
            },
        ),
    ];
    v.extend(not_worth_cases(L1_L2_L3, ONLY_L3));
    v.extend(ladder_cases());
    v.extend(l3_cases());
    v.extend(probe_and_trial_cases());
    v
}

/// `NotWorth`, one per kind of `Worth` and branch of `Worth::describe`.
#[allow(clippy::too_many_lines)] // a table of cases, read one after another
fn not_worth_cases(l1_l2_l3: [bool; 4], only_l3: [bool; 4]) -> Vec<(&'static str, Reason)> {
    let measuring = |samples, spans| {
        Worth::unknown(UnknownWhy::Measuring {
            samples,
            needed: 10,
            spans,
        })
    };
    vec![
        (
            "not_worth_unpriced_levels_not_measured",
            not_worth(Level::L0, [false, true, true, false], Worth::UNPRICED),
        ),
        (
            "not_worth_no_level_below",
            not_worth(Level::L2, [false; 4], Worth::UNPRICED),
        ),
        (
            "not_worth_every_level_flagged",
            not_worth(Level::L0, [true; 4], live(Some(Scheduler::Bfq))),
        ),
        (
            "not_worth_live_with_scheduler",
            not_worth(Level::L2, only_l3, live(Some(Scheduler::MqDeadline))),
        ),
        (
            "not_worth_live_without_scheduler",
            not_worth(Level::L0, l1_l2_l3, live(None)),
        ),
        (
            "not_worth_profile_with_scheduler_and_coverage",
            not_worth(
                Level::L0,
                l1_l2_l3,
                profile(Some(Scheduler::MqDeadline), 89.1, false),
            ),
        ),
        (
            "not_worth_profile_without_scheduler_or_coverage",
            not_worth(Level::L0, l1_l2_l3, profile(None, 0.0, false)),
        ),
        (
            "not_worth_profile_untrusted",
            not_worth(
                Level::L1,
                only_l3,
                profile(Some(Scheduler::Kyber), 67.3, true),
            ),
        ),
        (
            "not_worth_profile_none_scheduler",
            not_worth(
                Level::L0,
                only_l3,
                profile(Some(Scheduler::None), 97.9, false),
            ),
        ),
        (
            "saving_unknown_not_measured_yet",
            saving_unknown(Level::L0, Worth::unknown(UnknownWhy::NotMeasuredYet)),
        ),
        (
            "saving_unknown_measuring_one_span",
            saving_unknown(Level::L0, measuring(4, 1)),
        ),
        (
            "saving_unknown_measuring_several_spans",
            saving_unknown(Level::L2, measuring(7, 3)),
        ),
        (
            "saving_unknown_other_workload",
            saving_unknown(Level::L0, Worth::unknown(UnknownWhy::OtherWorkload)),
        ),
        (
            "saving_unknown_no_sampler",
            saving_unknown(Level::L0, Worth::unknown(UnknownWhy::NoSampler)),
        ),
        (
            "saving_unknown_no_matching_profile",
            saving_unknown(Level::L1, Worth::unknown(UnknownWhy::NoMatchingProfile)),
        ),
    ]
}

/// The walk down and back up the ladder, below L3.
#[allow(clippy::too_many_lines)] // a table of cases, read one after another
fn ladder_cases() -> Vec<(&'static str, Reason)> {
    vec![
        (
            "still_merging",
            Reason::StillMerging {
                level: Level::L2,
                ratio: 0.0612,
                high: 0.05,
                bios_per_sec: 4321.5,
            },
        ),
        (
            "leave_not_worth",
            Reason::LeaveNotWorth {
                from: Level::L3,
                why: "L3 saves 2.00 ms/s [1.20, 4.90] of CPU, under the floor".into(),
                to: Level::L0,
            },
        ),
        ("blind_at_l3", Reason::BlindAtL3 { to: Level::L2 }),
        (
            "floor_raised",
            Reason::L3NoLongerAllowed {
                disabled_nomerges: 1,
                to: Level::L2,
            },
        ),
        (
            "deepest_allowed_l3_blind",
            Reason::DeepestAllowed {
                level: Level::L2,
                ratio: 0.0031,
                low: 0.01,
                l3_blind: true,
            },
        ),
        (
            "deepest_allowed_not_blind",
            Reason::DeepestAllowed {
                level: Level::L2,
                ratio: 0.0031,
                low: 0.01,
                l3_blind: false,
            },
        ),
        ("window_open_merging", Reason::WindowOpen(Mode::Merging)),
        ("window_open_at_l3", Reason::WindowOpen(Mode::AtL3)),
        ("window_open_probing", Reason::WindowOpen(Mode::Probing)),
        ("window_open_trial", Reason::WindowOpen(Mode::Trial)),
        (
            "idle_does_not_count_merging",
            Reason::IdleDoesNotCount(Mode::Merging),
        ),
        (
            "idle_does_not_count_at_l3",
            Reason::IdleDoesNotCount(Mode::AtL3),
        ),
        (
            "idle_does_not_count_probing",
            Reason::IdleDoesNotCount(Mode::Probing),
        ),
        (
            "idle_does_not_count_trial",
            Reason::IdleDoesNotCount(Mode::Trial),
        ),
        (
            "trial_start_one_window",
            Reason::TrialStart {
                level: Level::L0,
                ratio: 0.2345,
                bios_per_sec: 5555.5,
                windows: 1,
            },
        ),
        (
            "trial_start_several_windows",
            Reason::TrialStart {
                level: Level::L1,
                ratio: 0.0876,
                bios_per_sec: 777.7,
                windows: 3,
            },
        ),
        (
            "dwell",
            Reason::Dwell {
                ratio: 0.0023,
                low: 0.01,
                windows: 2,
                level: Level::L2,
                at_level_ms: 4_500,
                dwell_ms: 10_000,
            },
        ),
        (
            "cap_reached_with_windows",
            Reason::CapReached {
                ratio: 0.0045,
                low: 0.01,
                windows: Some(3),
                cap: 60,
                level: Level::L1,
            },
        ),
        (
            "cap_reached_without_windows",
            Reason::CapReached {
                ratio: 0.1234,
                low: 0.15,
                windows: None,
                cap: 7,
                level: Level::L0,
            },
        ),
        (
            "step_down",
            Reason::StepDown {
                ratio: 0.0056,
                low: 0.01,
                windows: 3,
                bios_per_sec: 23456.7,
                level: Level::L0,
                next: Level::L1,
            },
        ),
        (
            "step_to_l3",
            Reason::StepToL3 {
                ratio: 0.0011,
                low: 0.01,
                windows: 2,
                bios_per_sec: 34567.8,
                level: Level::L2,
                next_probe_in_ms: 1_800_000,
            },
        ),
        (
            "known_hostile_to_l3",
            Reason::KnownHostileToL3(Box::new(KnownHostileToL3 {
                ratio: 0.0007,
                low: 0.01,
                windows: 3,
                bios_per_sec: 45678.9,
                known: Signature {
                    bios_per_sec: 44444.4,
                    read_share: 0.3456,
                    sectors_per_bio: 9.0,
                },
                level: Level::L0,
                next_probe_in_ms: 3_600_500,
            })),
        ),
        (
            "l3_held_off",
            Reason::L3HeldOff {
                level: Level::L2,
                remaining_ms: 60_000,
            },
        ),
        (
            "nothing_merges_to_l3",
            Reason::NothingMergesToL3 {
                windows: 3,
                bios_per_sec: 273084.4,
                next_probe_in_ms: 1_800_000,
            },
        ),
    ]
}

/// At L3: what the tap and the workload's signature say.
#[allow(clippy::too_many_lines)] // a table of cases, read one after another
fn l3_cases() -> Vec<(&'static str, Reason)> {
    vec![
        (
            "sensed_mergeable",
            Reason::SensedMergeable {
                share: 0.8765,
                sampled: 512,
                high: 0.05,
            },
        ),
        (
            "answered_by_tap",
            Reason::AnsweredByTap {
                share: 0.0039,
                sampled: 256,
                low: 0.01,
                next_probe_in_ms: 3_600_000,
            },
        ),
        (
            "probe_on_change_rate_one_window",
            Reason::ProbeOnChange {
                change: RATE_UP,
                windows: 1,
            },
        ),
        (
            "probe_on_change_read_share",
            Reason::ProbeOnChange {
                change: READ_SHARE,
                windows: 4,
            },
        ),
        (
            "probe_on_change_bio_size",
            Reason::ProbeOnChange {
                change: BIO_SIZE,
                windows: 2,
            },
        ),
        (
            "known_hostile_change_rate",
            Reason::KnownHostileChange {
                change: RATE_DOWN,
                next_probe_in_ms: 900_000,
            },
        ),
        (
            "known_hostile_change_read_share",
            Reason::KnownHostileChange {
                change: READ_SHARE,
                next_probe_in_ms: 1_234,
            },
        ),
        (
            "change_unconfirmed_rate",
            Reason::ChangeUnconfirmed(Box::new(ChangeUnconfirmed {
                change: RATE_DOWN,
                windows: 10,
                lasted_ms: 500,
                next_probe_in_ms: 1_799_500,
            })),
        ),
        (
            "rate_change_awaits_tap",
            Reason::RateChangeAwaitsTap {
                from_per_sec: 84720.0,
                to_per_sec: 154360.0,
                lasted_ms: 1_000,
                next_probe_in_ms: 1_799_000,
            },
        ),
        (
            "sensed_once",
            Reason::SensedOnce {
                share: 0.111,
                sampled: 512,
                high: 0.05,
                samples: 1,
                of: 2,
            },
        ),
        (
            "worth_changed",
            Reason::WorthChanged(Box::new((
                Reason::NothingMergesToL3 {
                    windows: 3,
                    bios_per_sec: 201542.0,
                    next_probe_in_ms: 1_800_000,
                },
                "L3 saves 6.69 ms/s [4.05, 10.57]".to_string(),
            ))),
        ),
        (
            "change_answered_by_tap_bio_size",
            Reason::ChangeAnsweredByTap(Box::new(ChangeAnsweredByTap {
                change: BIO_SIZE,
                share: 0.0021,
                sampled: 128,
                low: 0.01,
                next_probe_in_ms: 600_000,
            })),
        ),
        (
            "change_answered_by_tap_rate",
            Reason::ChangeAnsweredByTap(Box::new(ChangeAnsweredByTap {
                change: RATE_UP,
                share: 0.1234,
                sampled: 64,
                low: 0.15,
                next_probe_in_ms: 1_500,
            })),
        ),
    ]
}

/// Probes out of L3 and trials of L2.
#[allow(clippy::too_many_lines)] // a table of cases, read one after another
fn probe_and_trial_cases() -> Vec<(&'static str, Reason)> {
    vec![
        (
            "timed_probe_one_window",
            Reason::TimedProbe {
                off_for_ms: 1_800_000,
                windows: 1,
            },
        ),
        (
            "timed_probe_several_windows",
            Reason::TimedProbe {
                off_for_ms: 2_500,
                windows: 5,
            },
        ),
        (
            "probe_window",
            Reason::ProbeWindow {
                window: 2,
                of: 5,
                ratio: 0.0345,
            },
        ),
        (
            "probe_inconclusive",
            Reason::ProbeInconclusive { idle_windows: 20 },
        ),
        (
            "probe_low_no_l3_blind",
            Reason::ProbeLowNoL3 {
                ratio: 0.0012,
                low: 0.01,
                bios: 54321,
                why: NoL3::Blind,
            },
        ),
        (
            "probe_low_no_l3_not_worth",
            Reason::ProbeLowNoL3 {
                ratio: 0.0012,
                low: 0.01,
                bios: 54321,
                why: NoL3::NotWorth,
            },
        ),
        (
            "probe_low_no_l3_not_allowed",
            Reason::ProbeLowNoL3 {
                ratio: 0.0012,
                low: 0.01,
                bios: 54321,
                why: NoL3::NotAllowed,
            },
        ),
        (
            "probe_low_no_l3_saving_unknown",
            Reason::ProbeLowNoL3 {
                ratio: 0.0012,
                low: 0.01,
                bios: 54321,
                why: NoL3::SavingUnknown,
            },
        ),
        (
            "probe_found_none",
            Reason::ProbeFoundNone {
                ratio: 0.0008,
                low: 0.01,
                bios: 99999,
                next_probe_in_ms: 3_600_000,
            },
        ),
        (
            "probe_found_merges_no_trial",
            Reason::ProbeFoundMerges {
                ratio: 0.3456,
                low: 0.01,
                bios: 12121,
                trial_windows: None,
            },
        ),
        (
            "probe_found_merges_trial_one_window",
            Reason::ProbeFoundMerges {
                ratio: 0.0567,
                low: 0.01,
                bios: 13131,
                trial_windows: Some(1),
            },
        ),
        (
            "probe_found_merges_trial_several_windows",
            Reason::ProbeFoundMerges {
                ratio: 0.6789,
                low: 0.01,
                bios: 14141,
                trial_windows: Some(4),
            },
        ),
        (
            "trial_inconclusive",
            Reason::TrialInconclusive { back: Level::L1 },
        ),
        ("trial_measuring", Reason::TrialMeasuring),
        (
            "trial_kept_merges",
            Reason::TrialKeptMerges {
                requests_per_bio: 0.1234,
                baseline_per_bio: 0.1212,
                limit_per_bio: 0.1236,
                back: Level::L0,
            },
        ),
        (
            "trial_lost_merges",
            Reason::TrialLostMerges {
                requests_per_bio: 0.5678,
                baseline_per_bio: 0.1234,
                limit_per_bio: 0.1259,
                back: Level::L1,
                next_trial_in_ms: 3_600_000,
            },
        ),
    ]
}

#[test]
fn every_reason_variant_has_a_case() {
    let cases = cases();
    let mut names: Vec<&str> = cases.iter().map(|(n, _)| *n).collect();
    names.sort_unstable();
    let before = names.len();
    names.dedup();
    assert_eq!(before, names.len(), "case names must be unique");
    let missing: Vec<&str> = VARIANTS
        .iter()
        .copied()
        .filter(|v| !cases.iter().any(|(_, r)| variant(r) == *v))
        .collect();
    assert!(
        missing.is_empty(),
        "Reason variants without a case in tests/golden/reasons.rs: {missing:?}"
    );
}

#[test]
fn reasons_display() {
    let mut out = String::new();
    for (name, reason) in cases() {
        out.push_str(&format!("{name} ({}): {reason}\n", variant(&reason)));
    }
    crate::check_golden("reasons.txt", &out);
}

/// `Reason` serialises as its text (`#[serde(into = "String")]`); the document pins that
/// too, one object per case.
#[test]
fn reasons_json() {
    let doc: Vec<serde_json::Value> = cases()
        .into_iter()
        .map(|(name, reason)| {
            serde_json::json!({
                "case": name,
                "variant": variant(&reason),
                "reason": reason,
            })
        })
        .collect();
    let mut out = serde_json::to_string_pretty(&doc).unwrap();
    out.push('\n');
    crate::check_golden("reasons.json", &out);
}
