#!/usr/bin/env bash
# make bench-explorer: the dashboard at 50257 and 200000 rows in headless Chromium (software WebGL)
# against the real daemon BIN: bench/explorer.mjs uploads the matrices and their labels, opens the
# point view, clicks points and reads the page's performance marks. The daemon runs the shipped
# configuration with a cache large enough for the 200000 x 768 decomposition (cache_mb 4096), no
# warm list, and synchronous answers however loaded the machine (sync_seconds, request_timeout_s
# 600). Results: printed, and one JSON line per size appended to bench/results/explorer.jsonl.
# EXPLORER_ROWS (e.g. 50257) and SELECTIONS (default 5) narrow it.
# The matrices, their labels and their decompositions are made once: the daemon's uploads.dir and
# server.cache_dir live in EXPLORER_STATE (default /var/tmp/embedscope-bench-explorer-v1) and are
# kept between runs, so a later run restores them at start and goes straight to the page (the
# first run uploads 0.8 GB and decomposes 200000 x 768: minutes). Remove the folder to start over.
set -eu
bin=${1:?usage: bench/explorer.sh BIN}
root=$(cd "$(dirname "$0")/.." && pwd)
case $bin in /*) ;; *) bin=$root/$bin ;; esac
tmp=$(mktemp -d /tmp/embedscope-explorer.XXXXXX)
state=${EXPLORER_STATE:-/var/tmp/embedscope-bench-explorer-v1}
mkdir -p "$state/uploads" "$state/cache"
pid=
cleanup() {
    rc=$?
    [ "$rc" = 0 ] || { echo "bench/explorer.sh failed ($rc); the daemon's log ends:"; grep -v ' access ' "$tmp/daemon.log" | tail -20; } >&2
    [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && wait "$pid"
    rm -rf "$tmp"
}
trap cleanup EXIT
python3 - "$root" "$tmp/conf.json" "$state" <<'PY'
import json, os, sys
root, out, state = sys.argv[1:]
with open(os.path.join(root, "config", "embedscope.json")) as f:
    conf = json.load(f)
conf["data_dir"] = os.path.join(root, "data")
conf["server"]["cache_mb"] = 4096
conf["server"]["cache_dir"] = os.path.join(state, "cache")
conf.setdefault("uploads", {})["dir"] = os.path.join(state, "uploads")
conf["limits"]["sync_seconds"] = 600
conf["limits"]["request_timeout_s"] = 600
conf["warm"] = []
with open(out, "w") as f:
    json.dump(conf, f, indent=1)
PY
. "$root/tests/daemon.sh"
start_daemon "$tmp/daemon.log" "$bin" --config "$tmp/conf.json" || { cat "$tmp/daemon.log"; exit 1; }
wait_ready "$url" || { echo "daemon not ready"; exit 1; }
here=$root/tests/browser
if [ ! -f "$here/node_modules/.package-lock.json" ] || [ "$here/package-lock.json" -nt "$here/node_modules/.package-lock.json" ]; then
    (cd "$here" && npm ci --silent --no-audit --no-fund >/dev/null 2>&1)
fi
mkdir -p "$root/bench/results"
EXPLORER_DAEMON_PID=$pid node --max-old-space-size=4096 "$root/bench/explorer.mjs" "$url/" "$root/bench/results/explorer.jsonl" "${EXPLORER_ROWS:-50257,200000}"
