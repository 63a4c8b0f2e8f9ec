#!/usr/bin/env bash
# Browser tests of the dashboard (make browser-tests; a stage of make test): start the daemon
# BIN on a free loopback port, wait for /readyz, put Debian's nginx with deploy/nginx.conf in
# front of it (tests/deploy/nginx.sh; the dashboard is tested under its /embedscope/ prefix), install playwright-core (pinned in
# tests/browser/package-lock.json) on first use and run tests/browser/dashboard.mjs with Debian's
# chromium. Screenshots of every panel go to OUTDIR (default build/browser).
# Last line: "browser: N passed, N failed". Exit 1 if anything failed.
set -u
bin=${1:?usage: tests/browser/run.sh BIN [OUTDIR]}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${2:-$root/build/browser}
cd "$root"
case $bin in /*) ;; *) bin=$root/$bin ;; esac
export OPENBLAS_NUM_THREADS=1
mkdir -p "$out"
rm -f "$out"/*.png

fail() { echo "FAIL: $*"; echo "browser: 0 passed, 1 failed"; exit 1; }
log=$out/daemon.log
"$bin" --listen 127.0.0.1:0 2>"$log" &
pid=$!
nginx_dir=
cleanup() {
    [ -n "$nginx_dir" ] && "$root/tests/deploy/nginx.sh" stop "$nginx_dir" && rm -rf "$nginx_dir"
    kill -TERM "$pid" 2>/dev/null && wait "$pid"
}
trap cleanup EXIT
port=
for _ in $(seq 1 600); do
    port=$(sed -nE 's#.*listening on http://127\.0\.0\.1:([0-9]+).*#\1#p' "$log" | head -1)
    [ -n "$port" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
done
[ -n "$port" ] || fail "daemon did not start: $(cat "$log")"
url=http://127.0.0.1:$port/
for _ in $(seq 1 1200); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "${url}readyz")" = 200 ] && break
    sleep 0.1
done

if [ ! -d "$here/node_modules/playwright-core" ]; then
    (cd "$here" && npm ci --silent --no-audit --no-fund >/dev/null 2>&1) || fail "npm ci in tests/browser"
fi

nginx_dir=$(mktemp -d /tmp/embedscope-nginx.XXXXXX)
proxy=$("$root/tests/deploy/nginx.sh" start "$nginx_dir" "127.0.0.1:$port") || fail "nginx did not start"
prefixed=$proxy/embedscope/

node "$here/dashboard.mjs" "$url" "$out" "$prefixed"
