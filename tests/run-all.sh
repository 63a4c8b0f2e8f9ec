#!/usr/bin/env bash
# make test: every stage runs even when an earlier one failed, so one run shows
# everything; the last line is the total "N passed, N failed".
#   1. unit tests, normal build      2. unit tests, ASan+UBSan build
#      (after 1: the layers of src/ and circles between its files, tests/check_layers.py, and
#      `make warnings`: every C file through the front end with -Wshadow -Wconversion as errors)
#   3. HTTP tests, normal daemon     4. HTTP tests, ASan+UBSan daemon (without the modules whose
#      time is OpenBLAS/LAPACK work at GPT-2 size, a shorter chaos run: see the Makefile's
#      HTTP_SAN_SKIP; HTTP_TESTS_FULL=1, as `make test-full` sets, runs them all in full)
#   5. browser tests of the dashboard (normal daemon, direct and behind nginx)
#   6. deployment: deploy/k8s schemas and, when podman has a cached base image,
#      the image under podman kube play (tests/deploy/k8s.sh --short); `make install`
#      into temporary directories and systemd-analyze verify of the unit (make install-test)
#   7. soak (short): `make soak` with 3 wrk runs of 5 s x 64 connections, the same
#      checks as the long one (no errors, RSS growth < 5 % between runs 2 and 3)
#   8. fuzz (short): `make fuzz` with FUZZ_SECONDS=3, every libFuzzer target over
#      its seed corpus; a crash, sanitizer report, timeout or memory limit fails
# `make soak` and `make fuzz` run the long versions (60 s x 256, 30 s per target).
# Each stage's wall seconds and CPU seconds (user+system of every process it ran and waited for)
# are printed after it and in a table at the end: CPU seconds compare runs on a loaded machine.
set -u
cd "$(dirname "$0")/.."
jobs=${JOBS:-$(nproc)}
total_pass=0; total_fail=0; total_skip=0; failed_stages=(); timings=()
times_file=$(mktemp /tmp/embedscope-times.XXXXXX)
children_cpu() {   # cpu_ms: CPU milliseconds (user + system) of the children this shell waited for
    times >"$times_file"   # in this shell, not a subshell; its last line: "0m1.250s 0m0.375s"
    cpu_ms=$(awk 'END { n = 0; for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); n += a[1] * 60 + a[2] }
                        printf "%d", n * 1000 }' "$times_file")
}
children_cpu; started_ns=$(date +%s%N); started_cpu=$cpu_ms
clock_start() { children_cpu; c0=$cpu_ms; t0=$(date +%s%N); }
clock_stop() {   # clock_stop NAME: print and record the wall and CPU seconds since clock_start
    local wall cpu row
    wall=$((($(date +%s%N) - t0) / 1000000)); children_cpu; cpu=$((cpu_ms - c0))
    printf -v row '%6d.%d %6d.%d  %s' $((wall / 1000)) $((wall % 1000 / 100)) $((cpu / 1000)) $((cpu % 1000 / 100)) "$1"
    timings+=("$row")
    echo "== $1: $((wall / 1000)) s wall, $((cpu / 1000)) s CPU"
}
stage() {   # stage NAME COMMAND...: run it, add up its closing "N passed, N failed" line
    local name=$1; shift
    echo "== $name"
    local log rc line p f
    log=$(mktemp /tmp/embedscope-stage.XXXXXX)
    clock_start
    "$@" 2>&1 | tee "$log"; rc=${PIPESTATUS[0]}
    clock_stop "$name"
    line=$(grep -E '[0-9]+ passed, [0-9]+ failed' "$log" | tail -1)
    total_skip=$((total_skip + $(sed -nE 's/.* ([0-9]+) skipped.*/\1/p' <<<"$line" | head -1 | grep . || echo 0)))
    rm -f "$log"
    p=$(sed -nE 's/(^|.*[^0-9])([0-9]+) passed, ([0-9]+) failed.*/\2/p' <<<"$line")
    f=$(sed -nE 's/(^|.*[^0-9])([0-9]+) passed, ([0-9]+) failed.*/\3/p' <<<"$line")
    total_pass=$((total_pass + ${p:-0})); total_fail=$((total_fail + ${f:-0}))
    if [ "$rc" -ne 0 ] || [ -z "$line" ]; then
        failed_stages+=("$name"); [ "${f:-0}" -gt 0 ] || total_fail=$((total_fail + 1))
    fi
}
build() {   # build NAME COMMAND...: a build step, timed apart from the tests; a failure fails make test
    local name=$1; shift
    echo "== $name"
    clock_start
    "$@"; local rc=$?
    clock_stop "$name"
    [ "$rc" -eq 0 ] || { failed_stages+=("$name"); total_fail=$((total_fail + 1)); }
}
build "build: dashboard (web/)" make --no-print-directory dashboard
build "build: daemon and unit tests (normal)" make --no-print-directory -j"$jobs" all
build "build: daemon and unit tests (ASan+UBSan)" make --no-print-directory -j"$jobs" SAN=1 all
build "build: fuzz targets (clang, libFuzzer)" make --no-print-directory -j"$jobs" fuzz-build
stage "unit tests (normal build)" make --no-print-directory -j"$jobs" unit-tests
stage "layers (include and call graphs of src/)" make --no-print-directory layers
stage "warnings (-Wshadow -Wconversion over src/, tests/, bench/; front end only)" make --no-print-directory warnings
stage "unit tests (ASan+UBSan build)" make --no-print-directory -j"$jobs" SAN=1 unit-tests
stage "HTTP tests (normal daemon)" make --no-print-directory http-tests
stage "HTTP tests (ASan+UBSan daemon)" make --no-print-directory SAN=1 http-tests
stage "browser tests (dashboard)" make --no-print-directory browser-tests
stage "deployment (k8s schemas; podman kube play when a base image is cached)" tests/deploy/k8s.sh --short
stage "install (user CFLAGS kept apart; make install into a temporary DESTDIR and PREFIX, systemd-analyze verify)" make --no-print-directory install-test
stage "soak (short: 3 x 5 s x 64 connections)" env SOAK_SECONDS=5 SOAK_CONNECTIONS=64 make --no-print-directory soak
stage "fuzz (short: 3 s per target)" make --no-print-directory -j"$jobs" FUZZ_SECONDS=3 fuzz
clock_stop_total() { t0=$started_ns; c0=$started_cpu; clock_stop "all stages"; }
echo "== time per stage: wall s, CPU s (user+system), name"
clock_stop_total >/dev/null
printf '%s\n' "${timings[@]}"
rm -f "$times_file"
[ ${#failed_stages[@]} -eq 0 ] || echo "failed stages: ${failed_stages[*]}"
echo "total: $total_pass passed, $total_fail failed, $total_skip skipped"
[ ${#failed_stages[@]} -eq 0 ]
