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
run_program() { "$1"; }
in_parallel "$outs" "${JOBS:-$(nproc)}" run_program "$@"   # outputs in $outs/N, exit statuses in $outs/N.rc
passed=0; failed=0; skipped=0; bad=()
i=0
for t in "$@"; do
    out=$(cat "$outs/$i"); rc=$(cat "$outs/$i.rc"); i=$((i + 1))
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
echo "unit ($build): $passed passed, $failed failed, $skipped skipped"
[ ${#bad[@]} -eq 0 ]
