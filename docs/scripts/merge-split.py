#!/usr/bin/env python3
"""Sorts merge-split.sh's samples by callchain and prints ns per I/O at each level.

Usage: merge-split.py DIR SAMPLE_HZ. DIR holds ios.txt ("round nomerges ios" lines) and
rROUND-nLEVEL.data perf files. A sample stands for 1/SAMPLE_HZ s of CPU.
"""
import collections
import statistics
import subprocess
import sys

# The functions the daemon's sampler classes as the merge path (crates/kernel/src/perf.rs).
MERGE = {
    "blk_attempt_plug_merge", "blk_mq_sched_bio_merge", "blk_bio_list_merge",
    "blk_mq_sched_try_merge", "blk_mq_sched_try_insert_merge", "elv_merge", "dd_bio_merge",
}


def kind(comm, syms):
    if comm != "fio":
        return "other tasks on the CPU"
    if any(s in MERGE for s in syms):
        return "merge path (as the sampler classes it)"
    # cpu-clock cannot fire with interrupts off: the time loop_queue_rq spends under
    # spin_lock_irq, queueing and waking the device's kworker, lands on the unlock.
    if syms and syms[0] == "_raw_spin_unlock_irq" and "loop_queue_rq" in syms[:3]:
        return "loop_queue_rq, interrupts off (the kworker hand-off)"
    if syms and syms[0] == "blk_mq_submit_bio":
        return "blk_mq_submit_bio itself (the inlined merge checks among it)"
    return "the rest of fio (user and kernel)"


def main():
    d, hz = sys.argv[1], float(sys.argv[2])
    ns_per_sample = 1e9 / hz
    ios = {}
    for line in open(f"{d}/ios.txt"):
        r, lv, n = line.split()
        ios[(r, lv)] = int(n)
    per = collections.defaultdict(lambda: collections.defaultdict(dict))
    for (r, lv), n in sorted(ios.items()):
        out = subprocess.run(
            ["perf", "script", "-i", f"{d}/r{r}-n{lv}.data", "-F", "comm,ip,sym"],
            capture_output=True, text=True, check=True,
        ).stdout
        counts = collections.Counter()
        for block in out.split("\n\n"):
            lines = [l.split() for l in block.strip().split("\n") if l.strip()]
            if not lines:
                continue
            syms = [f[1] if len(f) > 1 else "?" for f in lines[1:]]
            counts[kind(lines[0][0], syms)] += 1
        for k, v in counts.items():
            per[k][lv][r] = v * ns_per_sample / n
    rounds = sorted({r for r, _ in ios})
    print("ns per I/O on fio's CPU: median over rounds at nomerges 0 and 2, and per round 0 minus 2")
    for k in sorted(per):
        a = [per[k]["0"].get(r, 0.0) for r in rounds]
        b = [per[k]["2"].get(r, 0.0) for r in rounds]
        diff = [x - y for x, y in zip(a, b)]
        print(f"{k:60s} {statistics.median(a):6.0f} {statistics.median(b):6.0f}  "
              f"saving median {statistics.median(diff):5.0f}, per round {[round(x) for x in diff]}")


main()
