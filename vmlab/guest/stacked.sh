# Stacked devices (sourced by main): dm-linear, dm-stripe and md raid0, each over two
# null_blk devices of their own. mergetune (dry-run, then a short real run under a random
# load on each top) must manage the members and leave the dm/md tops alone; and the split
# of seed 002's 2 MiB read at sector 224 over a 128 KiB-chunk stripe, seen through the
# block tracepoints, against the simulator's 17 pieces (tests/sim/sim_model.rs).
# max_sectors=1024 (512 KiB): null_blk's default of 255 sectors would split every 128 KiB
# stripe piece once more on the member (measured: 32 member bios instead of 17).
STK_ARGS="queue_mode=2 irqmode=0 hw_queue_depth=64 size=1024 submit_queues=1 max_sectors=1024"
STK_CONF=/root/stacked.toml

stacked_setup() {
    local n
    local extra
    for n in nullblin0 nullblin1 nullbstr0 nullbstr1 nullbmd0 nullbmd1; do
        # md reads its superblock back: its members keep what is written (in RAM).
        extra=""; case "$n" in nullbmd*) extra="memory_backed=1" ;; esac
        mk_nullb "$n" $STK_ARGS $extra > "/run/vmlab-$n" || fail "null_blk $n not created"
        echo mq-deadline > "/sys/block/$(cat /run/vmlab-$n)/queue/scheduler"
    done
    LIN0=$(cat /run/vmlab-nullblin0) LIN1=$(cat /run/vmlab-nullblin1)
    STR0=$(cat /run/vmlab-nullbstr0) STR1=$(cat /run/vmlab-nullbstr1)
    MD0=$(cat /run/vmlab-nullbmd0) MD1=$(cat /run/vmlab-nullbmd1)
    local s=$((1024 * 2048))
    printf '0 %d linear /dev/%s 0\n%d %d linear /dev/%s 0\n' $s "$LIN0" $s $s "$LIN1" \
        | dmsetup create vmlab-linear || fail "dmsetup create linear failed"
    echo "0 $((2 * s)) striped 2 256 /dev/$STR0 0 /dev/$STR1 0" \
        | dmsetup create vmlab-stripe || fail "dmsetup create stripe failed"
    mdadm --create /dev/md/vmlab --level=0 --raid-devices=2 --chunk=128 --run --quiet \
        "/dev/$MD0" "/dev/$MD1" || fail "mdadm --create failed"
    udevadm settle
    DMLIN=$(basename "$(readlink -f /dev/mapper/vmlab-linear)")
    DMSTR=$(basename "$(readlink -f /dev/mapper/vmlab-stripe)")
    MDTOP=$(basename "$(readlink -f /dev/md/vmlab)")
    echo "LIN0=$LIN0 LIN1=$LIN1 STR0=$STR0 STR1=$STR1 MD0=$MD0 MD1=$MD1 DMLIN=$DMLIN DMSTR=$DMSTR MDTOP=$MDTOP" > /run/vmlab-stacked
    sed 's/^include = .*/include = ["nullb*", "dm-*", "md*"]/' "$LAB/guest/lab.toml" > "$STK_CONF"
    snapshot > /run/vmlab-stacked-originals
    figure "stacked linear=$DMLIN($LIN0,$LIN1) stripe=$DMSTR($STR0,$STR1,chunk=128KiB) raid0=$MDTOP($MD0,$MD1,chunk=128KiB)"
}

stacked_dry_run() {
    . /run/vmlab-stacked
    local out
    out="$(mergetune run --once --dry-run --config "$STK_CONF" 2>&1)" || fail "run --once --dry-run failed"
    echo "$out"
    # The device table: DEVICE SCHEDULER STATUS ...
    local d st
    for d in "$DMLIN" "$DMSTR" "$MDTOP"; do
        st="$(echo "$out" | awk -v d="$d" '$1 == d {print $3}')"
        [ "$st" = unsupported ] || fail "top $d: status '$st', not unsupported (stacked)"
    done
    for d in "$LIN0" "$LIN1" "$STR0" "$STR1" "$MD0" "$MD1"; do
        st="$(echo "$out" | awk -v d="$d" '$1 == d {print $3}')"
        [ "$st" = managed ] || fail "member $d: status '$st', not managed"
    done
    originals_in_place /run/vmlab-stacked-originals
}

stacked_real_run() {
    . /run/vmlab-stacked
    mkdir -p /run/vmlab-stk-state
    mergetune run --config "$STK_CONF" --state-dir /run/vmlab-stk-state --metrics-listen "" \
        > "$OUT/stacked-daemon.log" 2>&1 &
    local dpid=$!
    fio --direct=1 --rw=randread --bs=4k --ioengine=libaio --iodepth=16 --norandommap \
        --randrepeat=1 --time_based --runtime=300 --output=/dev/null \
        --name=l --filename="/dev/$DMLIN" --name=s --filename="/dev/$DMSTR" \
        --name=m --filename="/dev/$MDTOP" >/dev/null 2>&1 &
    LOAD_PID=$!
    local ok=1 d
    for d in "$LIN0" "$LIN1" "$STR0" "$STR1" "$MD0" "$MD1"; do
        wait_for 120 nomerges_is "$d" 2 || { ok=0; echo "member $d nomerges $(nomerges_of "$d")"; }
    done
    local tops=""
    for d in "$DMLIN" "$DMSTR" "$MDTOP"; do
        tops="$tops $d=$(nomerges_of "$d")"
        grep -qx "$d nomerges $(nomerges_of "$d")" /run/vmlab-stacked-originals || { ok=0; echo "top $d nomerges changed"; }
    done
    hostile_load_stop
    kill -TERM "$dpid"; wait "$dpid"
    local rc=$?
    figure "stacked_real_run members_at_nomerges2=$ok tops:$tops daemon_exit=$rc"
    [ "$ok" = 1 ] || fail "members not all at nomerges 2, or a top changed (see checks.log)"
    [ "$rc" = 0 ] || fail "daemon exit $rc on SIGTERM"
    originals_in_place /run/vmlab-stacked-originals
    grep -q "$DMSTR" "$OUT/stacked-daemon.log" || fail "daemon log does not mention $DMSTR"
}

# Seed 002: a 2 MiB read at sector 224 of the 128 KiB-chunk stripe. The kernel's block
# events on the top and on both members, and the stat deltas. Twice: with the queue limits
# the stack came up with (the block layer splits the bio at the top's max_sectors_kb before
# dm or md sees it), then with the top's and the members' max_sectors_kb raised to their
# max_hw_sectors_kb, the closest to seed 002's single 2 MiB bio this kernel allows.
limits_of() { # DEV
    echo "max_sectors_kb=$(cat /sys/block/$1/queue/max_sectors_kb) max_hw_sectors_kb=$(cat /sys/block/$1/queue/max_hw_sectors_kb) chunk_sectors=$(cat /sys/block/$1/queue/chunk_sectors 2>/dev/null)"
}
raise_limits() { # DEV
    cat "/sys/block/$1/queue/max_hw_sectors_kb" > "/sys/block/$1/queue/max_sectors_kb" 2>/dev/null || true
}
stacked_split() {
    . /run/vmlab-stacked
    local top="$1" m0="$2" m1="$3" tag="$4" f
    mkdir -p "$OUT/traces"
    local pass
    for pass in default raised; do
        if [ "$pass" = raised ]; then raise_limits "$m0"; raise_limits "$m1"; raise_limits "$top"; fi
        f="$OUT/traces/split_${tag}_$pass"
        local b0 b1 bt a0 a1 at
        trace_start vmlab-split "$top" "$m0" "$m1"
        bt="$(stat_fields "$top")"; b0="$(stat_fields "$m0")"; b1="$(stat_fields "$m1")"
        dd if="/dev/$top" of=/dev/null bs=2M count=1 skip=$((224 * 512)) iflag=direct,skip_bytes status=none \
            || fail "dd failed"
        at="$(stat_fields "$top")"; a0="$(stat_fields "$m0")"; a1="$(stat_fields "$m1")"
        trace_stop "$f.txt"
        local dt=($(stat_delta "$bt" "$at")) d0=($(stat_delta "$b0" "$a0")) d1=($(stat_delta "$b1" "$a1"))
        local dev_top dev0 dev1
        dev_top="$(cat /sys/block/$top/dev)"; dev0="$(cat /sys/block/$m0/dev)"; dev1="$(cat /sys/block/$m1/dev)"
        local q_top q0 q1 splits
        q_top=$(grep ' block_bio_queue:' "$f.txt" | grep -c " ${dev_top/:/,} ")
        q0=$(grep ' block_bio_queue:' "$f.txt" | grep -c " ${dev0/:/,} ")
        q1=$(grep ' block_bio_queue:' "$f.txt" | grep -c " ${dev1/:/,} ")
        splits=$(grep -c ' block_split:' "$f.txt")
        local pieces=$(( d0[0] + d0[1] + d1[0] + d1[1] ))
        figure "split_${tag}_$pass top=$top [$(limits_of "$top")] member [$(limits_of "$m0")] queued_top=$q_top top_reads=${dt[0]} member_queued=$((q0 + q1)) ($q0+$q1) member_reads=$((d0[0] + d1[0])) member_merged=$((d0[1] + d1[1])) member_bios=$pieces block_split_events=$splits simulator_member_bios=17"
        figure "split_${tag}_${pass}_top_bios $(grep ' block_bio_queue:' "$f.txt" | grep " ${dev_top/:/,} " | sed 's/.*block_bio_queue: [0-9,]* [A-Z]* \([0-9]* + [0-9]*\).*/\1/' | tr '\n' ';')"
        figure "split_${tag}_${pass}_member_bios $(grep ' block_bio_queue:' "$f.txt" | grep -v " ${dev_top/:/,} " | sed 's/.*block_bio_queue: \([0-9,]*\) [A-Z]* \([0-9]* + [0-9]*\).*/\1:\2/' | tr '\n' ';')"
        [ "$pieces" -gt 0 ] || fail "no I/O reached the members"
        [ "$((q0 + q1))" -gt 0 ] || fail "the trace saw no bio queued on the members"
    done
}
stacked_split_stripe() { stacked_split "$DMSTR" "$STR0" "$STR1" dm_stripe; }
stacked_split_md() { stacked_split "$MDTOP" "$MD0" "$MD1" md_raid0; }

stacked_teardown() {
    dmsetup remove vmlab-linear 2>/dev/null
    dmsetup remove vmlab-stripe 2>/dev/null
    mdadm --stop /dev/md/vmlab >/dev/null 2>&1
    mdadm --stop --scan >/dev/null 2>&1
    local n
    for n in nullblin0 nullblin1 nullbstr0 nullbstr1 nullbmd0 nullbmd1; do rm_nullb "$n"; done
}

check stacked-setup stacked_setup
if [ -f /run/vmlab-stacked ]; then
    . /run/vmlab-stacked
    check stacked-dry-run-acts-on-members stacked_dry_run
    check stacked-real-run-members-not-tops stacked_real_run
    check split-dm-stripe-seed002 stacked_split_stripe
    check split-md-raid0 stacked_split_md
fi
stacked_teardown
