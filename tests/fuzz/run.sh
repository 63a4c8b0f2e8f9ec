#!/usr/bin/env bash
# Run each libFuzzer target given for SECONDS over its seed corpus (and dictionary, when there is
# one), JOBS targets at once (default: the number of cores; each target is one process on one core),
# their outputs printed whole and in the order given. Crashing inputs go to FUZZ_DIR/artifacts/.
# Last line: "fuzz: N passed, N failed" (one per target). Exit 1 if any target found something.
#   tests/fuzz/run.sh FUZZ_DIR SECONDS FLAGS BIN...
set -u
fuzz_dir=$1 seconds=$2 flags=$3; shift 3
. "$(dirname "$0")/../parallel.sh"
mkdir -p "$fuzz_dir/artifacts"
outs=$(mktemp -d /tmp/embedscope-fuzz.XXXXXX)
trap 'rm -rf "$outs"' EXIT
fuzz_target() {
    local bin=$1 name=${1##*/fuzz_}
    local dict=$fuzz_dir/corpus/$name.dict
    # shellcheck disable=SC2086  # flags: several words
    "$bin" $flags -max_total_time="$seconds" $([ -f "$dict" ] && echo "-dict=$dict") \
        -artifact_prefix="$fuzz_dir/artifacts/$name-" "$fuzz_dir/corpus/$name"
}
in_parallel "$outs" "${JOBS:-$(nproc)}" fuzz_target "$@"   # outputs in $outs/N, exit statuses in $outs/N.rc
passed=0; failed=0; i=0
for bin in "$@"; do
    name=${bin##*/fuzz_}
    echo "fuzz $name: $seconds s"
    cat "$outs/$i"
    if [ "$(cat "$outs/$i.rc")" -eq 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "fuzz $name: FAILED"; fi
    i=$((i + 1))
done
echo "fuzz: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
