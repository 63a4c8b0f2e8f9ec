#!/usr/bin/env bash
# make test: every stage runs even when an earlier one failed, so one run shows
# everything; the last line is the total "N passed, N failed".
#   1. unit tests, in the ASan+UBSan build (TESTS_FULL=1, as `make test-full` sets: in the normal build
#      too). Both builds are -O2 from the same sources and the same arithmetic, so the normal build's
#      run repeated the numbers (40 CPU s of a 2-core machine's ~1060) and added only the uninstrumented
#      timing and memory layout, which the normal daemon's HTTP modules, the browser tests and the soak
#      exercise; `make unit-tests` runs them in the normal build alone.
#      (and, at the end of lane C: the layers of src/ and circles between its files, tests/check_layers.py,
#      a scratch analysis added by one file, and `make warnings`: the C files no build compiles with the
#      project's -Wshadow -Wconversion, the fuzz targets and bench/, through the front end with both as errors)
#   2. HTTP tests, normal daemon     3. HTTP tests, ASan+UBSan daemon: each module once, against the
#      ASan+UBSan daemon but for the modules whose time is OpenBLAS/LAPACK work at GPT-2 size or that
#      are about a consumer (the Python client, the docs, nginx), which run against the normal one (the
#      Makefile's HTTP_NORMAL_ONLY; a shorter chaos run; HTTP_TESTS_FULL=1, as `make test-full` sets,
#      runs every module in full against both)
#   4. browser tests of the dashboard (normal daemon, direct and behind nginx)
#   5. deployment: deploy/k8s schemas and, when podman has a cached base image,
#      the image under podman kube play (tests/deploy/k8s.sh --short); `make install`
#      into temporary directories and systemd-analyze verify of the unit (make install-test)
#   6. soak (short): `make soak` with 3 wrk runs of 3 s x 64 connections, the same
#      checks as the long one (no errors, RSS growth < 5 % between runs 2 and 3)
#   7. fuzz (short): `make fuzz` with FUZZ_SECONDS=1 of a -O0 build (FUZZ_OPT), every libFuzzer target over
#      its seed corpus and then for a second; a crash, sanitizer report, timeout or memory limit fails
# `make soak` and `make fuzz` run the long versions (60 s x 256, 30 s per target).
# Each stage's wall seconds and CPU seconds (user+system of every process it ran and waited for)
# are printed after it and in a table at the end: CPU seconds compare runs on a loaded machine.
#
# Three lanes run side by side (most stages wait on a daemon, a browser or a socket much of the time,
# so one lane alone leaves a core idle): lane A, the normal daemon's build, its HTTP tests and then the
# unit tests of the ASan+UBSan build (built by lane B meanwhile), is printed as it runs; lane C, the
# browser tests, the install checks, the soak and the static checks (layers, analysis files, warnings),
# starts once lane A has built the daemon; lane B, the ASan+UBSan build, its HTTP tests (most HTTP
# modules run there), the deployment checks and the fuzzers' build and run. C and B are printed whole
# when lane A is done. Lane A bundles the dashboard first while lane B compiles its objects; lane B links
# once the bundle is there (both builds compile it in). The lanes' lengths were measured on the 2-core
# machine, whose cores they keep busy to the end (docs/development.md). TEST_LANES=1 (or JOBS=1) runs
# every stage one after another; TEST_LANES=2 runs lane C at the end of lane A.
set -u
cd "$(dirname "$0")/.."
. tests/hermetic.sh   # the environment every stage starts from, whatever the caller's
jobs=${JOBS:-$(nproc)}
lanes=${TEST_LANES:-$((jobs >= 2 ? 3 : 1))}
# HTTP workers per HTTP stage: tests/http/runner.py's default (the cores, at least 2; HTTP_JOBS sets it).
# Twice the cores were tried: the machine was already busy all the time (vmstat: 0.2 % idle over a
# clean-clone run; the table's CPU seconds miss what chromium's helpers and a daemonised nginx spend,
# some 300 s), and each worker's shared daemon, a start of the embedded default, cost 50 CPU s more.
res=$(mktemp -d /tmp/embedscope-make-test.XXXXXX)   # each step's record, the parallel lane's output
trap 'rm -rf "$res"' EXIT
children_cpu() {   # cpu_ms: CPU milliseconds (user + system) of the children this shell waited for
    local f=$res/times.$BASHPID   # one file per lane (a lane is a subshell)
    times >"$f"   # in this shell, not a subshell; its last line: "0m1.250s 0m0.375s"
    cpu_ms=$(awk 'END { n = 0; for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); n += a[1] * 60 + a[2] }
                        printf "%d", n * 1000 }' "$f")
}
children_cpu; started_ns=$(date +%s%N); started_cpu=$cpu_ms
machine_busy_ms() {   # CPU milliseconds the whole machine has spent busy since boot (/proc/stat)
    awk '/^cpu / { printf "%d", ($2 + $3 + $4 + $7 + $8) * 1000 / '"$(getconf CLK_TCK)"' }' /proc/stat
}
# A process a stage starts that another process reaps (a daemonised nginx, chromium's helpers) is not in
# its CPU seconds; the machine's busy seconds over the run (another's work on a shared machine included)
# say how far the table falls short of what the run cost. Where this user may make cgroups in a cgroup v1
# cpuacct hierarchy (root in a VM, as here), each step runs in one of its own, whose count has every
# process the step started whoever reaps it: its row ends "[all N s]" (chromium's helpers were 250 of
# the browser stage's 340 CPU s); elsewhere (cgroup v2, no rights) the rows are as before.
machine0=$(machine_busy_ms)
cg_root=/sys/fs/cgroup/cpuacct cg_n=0 cg=
in_cgroup() {   # in_cgroup COMMAND...: run it in the step's cgroup $cg, or as it is without one
    if [ -n "$cg" ]; then (echo "$BASHPID" >"$cg/tasks" 2>/dev/null; exec "$@"); else "$@"; fi
}
clock_start() {
    children_cpu; c0=$cpu_ms; t0=$(date +%s%N)
    cg=$cg_root/embedscope-test.$BASHPID.$((cg_n += 1))
    { [ -w "$cg_root" ] && mkdir "$cg" 2>/dev/null; } || cg=
}
clock_stop() {   # clock_stop NAME: print the wall and CPU seconds since clock_start; row: the table's line
    local wall cpu all=
    wall=$((($(date +%s%N) - t0) / 1000000)); children_cpu; cpu=$((cpu_ms - c0))
    if [ -n "$cg" ]; then
        all=$(($(cat "$cg/cpuacct.usage" 2>/dev/null || echo 0) / 1000000000))
        rmdir "$cg" 2>/dev/null   # a process still in it (left running) keeps it: harmless
    fi
    printf -v row '%6d.%d %6d.%d  %s%s' $((wall / 1000)) $((wall % 1000 / 100)) $((cpu / 1000)) $((cpu % 1000 / 100)) "$1" \
        "${all:+ [all $all s]}"
    echo "== $1: $((wall / 1000)) s wall, $((cpu / 1000)) s CPU${all:+ (every process it started: $all s)}"
}
record() {   # record ROW PASSED FAILED SKIPPED FAILED_STAGE: one step's line of $res/steps.LANE
    printf '%s\t%s\t%s\t%s\t%s\n' "$@" >>"$res/steps.$lane"
}
stage() {   # stage NAME COMMAND...: run it, add up its closing "N passed, N failed" line
    local name=$1; shift
    echo "== $name"
    local log rc line p f s bad=
    log=$res/stage.$BASHPID
    clock_start
    in_cgroup "$@" 2>&1 | tee "$log"; rc=${PIPESTATUS[0]}
    clock_stop "$name"
    line=$(grep -E '[0-9]+ passed, [0-9]+ failed' "$log" | tail -1)
    s=$(sed -nE 's/.* ([0-9]+) skipped.*/\1/p' <<<"$line" | head -1 | grep . || echo 0)
    p=$(sed -nE 's/(^|.*[^0-9])([0-9]+) passed, ([0-9]+) failed.*/\2/p' <<<"$line")
    f=$(sed -nE 's/(^|.*[^0-9])([0-9]+) passed, ([0-9]+) failed.*/\3/p' <<<"$line")
    if [ "$rc" -ne 0 ] || [ -z "$line" ]; then
        bad=$name; [ "${f:-0}" -gt 0 ] || f=$((${f:-0} + 1))
        # the failing tests' own lines and what they said (a Python exception's line, a Check failure's
        # file:line:F:), repeated at the very end: CI shows only the log's tail
        grep -E '^(FAIL|ERROR)[: ]|^ +FAIL|^[A-Za-z_.]*(Error|Exception)(: |$)|:[0-9]+:[FE]:' "$log" | head -20 |
            cut -c1-400 | sed "s|^|    [$name] |" >>"$res/failures.$lane"
    fi
    record "$row" "${p:-0}" "${f:-0}" "$s" "$bad"
}
build() {   # build NAME COMMAND...: a build step, timed apart from the tests; a failure fails make test
    local name=$1; shift
    echo "== $name"
    clock_start
    in_cgroup "$@"; local rc=$?
    clock_stop "$name"
    if [ "$rc" -eq 0 ]; then record "$row" 0 0 0 ""; else record "$row" 0 1 0 "$name"; fi
}
san_unit_tests() {   # the unit tests' one run in make test (lane A's after its HTTP stage, or lane B's alone)
    stage "unit tests (ASan+UBSan build)" make --no-print-directory -j"$jobs" SAN=1 unit-tests
}
lane_a() {   # the dashboard, the normal daemon and what is tested on it, then the ASan+UBSan unit tests
    build "build: dashboard (web/)" make --no-print-directory dashboard
    : >"$res/dashboard-built"   # lane B, compiling its objects meanwhile, links (whatever the outcome)
    if [ "${TESTS_FULL:-0}" = 1 ]; then
        build "build: daemon and unit tests (normal)" make --no-print-directory -j"$jobs" all
        : >"$res/normal-built"   # lane C, waiting for this file, starts
        stage "unit tests (normal build)" make --no-print-directory -j"$jobs" unit-tests
    else
        build "build: daemon (normal)" make --no-print-directory -j"$jobs" daemon
        : >"$res/normal-built"   # lane C, waiting for this file, starts
    fi
    stage "HTTP tests (normal daemon: HTTP_NORMAL_ONLY)" make --no-print-directory HTTP_SPLIT=1 http-tests
    if [ "$lanes" -ge 2 ]; then   # (one lane: lane B runs them after its build)
        until [ -e "$res/san-built" ]; do sleep 1; done
        san_unit_tests
    fi
    [ "$lanes" -ge 3 ] || (lane=c; lane_c)
}
lane_c() {   # on the normal daemon too, mostly waiting on a browser, nginx or wrk: the browser tests first
    stage "browser tests (dashboard)" make --no-print-directory browser-tests
    stage "install (user CFLAGS kept apart; make install into a temporary DESTDIR and PREFIX, systemd-analyze verify)" make --no-print-directory install-test
    stage "soak (short: 3 x 3 s x 64 connections)" env SOAK_SECONDS=3 SOAK_CONNECTIONS=64 make --no-print-directory soak
    # the static checks of the normal build last: lane A's HTTP stage, the longest, starts sooner
    stage "layers (include and call graphs of src/)" make --no-print-directory layers
    stage "analysis files (a scratch analysis added by one file)" make --no-print-directory analysis-files
    stage "warnings (-Wshadow -Wconversion over the fuzz targets and bench/; src/ and tests/ in every build)" make --no-print-directory warnings
}
lane_b() {   # the ASan+UBSan build and its HTTP tests (its unit tests in lane A), the deployment, the fuzzers
    # its objects beside the dashboard's bundling (lane A), which the link needs (web/assets.o)
    build "build: ASan+UBSan objects (beside the dashboard)" make --no-print-directory -j"$jobs" SAN=1 objs
    until [ -e "$res/dashboard-built" ]; do sleep 1; done
    build "build: daemon and unit tests (ASan+UBSan)" make --no-print-directory -j"$jobs" SAN=1 all
    : >"$res/san-built"   # lane A runs the unit tests once its HTTP stage is done (whatever the outcome)
    [ "$lanes" -ge 2 ] || san_unit_tests
    stage "HTTP tests (ASan+UBSan daemon: all but HTTP_NORMAL_ONLY)" make --no-print-directory SAN=1 http-tests
    stage "deployment (k8s schemas; podman kube play when a base image is cached)" tests/deploy/k8s.sh --short
    build "build: fuzz targets (clang, libFuzzer, -O0)" make --no-print-directory -j"$jobs" FUZZ_OPT=-O0 fuzz-build
    stage "fuzz (short: 1 s per target)" make --no-print-directory -j"$jobs" FUZZ_OPT=-O0 FUZZ_SECONDS=1 fuzz
}
lane=0
if [ "$lanes" -ge 2 ]; then
    (lane=b; lane_b) >"$res/lane-b.log" 2>&1 &
    lane_b_pid=$!
    if [ "$lanes" -ge 3 ]; then
        # Lane C is this shell's child, not lane A's: a lane's stage counts the CPU of the children that
        # lane's shell reaped during it, and lane A reaping lane C (done before lane A's HTTP stage) added
        # lane C's whole CPU to that stage (the table's rows summed to 137 s more than "all stages").
        (lane=c; until [ -e "$res/normal-built" ]; do sleep 1; done; lane_c) >"$res/lane-c.log" 2>&1 &
        lane_c_pid=$!
    fi
    (lane=a; lane_a)
    if [ "$lanes" -ge 3 ]; then
        : >"$res/normal-built"   # in case lane A ended before its build did
        wait "$lane_c_pid"
        echo "== lane C (browser, install, soak on the normal build), run beside the above:"
        cat "$res/lane-c.log"
    fi
    echo "== lane B (ASan+UBSan, deployment), run beside the above:"
    wait "$lane_b_pid"
    cat "$res/lane-b.log"
else
    (lane=a; lane_a)
    (lane=b; lane_b)
fi
lane=total
t0=$started_ns; c0=$started_cpu; cg=; clock_stop "all stages" >/dev/null
echo "== time per stage: wall s, CPU s (user+system), name"
cat "$res"/steps.{0,a,c,b} 2>/dev/null | cut -f1
echo "$row"
machine=$(( $(machine_busy_ms) - machine0 ))
echo "== the machine over the run: $((machine / 1000)) CPU s busy of $(( ($(date +%s%N) - started_ns) / 1000000 * $(nproc) / 1000 )) ($(nproc) cores x the wall; everything running on it)"
failed_stages=$(cat "$res"/steps.{0,a,c,b} 2>/dev/null | cut -f5 | grep . | paste -sd';' | sed 's/;/; /g')
read -r total_pass total_fail total_skip < <(cat "$res"/steps.{0,a,c,b} 2>/dev/null |
    awk -F'\t' '{ p += $2; f += $3; s += $4 } END { printf "%d %d %d\n", p, f, s }')
if [ -n "$failed_stages" ]; then
    echo "failed tests (the first 20 lines of each failed stage):"
    cat "$res"/failures.{0,a,c,b} 2>/dev/null
    echo "failed stages: $failed_stages"
fi
echo "total: $total_pass passed, $total_fail failed, $total_skip skipped"
[ -z "$failed_stages" ]
