//! The text report of `advise`: the analysis, the recommendations and the what-if table
//! of each device, in the order an operator reads them.

use super::report::{Analysis, DeviceReport, pct};
use super::whatif::WhatIf;
use mergetune_kernel::scheduler::Scheduler;
use mergetune_logic::decision::Level;
use std::fmt::Write as _;

/// Renders the analysis as text, one report top to bottom, a section after another, in the
/// order the operator reads it.
pub fn render_text(a: &Analysis, what_ifs: &[WhatIf]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} lines, {} block events, {} device(s)",
        a.lines,
        a.events,
        a.devices.len()
    );
    for n in &a.notes {
        let _ = writeln!(s, "note: {n}");
    }
    for b in &a.bad_examples {
        let _ = writeln!(s, "  skipped line {}: {}", b.line, b.message);
    }
    for d in &a.devices {
        write_traffic(&mut s, d);
        write_timing(&mut s, d);
        let _ = writeln!(s, "recommendations:");
        for r in &d.recommendations {
            let _ = writeln!(
                s,
                "  {:<12} {}\n               because {}",
                r.topic, r.setting, r.evidence
            );
        }
        for w in what_ifs.iter().filter(|w| w.device == d.device) {
            write_what_if(&mut s, w, d.recommended_level);
        }
    }
    s
}

/// A device's traffic: bios, sizes, distances, the merges seen and what each ladder level
/// keeps.
fn write_traffic(s: &mut String, d: &DeviceReport) {
    let _ = writeln!(s, "\n== device {} ({:.3} s traced)", d.device, d.span_s);
    let _ = writeln!(
        s,
        "bios {}  ({:.1} MB, {:.0} bios/s, {:.1} MB/s)  reads {:.1}%  writes {:.1}%  sync {:.1}%",
        d.bios,
        d.bytes as f64 / 1e6,
        d.bios_per_s,
        d.mb_per_s,
        d.read_percent,
        100.0 - d.read_percent,
        d.sync_percent
    );
    if d.flush_or_discard + d.splits > 0 {
        let _ = writeln!(
            s,
            "flushes/discards {}  splits {}",
            d.flush_or_discard, d.splits
        );
    }
    let _ = writeln!(s, "sizes:");
    for (l, n) in &d.size_hist {
        let _ = writeln!(s, "  {l:>10}  {n:>9}  {:>5.1}%", pct(*n, d.bios));
    }
    let _ = writeln!(
        s,
        "distance to the previous bio:       same task       overall"
    );
    for (i, (l, n)) in d.distance_per_task.iter().enumerate() {
        let o = d.distance_overall[i].1;
        if *n + o == 0 {
            continue;
        }
        let _ = writeln!(
            s,
            "  {l:<48} {:>6.1}%  {:>6.1}%",
            pct(*n, d.bios),
            pct(o, d.bios)
        );
    }
    let _ = writeln!(
        s,
        "merges{}: back {}  front {}  ({:.1}% of bios; {} simple: plug/one-hit)",
        if d.merges_estimated {
            " (estimated)"
        } else {
            " the kernel made"
        },
        d.back_merges,
        d.front_merges,
        d.merge_percent,
        d.simple_merges
    );
    let _ = writeln!(
        s,
        "merge ladder:  level  tunables                     kept  lost (% of bios)"
    );
    for l in &d.ladder {
        let _ = writeln!(
            s,
            "               {}     {:<28} {:>5.1}%  {:>5.2}%",
            l.level, l.tunables, l.kept_percent, l.lost_percent_of_bios
        );
    }
}

/// A device's queue depth and completion latency, and a clock that stepped back.
fn write_timing(s: &mut String, d: &DeviceReport) {
    if d.issues + d.completes > 0 {
        let _ = writeln!(
            s,
            "queue depth (requests issued, not completed): max {}  mean of per-bucket peaks {:.1}",
            d.queue_depth_max, d.queue_depth_mean
        );
    }
    for (name, l) in [("read", &d.read_latency), ("write", &d.write_latency)] {
        if let Some(l) = l {
            let _ = writeln!(
                s,
                "{name} completion latency: {} requests, mean {:.1} µs, p50 {:.1} µs, p99 {:.1} µs, max {:.1} µs",
                l.requests, l.mean_us, l.p50_us, l.p99_us, l.max_us
            );
        }
    }
    if d.out_of_order_events > 0 {
        let _ = writeln!(
            s,
            "note: {} event(s) more than 1 ms earlier than the one before (several CPUs' buffers); counted in file order",
            d.out_of_order_events
        );
    }
}

/// One what-if table: the modelled candidates of the device's trace, the daemon's level
/// marked.
fn write_what_if(s: &mut String, w: &WhatIf, recommended: Level) {
    let _ = writeln!(
        s,
        "what-if: {} bios{} over {:.3} s; {}",
        w.bios,
        if w.truncated {
            " (the first ones only)"
        } else {
            ""
        },
        w.span_s,
        w.model
    );
    let _ = writeln!(
        s,
        "  {:<18} {:>7} {:>8} {:>9} {:>8} {:>10} {:>10} {:>10} {:>10}",
        "candidate",
        "merge%",
        "requests",
        mergetune_sim::report::per_unit_label(w.unit, "bio"),
        "MB/s",
        "R mean µs",
        "R p99 µs",
        "W mean µs",
        "W p99 µs"
    );
    let _ = writeln!(
        s,
        "  (a model of this trace's bios, not a decision: the recommendation above is what the daemon's rules and cost profile decide, and the daemon never changes the scheduler)"
    );
    let base = w.rows.first().map(|r| r.cycles_per_bio).unwrap_or(0.0);
    for r in &w.rows {
        let mark = if r.scheduler == Scheduler::MqDeadline && r.level == recommended {
            " <- recommended (the daemon's level)"
        } else {
            ""
        };
        let _ = writeln!(
            s,
            "  {:<18} {:>7.1} {:>8} {:>9.0} {:>8.1} {:>10.1} {:>10.1} {:>10.1} {:>10.1}{}{mark}",
            r.label,
            r.merge_percent,
            r.requests,
            r.cycles_per_bio,
            r.mb_per_s,
            r.read_mean_us,
            r.read_p99_us,
            r.write_mean_us,
            r.write_p99_us,
            if base > 0.0 && r.label != "L0" {
                format!(
                    "  ({:+.1}% CPU vs L0)",
                    (r.cycles_per_bio / base - 1.0) * 100.0
                )
            } else {
                String::new()
            }
        );
    }
}
