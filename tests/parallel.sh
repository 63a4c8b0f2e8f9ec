# Sourced by tests/run-unit.sh and tests/fuzz/run.sh.
#
# in_parallel DIR JOBS RUN ITEM...
#   Calls the function RUN with each ITEM, JOBS at once (each in the background), RUN's output to
#   DIR/N and its exit status to DIR/N.rc, N the ITEM's place from 0; returns when all have ended.
#   The caller then reads the outputs in the order given.
in_parallel() {
    local out_dir=$1 jobs=$2 run=$3 i=0 item
    shift 3
    for item in "$@"; do
        [ "$i" -lt "$jobs" ] || wait -n   # one ended: start the next
        { "$run" "$item" >"$out_dir/$i" 2>&1; echo $? >"$out_dir/$i.rc"; } &
        i=$((i + 1))
    done
    wait
}
