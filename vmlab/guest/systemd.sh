# The checks under systemd (sourced by main). The lab config (lab.toml) is in place and the
# service stopped; $FAST is the null_blk device the hostile load runs on.

start_after_ready() {
    local t0 t1
    t0=$(date +%s%N)
    systemctl start "$UNIT" || fail "systemctl start failed"
    t1=$(date +%s%N)
    # Type=notify: start returns once READY=1 came, i.e. the unit is already "active",
    # and the daemon set its STATUS= after the first tick.
    local state status
    state="$(unit_prop ActiveState)/$(unit_prop SubState)"
    status="$(unit_prop StatusText)"
    echo "start took $(( (t1 - t0) / 1000000 )) ms; state $state; status: $status"
    [ "$state" = active/running ] || fail "after start: $state"
    [ -n "$status" ] || fail "no STATUS= yet when start returned"
    figure systemd_start_ms "$(( (t1 - t0) / 1000000 ))"
}

status_line() {
    local s
    s="$(systemctl status --no-pager "$UNIT")"
    echo "$s"
    echo "$s" | grep -q '^ *Status: "' || fail "systemctl status has no Status: line"
    echo "$s" | grep -q 'managed' || fail "the Status: line does not say what is managed"
}

actuates() {
    hostile_load_start "$FAST"
    local t0=$(date +%s) rc=0
    wait_for 90 nomerges_is "$FAST" 2 || rc=1
    hostile_load_stop
    [ $rc = 0 ] || fail "$FAST nomerges $(nomerges_of "$FAST") after 90 s of random reads"
    figure systemd_random_to_nomerges2_s "$(( $(date +%s) - t0 ))"
}

# The shipped unit with the shipped defaults (only the device list changed: the lab's
# null_blk devices): the live pricing must work under systemd's sandbox (the unit once
# took CAP_SYSLOG away and nothing was ever priced), step down under random reads at
# the device's full rate, and hold the decision: at most 2 nomerges writes in 90 s.
default_pricing() {
    local since t0 rc=0 writes price
    systemctl stop "$UNIT"
    # The checks before started it more often than StartLimitBurst= allows in its interval.
    systemctl reset-failed "$UNIT" 2>/dev/null || true
    printf '[devices]\ninclude = ["nullb*"]\n' > /etc/mergetune/mergetune.toml
    since="$(date '+%Y-%m-%d %H:%M:%S')"
    systemctl start "$UNIT" || fail "start with the default config failed"
    hostile_load_start "$FAST"
    # Debian's kernels default to kernel.perf_event_paranoid=3, a Debian patch whose 6.1
    # version refuses perf_event_open to anything without CAP_SYS_ADMIN (CAP_PERFMON is
    # not enough there): the daemon then says "Permission denied" and prices nothing. The
    # lab records whether the kernel needed paranoid 2 (docs/hardening.md says what an
    # operator does), and the check goes on with it.
    if wait_for 10 sh -c "journalctl -u $UNIT --since '$since' --no-pager | grep -q 'merge-path sampler unavailable'"; then
        figure default_pricing_paranoid "$(cat /proc/sys/kernel/perf_event_paranoid) refused, 2 set"
        sysctl -q -w kernel.perf_event_paranoid=2
        since="$(date '+%Y-%m-%d %H:%M:%S')"
        systemctl reset-failed "$UNIT" 2>/dev/null || true
        systemctl restart "$UNIT" || fail "restart failed"
    else
        figure default_pricing_paranoid "$(cat /proc/sys/kernel/perf_event_paranoid) accepted"
    fi
    t0=$(date +%s)
    wait_for 60 nomerges_is "$FAST" 2 || rc=1
    figure default_pricing_to_nomerges2_s "$(( $(date +%s) - t0 ))"
    sleep $(( 90 - ($(date +%s) - t0) > 0 ? 90 - ($(date +%s) - t0) : 0 ))
    hostile_load_stop
    local j
    j="$(journalctl -u "$UNIT" --since "$since" --no-pager)"
    price="$(echo "$j" | grep -m1 -o 'merge path on [^:]*: [0-9]* ns per bio \[[0-9]*, [0-9]*\]' || true)"
    writes="$(echo "$j" | grep -c "$FAST: queue/nomerges [0-9] -> [0-9]" || true)"
    figure default_pricing_price "\"$price\""
    figure default_pricing_price_mq_deadline "\"$(echo "$j" | grep -m1 -o 'merge path on mq-deadline[^:]*: [0-9]* ns per bio \[[0-9]*, [0-9]*\]' || true)\""
    figure default_pricing_writes_90s "$writes"
    echo "$j" | grep -E "merge-path sampler|merge path on|$FAST: (queue/nomerges|not_worth_it)" | head -n 12
    # As the checks before left it: stopped, with the lab config, and its start counter
    # fresh for the checks after.
    systemctl stop "$UNIT"
    systemctl reset-failed "$UNIT" 2>/dev/null || true
    install -m 0644 "$LAB/guest/lab.toml" /etc/mergetune/mergetune.toml
    [ -n "$price" ] || fail "no merge-path price in the journal under the shipped unit"
    [ $rc = 0 ] || fail "$FAST never reached nomerges 2 in 60 s of random reads with the default pricing"
    [ "$writes" -le 2 ] || fail "$writes nomerges writes in 90 s of a steady load (at most 2)"
}

# A host that looks real, under the shipped unit and defaults: one null_blk device per
# scheduler the kernel has (none, mq-deadline, kyber, bfq; main loads their modules before
# the originals are taken), all busy at once with different loads on 2 TCG vCPUs (the
# loads themselves are the CPU contention). Random 4 KiB reads or writes on three of them,
# batched sequential 4 KiB writes (which the kernel merges) on kyber's. Each device must
# have a price line of its own (resolved, or saying how many samples it still needs) and
# end where its own price says: under batched writes at 0; under random I/O at 2 when its
# last resolved price's lower bound at the rate the check measures clears the floor (5 ms
# of CPU per second) twice over, at 0 when its upper bound is under half the floor or
# there is no resolved price (either level in between: the rate moves, and a device that
# stepped down at a faster rate leaves L3 only when the upper bound stays under the floor;
# on 6.12 bfq stepped down at 3930 bios/s, a saving of [6.1, 10.2] ms/s at 2026 ns per bio
# [1560, 2587], and ran at 1538 bios/s over the check's last 30 s: [2.4, 4.0] ms/s). Needs paranoid <= 2
# (default_pricing, just before, left it there).
# At most 2 nomerges writes per device in the 90 s: four busy devices on 2 TCG vCPUs move
# each other's rates by 3.4-3.8x, which once probed at L3 (3 writes for bfq on both
# kernels); a change of rate alone now asks the bio tap instead (docs/policy.md).
# The shipped defaults' busy threshold: min_window_bios (1000) per window (2 ticks of
# 1000 ms).
BUSY_BIOS_PER_SEC=500
multi_device_host() {
    local since rc=0 j d sched load names=() pids=() kinds=() io0 io1
    local -A dev_of
    systemctl stop "$UNIT"
    systemctl reset-failed "$UNIT" 2>/dev/null || true
    for sched in none mq-deadline kyber bfq; do
        d="$(mk_nullb "nullbm${sched//-/}" queue_mode=2 irqmode=0 hw_queue_depth=64 size=1024 submit_queues=1)"
        [ -n "$d" ] || fail "cannot create the null_blk device for $sched"
        if ! echo "$sched" > "/sys/block/$d/queue/scheduler" 2>/dev/null; then
            figure multi_device_unavailable "\"$sched: not in $(cat "/sys/block/$d/queue/scheduler")\""
            rm_nullb "nullbm${sched//-/}"
            continue
        fi
        echo 0 > "/sys/block/$d/queue/nomerges"
        dev_of[$sched]="$d"
        names+=("$d")
    done
    trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait; for s in none mq-deadline kyber bfq; do rm_nullb "nullbm${s//-/}"; done' EXIT
    printf '[devices]\ninclude = ["nullbm*"]\n' > /etc/mergetune/mergetune.toml
    since="$(date '+%Y-%m-%d %H:%M:%S')"
    systemctl start "$UNIT" || fail "start with the default config failed"
    for sched in "${!dev_of[@]}"; do
        d="${dev_of[$sched]}"
        case "$sched" in
            mq-deadline) load="--rw=randwrite --norandommap"; kinds+=("$d=random") ;;
            kyber) load="--rw=write --iodepth_batch_submit=32 --iodepth_batch_complete_min=32"; kinds+=("$d=batched") ;;
            *) load="--rw=randread --norandommap"; kinds+=("$d=random") ;;
        esac
        # shellcheck disable=SC2086
        fio --name="m$d" --filename="/dev/$d" --direct=1 --bs=4k --ioengine=libaio --iodepth=32 \
            $load --randrepeat=1 --time_based --runtime=120 --output=/dev/null >/dev/null 2>&1 &
        pids+=($!)
    done
    sleep 60
    io0="$(for d in "${names[@]}"; do echo "$d $(awk '{print $1 + $5}' "/sys/block/$d/stat")"; done)"
    sleep 30
    io1="$(for d in "${names[@]}"; do echo "$d $(awk '{print $1 + $5}' "/sys/block/$d/stat")"; done)"
    j="$(journalctl -u "$UNIT" --since "$since" --no-pager)"
    echo "$j" | grep -E "merge path on|queue/nomerges|not_worth_it|saving_unknown" | tail -n 30
    local i kind writes said price lo hi rate want final
    for i in "${kinds[@]}"; do
        d="${i%=*}" kind="${i#*=}"
        writes="$(echo "$j" | grep -c "$d: queue/nomerges [0-9] -> [0-9]" || true)"
        said="$(echo "$j" | grep -o "$d: merge path on .*" | tail -n1)"
        price="$(echo "$j" | grep "$d: merge path on " | grep -v 'not resolved yet' | tail -n1 | grep -o '[0-9]* ns per bio \[[0-9]*, [0-9]*\]' || true)"
        lo="$(echo "$price" | sed -n 's/.*\[\([0-9]*\),.*/\1/p')"
        hi="$(echo "$price" | sed -n 's/.*, \([0-9]*\)\]/\1/p')"
        # Bios completed per second over the last 30 s (merged ones count once: the rate
        # the merge path sees is at least this).
        rate="$(( ($(echo "$io1" | awk -v d="$d" '$1 == d {print $2}') - $(echo "$io0" | awk -v d="$d" '$1 == d {print $2}')) / 30 ))"
        final="$(nomerges_of "$d")"
        if [ "$kind" = batched ]; then
            want=0
        elif [ -z "$lo" ]; then
            want=0
        else
            # The band, as the daemon applies it: a step down needs the saving's lower
            # end over the floor, and L3 is left only when its upper end stays under it.
            want="$(awk -v lo="$lo" -v hi="$hi" -v r="$rate" 'BEGIN { print (lo * r / 1e6 >= 10 ? 2 : (hi * r / 1e6 < 2.5 ? 0 : "either")) }')"
        fi
        sched="$(sed -n 's/.*\[\(.*\)\].*/\1/p' "/sys/block/$d/queue/scheduler")"
        figure "multi_device_${sched//-/_}" "\"$d $kind, $rate bios/s: final nomerges $final (expected $want), $writes writes in 90 s; ${said:-no price line}\""
        # A device under the daemon's busy threshold is never sampled (nor decided on):
        # no price line is then right, and the figure says so. It happens when the host
        # starves the guest (4 devices at 89-707 bios/s on a host running the real-kernel
        # suite beside the lab).
        [ -n "$said" ] || [ "$rate" -lt "$BUSY_BIOS_PER_SEC" ] || rc=1
        [ "$writes" -le 2 ] || rc=1
        [ "$want" = either ] || [ "$final" = "$want" ] || rc=1
    done
    systemctl stop "$UNIT"
    systemctl reset-failed "$UNIT" 2>/dev/null || true
    install -m 0644 "$LAB/guest/lab.toml" /etc/mergetune/mergetune.toml
    [ $rc = 0 ] || fail "a device of ${#names[@]} busy ones had no price line of its own, more than 2 writes in 90 s or a final level its own price does not give (figures above)"
}

# A host as Debian 12 and 13 boot (kernel.perf_event_paranoid 3: perf_event_open refused
# to the unit's CAP_PERFMON) is never inert in silence: with the shipped defaults the daemon
# says so at start (before any load) with the fix, and status and /metrics say it; under
# random reads it then writes nothing (the safe side). With [pricing] fallback_profile the
# devices are priced by it and the load steps down. The built-in lkml-2008 stands in for a
# profile `mergetune-lab calibrate` would measure on the host (stated figures apply on any
# kernel; a calibration under TCG takes too long for the lab's budget).
inert_host() {
    local p0 since rc=0 j writes
    p0="$(cat /proc/sys/kernel/perf_event_paranoid)"
    figure inert_host_paranoid_at_boot "$p0"
    # A kernel that boots at 2 is not the case under test: set 3 for the check, put back.
    [ "$p0" -ge 3 ] || sysctl -q -w kernel.perf_event_paranoid=3
    systemctl stop "$UNIT"
    systemctl reset-failed "$UNIT" 2>/dev/null || true
    printf '[devices]\ninclude = ["nullb*"]\n' > /etc/mergetune/mergetune.toml
    since="$(date '+%Y-%m-%d %H:%M:%S')"
    systemctl start "$UNIT" || rc=1
    if [ $rc = 0 ]; then
        wait_for 15 sh -c "journalctl -u $UNIT --since '$since' --no-pager | grep -q 'merge-path sampler unavailable'" || rc=2
    fi
    j="$(journalctl -u "$UNIT" --since "$since" --no-pager)"
    echo "$j" | grep -m1 'merge-path sampler unavailable'
    if [ $rc = 0 ]; then
        echo "$j" | grep 'merge-path sampler unavailable' | grep -q 'perf_event_paranoid is 3' || rc=3
        echo "$j" | grep 'merge-path sampler unavailable' | grep -q '/etc/sysctl.d/60-mergetune-perf.conf' || rc=3
        /usr/bin/mergetune status | grep -q '^merge-path sampler unavailable' || rc=4
        metrics | grep -q '^mergetune_merge_sampler_unavailable 1' || rc=5
    fi
    if [ $rc = 0 ]; then
        hostile_load_start "$FAST"
        sleep 30
        hostile_load_stop
        nomerges_is "$FAST" 0 || rc=6
        figure inert_host_nomerges_after_30s_random "$(nomerges_of "$FAST")"
    fi
    if [ $rc = 0 ]; then
        systemctl stop "$UNIT"
        systemctl reset-failed "$UNIT" 2>/dev/null || true
        printf '[devices]\ninclude = ["nullb*"]\n[pricing]\nfallback_profile = "lkml-2008"\n' > /etc/mergetune/mergetune.toml
        since="$(date '+%Y-%m-%d %H:%M:%S')"
        systemctl start "$UNIT" || rc=7
        hostile_load_start "$FAST"
        local t0=$(date +%s)
        wait_for 60 nomerges_is "$FAST" 2 || rc=8
        figure inert_host_fallback_to_nomerges2_s "$(( $(date +%s) - t0 ))"
        metrics | grep -q "^mergetune_device_pricing{basis=\"profile\",device=\"$FAST\"} 1" || rc=9
        sleep $(( 90 - ($(date +%s) - t0) > 0 ? 90 - ($(date +%s) - t0) : 0 ))
        hostile_load_stop
        j="$(journalctl -u "$UNIT" --since "$since" --no-pager)"
        echo "$j" | grep -m1 'fallback_profile'
        writes="$(echo "$j" | grep -c "$FAST: queue/nomerges [0-9] -> [0-9]" || true)"
        figure inert_host_fallback_writes_90s "$writes"
        echo "$j" | grep -q 'priced by \[pricing\] fallback_profile lkml-2008' || rc=10
    fi
    # As the checks before left it: stopped, the lab config, the boot's sysctl.
    systemctl stop "$UNIT"
    systemctl reset-failed "$UNIT" 2>/dev/null || true
    install -m 0644 "$LAB/guest/lab.toml" /etc/mergetune/mergetune.toml
    sysctl -q -w kernel.perf_event_paranoid="$p0"
    case $rc in
        0) ;;
        1) fail "start with the shipped defaults failed" ;;
        2) fail "no 'merge-path sampler unavailable' in the journal within 15 s of the start, before any load" ;;
        3) fail "the start's warning does not name the sysctl's value and its drop-in" ;;
        4) fail "mergetune status does not say the sampler is unavailable" ;;
        5) fail "mergetune_merge_sampler_unavailable is not 1" ;;
        6) fail "$FAST nomerges $(nomerges_of "$FAST") with nothing priced" ;;
        7) fail "start with a fallback profile failed" ;;
        8) fail "$FAST never reached nomerges 2 in 60 s of random reads with the fallback profile" ;;
        9) fail "$FAST is not priced by a profile in /metrics" ;;
        10) fail "the journal does not say the fallback profile prices the devices" ;;
    esac
}

journal_fields() {
    local j
    j="$(journalctl -u "$UNIT" -o verbose --no-pager "DEVICE=$FAST")"
    for f in DEVICE FROM TO REASON; do
        echo "$j" | grep -q "^ *$f=" || fail "no $f= field in the journal entries for $FAST"
    done
    echo "$j" | grep -E '^ *(DEVICE|FROM|TO|REASON)=' | head -n 8
}

reload_bad_config() {
    local pid since
    pid="$(unit_prop MainPID)"
    since="$(date '+%Y-%m-%d %H:%M:%S')"
    sleep 1
    sed 's/^min_dwell_secs = 1$/min_dwell_secs = 1\ndisable_below_percent = 9.0/' "$LAB/guest/lab.toml" > /etc/mergetune/mergetune.toml
    grep -q disable_below_percent /etc/mergetune/mergetune.toml || fail "bad config not written"
    systemctl reload "$UNIT" || fail "systemctl reload failed"
    wait_for 10 sh -c "journalctl -u $UNIT --since '$since' --no-pager | grep -q 'new config rejected'" \
        || fail "no 'new config rejected' in the journal"
    local msg
    msg="$(journalctl -u "$UNIT" --since "$since" --no-pager | grep 'new config rejected')"
    echo "$msg"
    echo "$msg" | grep -q 'disable_below_percent' || fail "the journal does not name the key: $msg"
    [ "$(unit_prop MainPID)" = "$pid" ] || fail "daemon restarted (pid $pid -> $(unit_prop MainPID))"
    systemctl is-active --quiet "$UNIT" || fail "not active after the bad reload"
    # The old config stays: the daemon still answers on its endpoint and counts the failure.
    metrics | grep -q '^mergetune_config_reloads_total{result="failure"} 1' \
        || fail "metrics do not count one failed reload"
    install -m 0644 "$LAB/guest/lab.toml" /etc/mergetune/mergetune.toml
    systemctl reload "$UNIT" || fail "good reload failed"
    sleep 1
    metrics | grep -q '^mergetune_config_reloads_total{result="success"} 1' \
        || fail "the good reload after it was not counted as a success"
}

# wait_restart_pending N: waits until the unit sits in auto-restart (stopped, ExecStopPost
# done, RestartSec running) or has already restarted more than N times.
in_auto_restart() { [ "$(unit_prop SubState)" = auto-restart ]; }

watchdog() {
    systemctl is-active --quiet "$UNIT" || systemctl start "$UNIT"
    actuate || return 1
    local pid n0 t0
    pid="$(unit_prop MainPID)"
    n0="$(unit_prop NRestarts)"
    t0=$(date +%s)
    kill -STOP "$pid"
    # WatchdogSec=30s: systemd sends SIGABRT, then ExecStopPost (restore), then auto-restart.
    wait_for 60 in_auto_restart || fail "no auto-restart within 60 s of SIGSTOP (state $(unit_prop ActiveState)/$(unit_prop SubState))"
    figure systemd_watchdog_fired_after_s "$(( $(date +%s) - t0 ))"
    # Checked while the unit waits for its restart: only ExecStopPost can have restored.
    originals_in_place "$OUT/originals.txt" || return 1
    journalctl -u "$UNIT" --no-pager -n 50 | grep -qi 'watchdog timeout' || fail "journal has no watchdog timeout"
    wait_for 30 systemctl is-active --quiet "$UNIT" || fail "not restarted"
    [ "$(unit_prop NRestarts)" -gt "$n0" ] || fail "NRestarts did not grow"
    [ "$(unit_prop MainPID)" != "$pid" ] || fail "same pid after restart"
}

kill_nine() {
    systemctl is-active --quiet "$UNIT" || systemctl start "$UNIT"
    actuate || return 1
    systemctl kill -s KILL "$UNIT"
    wait_for 20 in_auto_restart || fail "no auto-restart after SIGKILL ($(unit_prop ActiveState)/$(unit_prop SubState))"
    originals_in_place "$OUT/originals.txt" || return 1
    wait_for 30 systemctl is-active --quiet "$UNIT" || fail "not restarted after SIGKILL"
}

stop_restores() {
    systemctl is-active --quiet "$UNIT" || systemctl start "$UNIT"
    actuate || return 1
    systemctl stop "$UNIT" || fail "stop failed"
    originals_in_place "$OUT/originals.txt" || return 1
    journalctl -u "$UNIT" --no-pager -n 60 | grep -q 'restoring original values' || fail "no 'restoring original values' in the journal"
}

analyze_security() {
    local out line score
    out="$(systemd-analyze security --no-pager "$UNIT" 2>&1)"
    line="$(echo "$out" | grep 'Overall exposure level')"
    echo "$line"
    score="$(echo "$line" | sed 's/.*: *\([0-9.]*\) .*/\1/')"
    figure systemd_analyze_security "$score $(echo "$line" | sed "s/.*: *[0-9.]* \([A-Z]*\).*/\1/")"
    echo "$line" | grep -Eq ' (OK|SAFE)' || fail "rated: $line"
}
