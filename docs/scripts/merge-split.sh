#!/bin/bash
# Where a step to nomerges=2 saves CPU in the submitting task, split by kind: fio (random
# 4 KiB reads, libaio QD32, one CPU) on a loop device of its own over tmpfs with
# mq-deadline, `perf record -e cpu-clock -g` of that CPU at nomerges 0 and 2 in turn,
# then merge-split.py sorts each sample by its callchain. A hand measurement, not a test
# (docs/evaluation.md, "The end-to-end experiment"). Run as root on a quiet
# machine with fio, perf and python3:
#     sudo docs/scripts/merge-split.sh [ROUNDS (8)] [SECONDS_PER_LEVEL (4)]
# It creates and removes its own loop device and backing file, and puts back the device's
# scheduler and nomerges before it detaches it; it touches nothing else.
set -eu
ROUNDS=${1:-8}
SECS=${2:-4}
CPU=$(($(nproc) - 1))
OUT=$(mktemp -d /tmp/merge-split.XXXXXX)
BACKING=$(mktemp /dev/shm/merge-split.XXXXXX)
DEV=
FIO=
Q=
ORIG_SCHED=
ORIG_NOMERGES=
cleanup() {
    set +e
    if [ -n "$FIO" ]; then
        kill "$FIO" 2>/dev/null
        wait "$FIO" 2>/dev/null
    fi
    if [ -n "$DEV" ]; then
        # A loop device's queue outlives its attachment: put back what it had.
        [ -n "$ORIG_NOMERGES" ] && echo "$ORIG_NOMERGES" >"$Q/queue/nomerges"
        [ -n "$ORIG_SCHED" ] && echo "$ORIG_SCHED" >"$Q/queue/scheduler"
        losetup -d "$DEV"
    fi
    rm -f "$BACKING"
}
trap cleanup EXIT
truncate -s 16G "$BACKING"
DEV=$(losetup -f --show --direct-io=on "$BACKING")
Q=/sys/block/$(basename "$DEV")
ORIG_NOMERGES=$(cat "$Q/queue/nomerges")
ORIG_SCHED=$(sed -n 's/.*\[\(.*\)\].*/\1/p' "$Q/queue/scheduler")
echo mq-deadline >"$Q/queue/scheduler"
taskset -c "$CPU" fio --name=merge-split --filename="$DEV" --direct=1 --rw=randread --bs=4k \
    --ioengine=libaio --iodepth=32 --norandommap --randrepeat=0 --thread --time_based \
    --runtime=$((ROUNDS * SECS * 3 + 30)) --output=/dev/null &
FIO=$!
sleep 3
for round in $(seq "$ROUNDS"); do
    for nomerges in 0 2; do
        echo "$nomerges" >"$Q/queue/nomerges"
        sleep 0.5
        before=$(awk '{print $1 + $2}' "$Q/stat")
        perf record -q -e cpu-clock -F 4000 -g -C "$CPU" -o "$OUT/r$round-n$nomerges.data" \
            -- sleep "$SECS" 2>/dev/null
        after=$(awk '{print $1 + $2}' "$Q/stat")
        echo "$round $nomerges $((after - before))" >>"$OUT/ios.txt"
    done
done
echo "kernel $(uname -r), $(date -u +%FT%TZ), profiles in $OUT"
python3 "$(dirname "$0")/merge-split.py" "$OUT" 4000
