# The slice tuner on a slow device with starving readers (sourced by main). No device in
# the guest is slower for reads than for writes by itself, so: dm-delay over a null_blk
# device, reads delayed 30 ms and writes not at all, under a loop device with direct I/O
# and a queue depth of 2 (loop.hw_queue_depth=2 on the guest's command line) running
# mq-deadline, so requests wait in its queue. Four sync random readers against one deep
# random writer for 45 s; the daemon (default [policy] and [slices], 1 s ticks) manages
# only the loop device. Reported
# either way: whether the step (writes_starved 2 -> 3) was taken, and whether it was kept
# or undone, with the ms per request the counters gave.
SLC_CONF=/root/slices.toml

slices_run() {
    modprobe dm-delay 2>/dev/null || true
    local nb
    nb="$(mk_nullb nullbdelay queue_mode=2 irqmode=0 hw_queue_depth=64 size=1024 submit_queues=1)"
    [ -n "$nb" ] || fail "null_blk for dm-delay not created"
    local s=$((1024 * 2048))
    echo "0 $s delay /dev/$nb 0 30 /dev/$nb 0 0" | dmsetup create vmlab-delay || fail "dmsetup create delay failed"
    local lo
    lo="$(losetup -f --show --direct-io=on /dev/mapper/vmlab-delay)" || fail "losetup failed"
    lo="${lo#/dev/}"
    # A loop device keeps its queue settings across detach: put its scheduler back after.
    local orig_sched
    orig_sched="$(sed 's/.*\[\(.*\)\].*/\1/' "/sys/block/$lo/queue/scheduler")"
    echo mq-deadline > "/sys/block/$lo/queue/scheduler"
    figure "slices_device $lo loop(dio=$(cat /sys/block/$lo/loop/dio), hw_queue_depth=$(cat /sys/module/loop/parameters/hw_queue_depth 2>/dev/null)) over dm-delay read 30 ms write 0 ms over $nb, mq-deadline writes_starved=$(cat /sys/block/$lo/queue/iosched/writes_starved) read_expire=$(cat /sys/block/$lo/queue/iosched/read_expire)"
    {
        echo '[daemon]'
        echo 'interval_ms = 1000'
        echo '[devices]'
        echo "include = [\"$lo\"]"
        echo '[slices]'
        echo 'enabled = true'
    } > "$SLC_CONF"
    mergetune check-config "$SLC_CONF" || fail "slices config rejected"
    local orig_ws orig_re
    orig_ws="$(cat /sys/block/$lo/queue/iosched/writes_starved)"
    orig_re="$(cat /sys/block/$lo/queue/iosched/read_expire)"
    mkdir -p /run/vmlab-slc-state
    local b a
    b="$(stat_fields "$lo")"
    fio --direct=1 --ioengine=libaio --bs=4k --time_based --runtime=45 --output=/dev/null \
        --norandommap --randrepeat=1 \
        --name=readers --filename="/dev/$lo" --rw=randread --iodepth=1 --numjobs=4 \
        --name=writer --filename="/dev/$lo" --rw=randwrite --iodepth=32 >/dev/null 2>&1 &
    LOAD_PID=$!
    sleep 2
    mergetune run --config "$SLC_CONF" --state-dir /run/vmlab-slc-state --metrics-listen "" \
        > "$OUT/slices-daemon.log" 2>&1 &
    local dpid=$! t ws_seen="$orig_ws"
    for t in $(seq 1 40); do
        sleep 1
        local ws
        ws="$(cat /sys/block/$lo/queue/iosched/writes_starved)"
        [ "$ws" != "$orig_ws" ] && ws_seen="$ws_seen,$ws@${t}s"
    done
    hostile_load_stop
    a="$(stat_fields "$lo")"
    sleep 3
    kill -TERM "$dpid"; wait "$dpid"
    local rc=$?
    local -a B=($b) A=($a)
    local r=$(( A[0] - B[0] )) rms=$(( A[3] - B[3] )) w=$(( A[4] - B[4] )) wms=$(( A[7] - B[7] ))
    local step kept undone
    step=$(grep -c 'writes_starved\|read_expire' "$OUT/slices-daemon.log" || true)
    figure "slices_outcome reads=$r read_ms_per_req=$(( r ? rms / r : 0 )) writes=$w write_ms_per_req=$(( w ? wms / w : 0 )) writes_starved_seen=$ws_seen log_lines_naming_a_slice=$step daemon_exit=$rc"
    grep -E 'writes_starved|read_expire|slices' "$OUT/slices-daemon.log" | head -n 12 | while read -r l; do figure "slices_log $l"; done
    [ "$(cat /sys/block/$lo/queue/iosched/writes_starved)" = "$orig_ws" ] || fail "writes_starved not restored"
    [ "$(cat /sys/block/$lo/queue/iosched/read_expire)" = "$orig_re" ] || fail "read_expire not restored"
    echo "$orig_sched" > "/sys/block/$lo/queue/scheduler"
    losetup -d "/dev/$lo"
    udevadm settle
    local i
    for i in $(seq 1 20); do dmsetup remove vmlab-delay 2>/dev/null && break; sleep 0.5; done
    rm_nullb nullbdelay
    [ "$rc" = 0 ] || fail "daemon exit $rc"
}
# PASS means: it ran and put everything back; whether the step happened is the figure.
check slices-run-and-restore slices_run
