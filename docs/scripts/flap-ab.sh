#!/usr/bin/env bash
# flap-ab.sh N BEFORE AFTER: N interleaved pairs of docs/scripts/flap.sh (90 s of full-rate
# random 4 KiB reads on a fresh loop device with mq-deadline, the default config) with the
# BEFORE and AFTER mergetune binaries, each run beside two busy loops (`yes > /dev/null`)
# that compete for the CPUs, the contention that moves a CPU-bound device's rate. Prints one
# line per run: the nomerges writes the daemon logged and fio's IOPS. Needs root.
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
n=$1; before=$2; after=$3
out=${FLAP_OUT:-$(mktemp -d)}
for i in $(seq 1 "$n"); do
  for b in "$before" "$after"; do
    (yes > /dev/null & yes > /dev/null & sleep 95; kill %1 %2) &
    "$here/flap.sh" "$b" mq-deadline 90 "$out/$(basename "$b")-$i" 2>&1 | head -1
    wait
  done
done
