#!/usr/bin/env bash
# `make soak`: a bounded soak of the daemon BIN on 127.0.0.1 (never another
# address): three back-to-back wrk runs of SOAK_SECONDS (60) x SOAK_CONNECTIONS
# (256) on the mixed workload tests/soak/mixed.lua. Prints each run's
# requests/s, p50/p99 and the daemon's RSS after it (once its connections
# have closed). Five checks: each run answered requests with no socket error
# and no non-2xx/3xx answer, RSS grew less than 5 % between runs 2 and 3 (run 1
# warms the caches), the daemon is still alive; the last line is
# "soak: N passed, N failed" (tests/run-all.sh adds it up). Exits 1 when a
# check failed, earlier (without that line) when wrk or the daemon cannot run.
set -euo pipefail
bin=${1:?usage: scripts/soak.sh BIN}
seconds=${SOAK_SECONDS:-60}
conns=${SOAK_CONNECTIONS:-256}
root=$(cd "$(dirname "$0")/.." && pwd)
log=$(mktemp /tmp/embedscope-soak.XXXXXX)
export OPENBLAS_NUM_THREADS=1
# The shipped configuration, its default per_address_limit (512) included: all
# of wrk's connections come from one address, like a proxy's, and the next
# run's 256 arrive while the daemon may still be releasing the previous run's
# (sockets the client has closed do not count against its cap, see
# src/http/conns.c); data_dir made absolute.
conf=$(mktemp /tmp/embedscope-soak-conf.XXXXXX.json)
/usr/bin/python3 - "$root" "$conf" <<'PY'
import json, sys
root, out = sys.argv[1:]
c = json.load(open(root + "/config/embedscope.json"))
c["data_dir"] = root + "/data"
json.dump(c, open(out, "w"))
PY
"$bin" --config "$conf" --listen 127.0.0.1:0 --access-log off 2>"$log" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$log" "$conf"' EXIT
port=
# up to 300 s for "listening on", a guard against a hang: the shipped configuration calibrates its cost model
# at start, and at load 40 (make test under two busy loops per core) loading and calibrating took over 60 s
for _ in $(seq 1 3000); do
    port=$(sed -nE 's#.*listening on http://127\.0\.0\.1:([0-9]+).*#\1#p' "$log" | head -1)
    [ -n "$port" ] && break
    sleep 0.1
done
[ -n "$port" ] || { echo "soak: daemon did not start"; cat "$log"; exit 1; }
url=http://127.0.0.1:$port
until [ "$(curl -s -o /dev/null -w '%{http_code}' "$url/readyz")" = 200 ]; do sleep 0.2; done
rss() { awk '/^VmRSS:/ {print $2}' "/proc/$pid/status"; }
passed=0; failed=0
check() {   # check WHAT COMMAND...: count one check, passed when COMMAND succeeds; prints WHAT when not
    local what=$1; shift
    if "$@"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "soak: FAILED: $what"; fi
}
declare -a rss_after
for run in 1 2 3; do
    out=$(wrk -t2 -c"$conns" -d"${seconds}s" --timeout 30s --latency -s "$root/tests/soak/mixed.lua" "$url/")
    # RSS once the run's connections are closed (each holds its libmicrohttpd memory pool until
    # then, tens of MB for 256 of them): what the run left behind, not what was still in flight
    for _ in $(seq 1 100); do
        open=$(curl -s "$url/metrics" | awk '/^embedscope_connections_open / {print $2}')
        [ "${open:-0}" -le 1 ] && break
        sleep 0.1
    done
    rss_after[$run]=$(rss)
    rps=$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")
    p50=$(awk '$1 == "50%" {print $2}' <<<"$out")
    p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
    total=$(awk '/requests in/ {print $1}' <<<"$out")
    errors=$(grep -E "Socket errors|Non-2xx" <<<"$out" || true)
    echo "soak run $run: $total requests, $rps req/s, p50 $p50, p99 $p99, RSS ${rss_after[$run]} KiB${errors:+; $errors}"
    check "run $run: ${total:-no} requests${errors:+, $errors}" test "${total:-0}" -gt 0 -a -z "$errors"
done
growth=$(awk -v a="${rss_after[2]}" -v b="${rss_after[3]}" 'BEGIN {printf "%.2f", (b - a) * 100 / a}')
echo "soak: RSS growth between runs 2 and 3: $growth %"
check "RSS grew $growth % between runs 2 and 3" awk -v g="$growth" 'BEGIN {exit !(g < 5)}'
check "the daemon died" kill -0 $pid
echo "soak: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
