#!/usr/bin/env bash
# Run each Check test program given, print its summary, and finish with the
# totals line "N passed, N failed, N skipped". A test that prints "skip: why"
# (its data is absent, see tests/check_main.h) is counted as skipped, not
# passed, and the reason is shown. Exit 1 if any program failed.
# JOBS programs run at once (default: the number of cores; each runs its tests one at a time with
# one BLAS thread, and every test writes only into its own mkdtemp directory); the summaries are
# printed in the order given.
set -u
build=$1; shift
. "$(dirname "$0")/hermetic.sh"
export CK_DEFAULT_TIMEOUT=${CK_DEFAULT_TIMEOUT:-120}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
. "$(dirname "$0")/parallel.sh"
outs=$(mktemp -d /tmp/embedscope-unit.XXXXXX)
trap 'rm -rf "$outs"' EXIT
# Each program's wall and CPU seconds on its output's last line ("time: WALL CPU"), read back below.
run_program() { local TIMEFORMAT='time: %R %U %S'; { time "$1" 2>&1; } 2>&1; }
# The longest programs start first (their wall seconds in the last run, $build/unit-times; else as given),
# so that the last one to end is a short one.
mapfile -t order < <(for t in "$@"; do
    printf '%s %s\n' "$(awk -v t="${t#"$build"/}" '$3 == t { w = $1 } END { print w + 0 }' "$build/unit-times" 2>/dev/null || echo 0)" "$t"
done | sort -s -k1,1 -rn | cut -d' ' -f2-)
declare -A place; i=0
for t in "${order[@]}"; do place[$t]=$i; i=$((i + 1)); done
in_parallel "$outs" "${JOBS:-$(nproc)}" run_program "${order[@]}"   # outputs in $outs/N, exit statuses in $outs/N.rc
passed=0; failed=0; skipped=0; bad=()
for t in "$@"; do
    i=${place[$t]}
    out=$(grep -v '^time: ' "$outs/$i"); rc=$(cat "$outs/$i.rc")
    read -r wall user sys < <(sed -n 's/^time: //p' "$outs/$i" | tail -1)
    awk -v w="${wall:-0}" -v u="${user:-0}" -v s="${sys:-0}" -v t="${t#"$build"/}" \
        'BEGIN { printf "%s %.2f %s\n", w, u + s, t }' >>"$outs/times"
    line=$(grep -E '^[0-9]+%: Checks: ' <<<"$out" | tail -1)
    echo "$build ${t#"$build"/}: ${line:-no summary (exit $rc)}"
    n=$(sed -nE 's/.*Checks: ([0-9]+), Failures: ([0-9]+), Errors: ([0-9]+).*/\1 \2 \3/p' <<<"$line")
    read -r checks fails errs <<<"${n:-0 0 0}"
    skips=$(grep -c '^skip: ' <<<"$out")
    grep '^skip: ' <<<"$out" | sed "s#^#    ${t#"$build"/}: #"
    if [ "$rc" -ne 0 ] || [ -z "$line" ]; then
        grep -vE '^(Running suite|[0-9]+%: Checks)' <<<"$out" | head -40
        bad+=("$t"); fails=$((fails + (fails + errs == 0 ? 1 : 0)))
    fi
    passed=$((passed + checks - fails - errs - skips)); failed=$((failed + fails + errs))
    skipped=$((skipped + skips))
done
cp "$outs/times" "$build/unit-times" 2>/dev/null
echo "time: program wall s, CPU s, slowest first (at most 10)"
sort -rn "$outs/times" | head -10 | awk '{ printf "time: %7.1f %7.1f  %s\n", $1, $2, $3 }'
echo "unit ($build): $passed passed, $failed failed, $skipped skipped"
[ ${#bad[@]} -eq 0 ]
