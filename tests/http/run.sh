#!/usr/bin/env bash
# HTTP integration tests: run tests/http/test_*.py with the daemon BIN (tests/http/runner.py: the
# modules in HTTP_JOBS workers at once, each worker with a daemon of its own on the embedded default,
# started on a free loopback port, waited for on /readyz, EMBEDSCOPE_URL to its modules, stopped
# with SIGTERM at the end with exit status 0 and no sanitizer report in its log required;
# EMBEDSCOPE_BIN lets tests start their own instances with small configurations), and lint
# openapi.yaml with @redocly/cli (pinned in tests/http/package.json, installed
# into tests/http/node_modules on first use).
# Last line: "http: N passed, N failed". Exit 1 if anything failed.
set -u
bin=${1:?usage: tests/http/run.sh BIN}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"
case $bin in /*) ;; *) bin=$root/$bin ;; esac
. "$root/tests/hermetic.sh"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

passed=0; failed=0; skipped=0
pass() { passed=$((passed + 1)); echo "ok: $*"; }
fail() { failed=$((failed + 1)); echo "FAIL: $*"; }
finish() {
    echo "http: $passed passed, $failed failed, $skipped skipped"
    [ "$failed" -eq 0 ]
    exit
}

# Python tests (stdlib unittest); count tests and failures from its summary, e.g.
# "FAILED (failures=1, errors=2, expected failures=3, unexpected successes=1)":
# expected failures (known daemon bugs) pass, unexpected successes fail (the
# bug is fixed: remove the test's expectedFailure marker).
# HTTP_TESTS narrows the run to some modules while working (globs, e.g. 'test_uploads.py');
# HTTP_TESTS_SKIP leaves some out (globs; the Makefile's list for the ASan+UBSan daemon in make test).
# The whole output is kept in BUILD/http-tests.log, and the whole log of a daemon that failed its stop
# (an exit status other than 0, a sanitizer's report) in BUILD/http-logs (httpkit.keep_log), so that a
# failure seen once explains itself: below, only the failures and the ends of such logs are printed.
[ -z "${HTTP_TESTS_SKIP:-}" ] || echo "not run against this daemon: $HTTP_TESTS_SKIP (HTTP_TESTS_FULL=1 runs them)"
[ -z "${HTTP_TESTS:-}" ] || echo "run against this daemon: $HTTP_TESTS"
build=$(dirname "$bin")
out=$(EMBEDSCOPE_BIN=$bin EMBEDSCOPE_TEST_LOG_DIR=$build/http-logs \
      /usr/bin/python3 tests/http/runner.py "${HTTP_TESTS:-test_*.py}" "${HTTP_TESTS_SKIP:-}" 2>&1)
printf '%s\n' "$out" > "$build/http-tests.log"
echo "$out" | grep -vE '^time: ' | grep -E ' \.\.\. |^(FAIL|ERROR):|^Traceback|Error|^Ran |^ok: worker|^    \| ' | grep -vE ' \.\.\. ok$' | head -150
grep -E '^time: ' <<<"$out"
ran=$(sed -nE 's/^Ran ([0-9]+) tests?.*/\1/p' <<<"$out")
summary=$(grep -E '^(OK|FAILED)' <<<"$out" | tail -1)
count() { grep -oE "(\(|, )$1=[0-9]+" <<<"$summary" | grep -oE '[0-9]+$'; }
f=$(count failures); e=$(count errors); u=$(count 'unexpected successes'); s=$(count skipped)
bad=$((${f:-0} + ${e:-0} + ${u:-0}))  # subtests count one each: bad may exceed the tests that failed
[ -n "$ran" ] && [ "$bad" -gt "$ran" ] && bad=$ran
if [ -z "$ran" ]; then
    fail "python tests did not run:"; echo "$out" | tail -20
else
    # skipped tests (absent ../shared/data, no EMBEDSCOPE_BIN) are neither passed nor failed
    skipped=${s:-0}; passed=$((passed + ran - bad - skipped)); failed=$((failed + bad))
    [ "$bad" -eq 0 ] || echo "the whole output: $build/http-tests.log"
    echo "python: $((ran - bad - skipped)) of $ran passed, $skipped skipped"
    grep -E ' \.\.\. skipped ' <<<"$out" | sed 's/^/    /'
fi

# OpenAPI lint with a real linter.
# Under a lock on tests/http: make test's two HTTP stages (normal, ASan+UBSan) run side by side and reach this
# at about the same time on a fast machine; two npm ci in one folder broke each other's node_modules (a
# clean-clone run: "cannot install @redocly/cli" in the second stage).
flock tests/http sh -c '[ -x tests/http/node_modules/.bin/redocly ] ||
    (cd tests/http && npm ci --silent --no-audit --no-fund >/dev/null 2>&1)'

if [ -x tests/http/node_modules/.bin/redocly ]; then
    lint=$(tests/http/node_modules/.bin/redocly lint --format=stylish openapi.yaml 2>&1)
    if [ $? -eq 0 ]; then pass "redocly lint openapi.yaml"; else fail "redocly lint openapi.yaml:"; echo "$lint" | grep -E 'error|warning' | head -30; fi
else
    fail "cannot install @redocly/cli (npm ci in tests/http; needs Node >= 20.19 and the npm registry)"
fi

finish
