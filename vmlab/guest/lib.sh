# Shared helpers of the guest-side checks (sourced by main and the group scripts).
LAB=/lab
OUT=$LAB/out
RES=$OUT/results.txt
FIG=$OUT/figures.txt
UNIT=mergetune.service

say() { echo "vmlab: $*"; }

# The results file goes to the raw results disk (vdc) after every line, synced: the host
# reads it even if the guest hangs later or is killed.
flush_results() {
    dd if="$RES" of=/dev/vdc bs=64k conv=fsync,notrunc status=none 2>/dev/null || true
}
result() {
    echo "$*" >> "$RES"
    flush_results
    say "$*"
}
# check NAME FUNCTION [ARGS]: PASS when the function succeeds, else FAIL with its last
# line of output as the reason. Its whole output goes to out/checks.log. The function runs
# in a subshell, so `fail` ends the check there; a background load it started is stopped.
check() {
    local name="$1"; shift
    local log t0
    log="$(mktemp)"
    t0=$(date +%s)
    echo "=== $name" >> "$OUT/checks.log"
    if ( trap hostile_load_stop EXIT; "$@" ) > "$log" 2>&1; then
        cat "$log" >> "$OUT/checks.log"
        result "PASS $name"
    else
        cat "$log" >> "$OUT/checks.log"
        result "FAIL $name: $(grep -v '^[[:space:]]*$' "$log" | tail -n1)"
    fi
    # Where the guest's time goes (it runs under a timeout): one line per check.
    echo "--- $name took $(( $(date +%s) - t0 )) s" >> "$OUT/checks.log"
    rm -f "$log"
}
# figure KEY VALUE...: a measured figure, for the host's figures file.
figure() {
    echo "$*" >> "$FIG"
    say "figure $*"
}
# Inside a check (a subshell): the reason, and the check ends.
fail() { echo "$*"; exit 1; }

# Every queue tunable of every block device, one "dev attr value" a line: what mergetune
# may write (nomerges, iosched/*) plus the scheduler.
snapshot() {
    local d a
    for d in /sys/block/*; do
        [ -r "$d/queue/nomerges" ] || continue
        echo "${d##*/} nomerges $(cat "$d/queue/nomerges")"
        echo "${d##*/} scheduler $(cat "$d/queue/scheduler")"
        if [ -d "$d/queue/iosched" ]; then
            for a in "$d"/queue/iosched/*; do
                echo "${d##*/} iosched/${a##*/} $(cat "$a" 2>/dev/null)"
            done
        fi
    done
}
# originals_in_place FILE: every line of the snapshot in FILE still holds (devices that
# vanished since are ignored); prints the differences.
originals_in_place() {
    local want="$1" now
    now="$(mktemp)"
    snapshot > "$now"
    local diffs
    diffs="$(grep -Fxv -f "$now" "$want" | while read -r dev attr val; do
        [ -e "/sys/block/$dev" ] && echo "$dev $attr was $val now $(grep "^$dev $attr " "$now" | cut -d' ' -f3-)"
    done)"
    rm -f "$now"
    if [ -n "$diffs" ]; then
        echo "$diffs"
        fail "not restored: $(echo "$diffs" | head -n3 | tr '\n' ';')"
    fi
}

# mk_nullb NAME key=value...: a null_blk device through configfs (each with its own
# latency and depth); prints its /sys/block name.
mk_nullb() {
    local name="$1"; shift
    local d=/sys/kernel/config/nullb/$name kv before after
    mkdir "$d"
    for kv in "$@"; do
        if [ -e "$d/${kv%%=*}" ]; then
            echo "${kv#*=}" > "$d/${kv%%=*}"
        else
            echo "null_blk on $(uname -r) has no configfs attribute ${kv%%=*}: left at its default" >&2
        fi
    done
    before="$(ls /sys/block)"
    echo 1 > "$d/power"
    udevadm settle
    after="$(ls /sys/block)"
    comm -13 <(echo "$before" | sort) <(echo "$after" | sort) | head -n1
}
rm_nullb() {
    echo 0 > "/sys/kernel/config/nullb/$1/power" 2>/dev/null || true
    rmdir "/sys/kernel/config/nullb/$1" 2>/dev/null || true
}

# stat_fields DEV: the 17 counters of /sys/block/DEV/stat.
stat_fields() { cat "/sys/block/$1/stat"; }
# stat_delta BEFORE AFTER: "reads rmerged writes wmerged" between two stat lines.
stat_delta() {
    local -a b=($1) a=($2)
    echo "$(( a[0] - b[0] )) $(( a[1] - b[1] )) $(( a[4] - b[4] )) $(( a[5] - b[5] ))"
}

# wait_for SECONDS CMD...: polls CMD every 0.2 s until it succeeds.
wait_for() {
    local secs="$1"; shift
    local end=$(( $(date +%s) + secs ))
    while ! "$@" >/dev/null 2>&1; do
        [ "$(date +%s)" -lt "$end" ] || return 1
        sleep 0.2
    done
}
unit_prop() { systemctl show -P "$1" "$UNIT"; }
nomerges_of() { cat "/sys/block/$1/queue/nomerges"; }
nomerges_is() { [ "$(nomerges_of "$1")" = "$2" ]; }

# The daemon's metrics over bash's /dev/tcp (no curl in the image).
metrics() {
    exec 3<>/dev/tcp/127.0.0.1/9725 || return 1
    printf 'GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n' >&3
    cat <&3
    exec 3<&-
}

# A merge-hostile load in the background: unbatched random 4 KiB reads (DESIGN.md).
hostile_load_start() {
    fio --name=h --filename="/dev/$1" --direct=1 --rw=randread --bs=4k --ioengine=libaio \
        --iodepth=32 --norandommap --randrepeat=1 --time_based --runtime=900 \
        --output=/dev/null >/dev/null 2>&1 &
    LOAD_PID=$!
}
hostile_load_stop() {
    if [ -n "${LOAD_PID:-}" ]; then
        kill "$LOAD_PID" 2>/dev/null || true
        wait "$LOAD_PID" 2>/dev/null || true
        LOAD_PID=""
    fi
}

# trace_dev_t DEV: the kernel-internal dev_t the block events carry (major << 20 | minor).
trace_dev_t() {
    local mm
    mm="$(cat "/sys/block/$1/dev")"
    echo $(( (${mm%%:*} << 20) | ${mm##*:} ))
}
# TCG and live code patching: under qemu TCG (no KVM here), a guest kernel that patches a
# tracepoint's jump label or static call (text_poke_bp) while the other vCPU runs through
# that site can take a stray int3 and panic ("Oops: int3" in submit_bio_noacct_nocheck, the
# block_bio_queue site, with fio running; in ttwu_do_activate, a sched_wakeup site that the
# tracer's command-line recording registers). Twice on 2026-12-01 (6.12 guests of the runs
# started at 15:07 and 16:48 UTC); on real hardware and KVM the same patching is routine
# and safe. The daemon's
# bio tap switches block_bio_queue on and off for each sample, and the captures switch the
# block events. Two instances of the lab's own that keep every one of those events enabled
# (recording off, a filter that matches no device) hold each tracepoint past two probes. A
# third probe added or removed then changes only the probe list, never the code, and the
# command-line recording stays registered.
keep_tracepoints_patched() {
    local t=/sys/kernel/tracing i e
    mountpoint -q $t || mount -t tracefs nodev $t
    for i in 1 2; do
        mkdir -p "$t/instances/vmlab-keep$i"
        echo 0 > "$t/instances/vmlab-keep$i/tracing_on"
        for e in block_bio_queue block_getrq block_bio_backmerge block_bio_frontmerge block_rq_insert block_rq_issue block_rq_complete block_rq_requeue block_split block_bio_remap; do
            [ -d "$t/instances/vmlab-keep$i/events/block/$e" ] || continue
            echo "dev == 1" > "$t/instances/vmlab-keep$i/events/block/$e/filter"
            echo 1 > "$t/instances/vmlab-keep$i/events/block/$e/enable"
        done
    done
    figure tracepoint_keepers_enabled "$(cat "$t"/instances/vmlab-keep*/events/block/*/enable | grep -c '^1')"
}
# A tracefs instance of its own with the block events of the given devices.
trace_start() { # NAME DEV...
    local t=/sys/kernel/tracing
    mountpoint -q $t || mount -t tracefs nodev $t
    TR=$t/instances/$1
    rmdir "$TR" 2>/dev/null || true
    mkdir "$TR"
    echo 8192 > "$TR/buffer_size_kb"
    shift
    local filt="" d
    for d in "$@"; do filt="${filt:+$filt || }dev == $(trace_dev_t "$d")"; done
    local e
    for e in block_bio_queue block_bio_backmerge block_bio_frontmerge block_rq_issue block_rq_complete block_split block_bio_remap; do
        echo "$filt" > "$TR/events/block/$e/filter"
        echo 1 > "$TR/events/block/$e/enable"
    done
    echo > "$TR/trace"
}
trace_stop() { # FILE
    local e
    for e in "$TR"/events/block/*/enable; do echo 0 > "$e"; done
    cat "$TR/trace" > "$1"
    echo > "$TR/trace"
    rmdir "$TR"
}

