#!/usr/bin/env bash
# flap.sh BIN SCHED SECS OUTDIR: a loop device over tmpfs (/dev/shm), SCHED as its scheduler, the
# default config (only include, state_dir and the metrics listen changed), fio random 4 KiB reads
# QD32 libaio at full rate (or RATE=IOPS) for SECS with the daemon BIN beside it; prints the
# nomerges writes the daemon logged and fio's IOPS, then its decision lines. Needs root; the
# device is detached and put back on exit.
set -euo pipefail
BIN=$1; SCHED=$2; SECS=$3; OUT=$4
mkdir -p "$OUT"; rm -rf "$OUT"/*
mountpoint -q /sys/kernel/tracing || mount -t tracefs tracefs /sys/kernel/tracing
img=$(mktemp /dev/shm/flap-XXXX.img); truncate -s 512M "$img"
dev=$(losetup -f --show --direct-io=on "$img"); name=${dev#/dev/}
cleanup() { kill %1 %2 2>/dev/null || true; wait 2>/dev/null || true; echo 0 > /sys/block/$name/queue/nomerges || true; echo none > /sys/block/$name/queue/scheduler || true; losetup -d "$dev"; rm -f "$img"; }
trap cleanup EXIT
echo "$SCHED" > /sys/block/$name/queue/scheduler
fio --name=warm --filename=$dev --direct=1 --rw=randread --bs=4k --size=512M --io_size=64M --ioengine=libaio --iodepth=32 --norandommap >/dev/null
cat > "$OUT/cfg.toml" <<CFG
[daemon]
state_dir = "$OUT/state"
[devices]
include = ["$name"]
[metrics]
listen = ""
CFG
fio --name=flap --filename=$dev --direct=1 --rw=randread --bs=4k --size=512M --ioengine=libaio --iodepth=32 --norandommap ${RATE:+--rate_iops=$RATE} --time_based --runtime=$SECS --output-format=terse > "$OUT/fio.txt" &
sleep 0.5
"$BIN" run --log-format text -c "$OUT/cfg.toml" > "$OUT/daemon.log" 2>&1 &
wait %1 || true
kill -TERM %2 2>/dev/null || true; wait %2 2>/dev/null || true
writes=$(grep -c "queue/nomerges [0-9] -> [0-9]" "$OUT/daemon.log" || true)
iops=$(awk -F';' '{print $8}' "$OUT/fio.txt")
echo "bin=$BIN sched=$SCHED secs=$SECS writes=$writes fio_read_iops=$iops"
grep -E "queue/nomerges|merge path on|not_worth|cap" "$OUT/daemon.log" | head -40
