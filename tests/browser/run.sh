#!/usr/bin/env bash
# Browser tests of the dashboard (make browser-tests; a stage of make test): start the daemon
# BIN on a free loopback port, wait for /readyz, put Debian's nginx with deploy/nginx.conf in
# front of it (tests/deploy/nginx.sh; the dashboard is tested under its /embedscope/ prefix), install playwright-core (pinned in
# tests/browser/package-lock.json) on first use and run tests/browser/dashboard.mjs with Debian's
# chromium. Screenshots of every panel go to OUTDIR (default build/browser).
# The daemon runs the embedded default configuration with these changes: max_bins 1024, so that
# the cosine heatmap is tested (and timed) at full resolution, 1024 x 1024 (the default allows
# 512); and sync_seconds and request_timeout_s 600, so that the decomposition of the uploaded
# 50257 x 768 matrix (the scale test) is answered synchronously on this loaded machine; and, as the
# HTTP tests' daemons (tests/http/httpkit.py), one OpenBLAS thread per computation (blas_threads 1: two
# spin on a machine make test keeps busy) and the cost model's built-in rates (--cost-rates fixed: no
# calibration at start, the same predictions at any load). BROWSER_ONLY
# (comma-separated test names, e.g. testScale,testDefaultView) runs some tests only.
# Last line: "browser: N passed, N failed". Exit 1 if anything failed.
set -u
bin=${1:?usage: tests/browser/run.sh BIN [OUTDIR]}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${2:-$root/build/browser}
cd "$root"
case $bin in /*) ;; *) bin=$root/$bin ;; esac
. "$root/tests/hermetic.sh"
mkdir -p "$out"
rm -f "$out"/*.png

fail() { echo "FAIL: $*"; echo "browser: 0 passed, 1 failed"; exit 1; }
log=$out/daemon.log
conf=$out/embedscope.json
python3 - "$root" "$conf" <<'EOF' || fail "cannot write $conf"
import json, os, sys
root, out = sys.argv[1:]
with open(os.path.join(root, "config", "embedscope.json")) as f:
    conf = json.load(f)
conf["data_dir"] = os.path.join(root, "data")
conf["limits"]["max_bins"] = 1024
conf["limits"]["sync_seconds"] = 600
conf["limits"]["request_timeout_s"] = 600
conf.setdefault("server", {})["blas_threads"] = 1
with open(out, "w") as f:
    json.dump(conf, f, indent=1)
EOF
. "$root/tests/daemon.sh"
pid=
nginx_dir=
cleanup() {
    [ -n "$nginx_dir" ] && "$root/tests/deploy/nginx.sh" stop "$nginx_dir" && rm -rf "$nginx_dir"
    [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && wait "$pid"
}
trap cleanup EXIT
start_daemon "$log" "$bin" --config "$conf" --cost-rates fixed || fail "daemon did not start: $(cat "$log")"
wait_ready "$url" || fail "daemon at $url not ready after 600 s"
upstream=${url#http://}

# npm ci whenever the lock changed since the last install (a new pinned package such as axe-core).
if [ ! -f "$here/node_modules/.package-lock.json" ] || [ "$here/package-lock.json" -nt "$here/node_modules/.package-lock.json" ]; then
    (cd "$here" && npm ci --silent --no-audit --no-fund >/dev/null 2>&1) || fail "npm ci in tests/browser"
fi

nginx_dir=$(mktemp -d /tmp/embedscope-nginx.XXXXXX)
proxy=$("$root/tests/deploy/nginx.sh" start "$nginx_dir" "$upstream") || fail "nginx did not start"
prefixed=$proxy/embedscope/

# The API's own description (the job document's fields among it): the page's job handling is
# checked against it (testJobs).
"$bin" --dump-api > "$out/dump-api.json" || fail "$bin --dump-api"
node "$here/dashboard.mjs" "$url/" "$out" "$prefixed"
rc=$?
# The daemon's CPU seconds (user + system) over the whole run: what the browser's requests cost it.
read -r -a stat < <(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null)
[ "${#stat[@]}" -gt 12 ] && echo "time: daemon CPU $(( (stat[11] + stat[12]) / $(getconf CLK_TCK) )) s"
exit $rc
