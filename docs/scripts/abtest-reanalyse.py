#!/usr/bin/env python3
"""Reads real_kernel_abtest's block CSVs again and prints the sampler against the savings
measured end to end, pair by pair.

Usage: abtest-reanalyse.py FILE.csv... (the test writes target/tmp/abtest-CELL-TIME.csv).

The rules are those of crates/lab/src/abtest/analysis.rs, repeated here for files the
binary has no command to read: a block counts when it did I/O, no counted task exited
and fio's submitting thread was on CPU at least 95% of it; a pair counts when both its
blocks count and both carry a whole sample of the merge path. Medians with the narrowest
order-statistic interval of at least the coverage asked for (95%, or
AGREEMENT_COVERAGE = 99.9% for the paired differences). ns per I/O, L0 - L3.
"""
import csv
import sys

MIN_BUSY = 0.95
AGREEMENT_COVERAGE = 0.999


def binom_half_cdf(n, k):
    c, total = 1.0, 0.0
    for i in range(0, min(k, n) + 1):
        if i > 0:
            c = c * (n - i + 1) / i
        total += c
    return total / 2**n


def estimate(xs, level):
    v = sorted(xs)
    n = len(v)
    coverage = lambda k: 1 - 2 * binom_half_cdf(n, k - 1)
    k = 1
    while k < (n + 1) // 2 and coverage(k + 1) >= level:
        k += 1
    median = v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2
    return median, v[k - 1], v[n - k], coverage(k)


def counts(b):
    ios, wall = int(b["ios"]), int(b["wall_ns"])
    return (ios > 0 and wall > 0 and int(b["tasks_exited"]) == 0
            and int(b["submitter_ns"]) / wall >= MIN_BUSY)


def per_io(b, *cols):
    return sum(int(b[c]) for c in cols) / int(b["ios"])


def show(e):
    return "%.0f [%.0f, %.0f]" % e[:3]


def main(paths):
    for path in paths:
        pairs = {}
        for row in csv.DictReader(open(path)):
            pairs.setdefault(row["pair"], {})[row["level"]] = row
        sampled, whole, over_fio, over_whole = [], [], [], []
        for p in pairs.values():
            b, t = p.get("L0"), p.get("L3")
            if not (b and t and counts(b) and counts(t)):
                continue
            if b["merge_path_ns"] == "" or t["merge_path_ns"] == "":
                continue
            s = per_io(b, "merge_path_ns") - per_io(t, "merge_path_ns")
            fio = per_io(b, "fio_ns") - per_io(t, "fio_ns")
            all_ = per_io(b, "fio_ns", "kworker_ns") - per_io(t, "fio_ns", "kworker_ns")
            sampled.append(s)
            whole.append(all_)
            over_fio.append(s - fio)
            over_whole.append(s - all_)
        if not sampled:
            print(f"{path}: no pair counts")
            continue
        ex = estimate(over_whole, AGREEMENT_COVERAGE)
        verdict = "over" if ex[1] > 0 else "under" if ex[2] < 0 else "within"
        print(f"{path}: {len(sampled)} pairs; sampled {show(estimate(sampled, 0.95))}; "
              f"whole {show(estimate(whole, 0.95))}; sampled - fio's tasks "
              f"{show(estimate(over_fio, AGREEMENT_COVERAGE))}; sampled - whole {show(ex)} "
              f"({ex[3] * 100:.2f}%): {verdict}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
