#!/usr/bin/env bash
# Run each libFuzzer target given for SECONDS over its seed corpus (and dictionary, when there is
# one), JOBS targets at once (default: the number of cores; each target is one process on one core),
# their outputs printed whole and in the order given. Crashing inputs go to FUZZ_DIR/artifacts/.
# Last line: "fuzz: N passed, N failed" (one per target). Exit 1 if any target found something.
#   tests/fuzz/run.sh FUZZ_DIR SECONDS FLAGS BIN...
set -u
dir=$1 seconds=$2 flags=$3; shift 3
jobs=${JOBS:-$(nproc)}
mkdir -p "$dir/artifacts"
outs=$(mktemp -d /tmp/embedscope-fuzz.XXXXXX)
trap 'rm -rf "$outs"' EXIT
i=0
for bin in "$@"; do   # each target's output to $outs/N, its exit status to $outs/N.rc
    [ "$i" -lt "$jobs" ] || wait -n   # one ended: start the next
    name=${bin##*/fuzz_}; dict=$dir/corpus/$name.dict
    # shellcheck disable=SC2086  # flags: several words
    { "$bin" $flags -max_total_time="$seconds" $([ -f "$dict" ] && echo "-dict=$dict") \
          -artifact_prefix="$dir/artifacts/$name-" "$dir/corpus/$name" >"$outs/$i" 2>&1
      echo $? >"$outs/$i.rc"; } &
    i=$((i + 1))
done
wait
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
