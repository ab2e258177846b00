# Slow devices (sourced by main): null_blk with a completion latency and a small queue
# depth, so requests wait in mq-deadline and the elevator merges (back-merge hash, front
# merges, one-hit cache) happen. For each stream and merge level: the delta of
# /sys/block/X/stat around one fio run, REPS repetitions interleaved; then the tracing
# filesystem's block events of one 4 MiB run per stream at each level, kept as fixtures.
#
# Levels: L0 nomerges 0 front_merges 1; L1 nomerges 0 front_merges 0; L2 nomerges 1 (its
# front_merges irrelevant: NOXMERGES stops before the front-merge lookup; measured at both);
# L3 nomerges 2.
SLOW_REPS=${SLOW_REPS:-3}
# Reads merged like writes in every level (measured on 6.12: docs/testing.md); the lab's
# default keeps the two write streams to stay inside CI's time. SLOW_STREAMS="write
# write:-8k read read:-8k" measures all four.
SLOW_STREAMS=${SLOW_STREAMS:-write write:-8k}
SLOW_LEVELS=${SLOW_LEVELS:-L0 L1 L2 L3}
SLOW_ARGS="queue_mode=2 irqmode=2 completion_nsec=500000 hw_queue_depth=4 size=4096 submit_queues=1"

set_level() { # DEV nomerges front_merges
    echo "$2" > "/sys/block/$1/queue/nomerges"
    echo "$3" > "/sys/block/$1/queue/iosched/front_merges"
}
level_args() {
    case "$1" in
        L0) echo "0 1" ;; L1) echo "0 0" ;; L2) echo "1 1" ;; L2fm0) echo "1 0" ;; L3) echo "2 1" ;;
    esac
}
slow_job() { # DEV RW SIZE
    fio --name=s --filename="/dev/$1" --direct=1 --rw="$2" --bs=4k --size="$3" \
        --ioengine=libaio --iodepth=32 --output=/dev/null
}

slow_measure() {
    SLOW="$(mk_nullb nullbslow $SLOW_ARGS)" || fail "null_blk configfs device not created"
    [ -n "$SLOW" ] || fail "no slow null_blk device"
    echo mq-deadline > "/sys/block/$SLOW/queue/scheduler"
    figure "slow_device $SLOW null_blk $SLOW_ARGS scheduler mq-deadline"
    slow_job "$SLOW" write 8M; slow_job "$SLOW" randread 8M   # warm-up, unmeasured
    local rep rw lv b a d
    for rep in $(seq 1 "$SLOW_REPS"); do
        for rw in $SLOW_STREAMS; do
            for lv in $SLOW_LEVELS; do
                set_level "$SLOW" $(level_args "$lv")
                b="$(stat_fields "$SLOW")"
                slow_job "$SLOW" "$rw" 8M || fail "fio $rw failed"
                a="$(stat_fields "$SLOW")"
                d=($(stat_delta "$b" "$a"))
                # reads rmerged writes wmerged
                figure "slow_merges stream=$rw level=$lv rep=$rep reads=${d[0]} reads_merged=${d[1]} writes=${d[2]} writes_merged=${d[3]}"
            done
        done
    done
    set_level "$SLOW" 0 1
    # The traces: one 4 MiB run per stream and level, with the stat delta beside it.
    mkdir -p "$OUT/traces"
    for rw in write write:-8k; do
        for lv in L0 L1 L2 L3; do
            set_level "$SLOW" $(level_args "$lv")
            local f="$OUT/traces/slow_${rw/:-8k/_back}_$lv"
            trace_start vmlab-slow "$SLOW"
            b="$(stat_fields "$SLOW")"
            slow_job "$SLOW" "$rw" 4M || fail "fio $rw failed"
            a="$(stat_fields "$SLOW")"
            trace_stop "$f.txt"
            d=($(stat_delta "$b" "$a"))
            {
                echo "kernel = \"$(uname -r)\""
                echo "device = \"$SLOW\""
                echo "null_blk = \"$SLOW_ARGS\""
                echo "scheduler = \"mq-deadline\""
                echo "level = \"$lv\""
                echo "nomerges = $(cat /sys/block/$SLOW/queue/nomerges)"
                echo "front_merges = $(cat /sys/block/$SLOW/queue/iosched/front_merges)"
                echo "fio = \"fio --name=s --filename=/dev/$SLOW --direct=1 --rw=$rw --bs=4k --size=4M --ioengine=libaio --iodepth=32\""
                echo "writes = ${d[2]}"
                echo "writes_merged = ${d[3]}"
                echo "queued = $(grep -c ' block_bio_queue:' "$f.txt")"
                echo "backmerges = $(grep -c ' block_bio_backmerge:' "$f.txt")"
                echo "frontmerges = $(grep -c ' block_bio_frontmerge:' "$f.txt")"
                echo "issued = $(grep -c ' block_rq_issue:' "$f.txt")"
            } > "$f.meta.toml"
            figure "slow_trace stream=$rw level=$lv writes=${d[2]} writes_merged=${d[3]} backmerges=$(grep -c ' block_bio_backmerge:' "$f.txt") frontmerges=$(grep -c ' block_bio_frontmerge:' "$f.txt")"
        done
    done
    set_level "$SLOW" 0 1
    rm_nullb nullbslow
}
check slow-device-merges slow_measure
