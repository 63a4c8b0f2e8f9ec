#!/usr/bin/env bash
# What a reply costs once its decomposition is cached (issue 33): a 50257x768 float64 matrix
# (bench/make_matrix.py, seed 1) served by each BUILD given, its exact decomposition computed once, then
# interleaved rounds, the builds in turn, of: a freshly rendered 50257x30 PCA table as NPY and as CSV (k
# steps 30, 29, ... so each round renders rather than takes the response cache; one k per round, the same
# for every build), the cached NPY again identity and gzip, and the first top-k NPY reply of a new k
# (decomposition and reply). Times are curl's time_total on 127.0.0.1, with the load average noted per
# round. Usage: bench/replies.sh BUILD_OR_BINARY... (BENCH_REPLY_ROUNDS, default 4).
set -euo pipefail
root=$(pwd)
rounds=${BENCH_REPLY_ROUNDS:-4}
py=/usr/bin/python3
. tests/daemon.sh
dir=$(mktemp -d /tmp/embedscope-replies.XXXXXX)
data=${BENCH_REPLY_DATA:-build/bench-data}
case $data in /*) ;; *) data=$root/$data ;; esac # relative to the checkout; an absolute one as it is
mkdir -p "$data"
matrix=$data/m50257x768.npy
[ -f "$matrix" ] || $py bench/make_matrix.py 50257 768 1 "$matrix"
cat >"$dir/config.json" <<CONF
{"server": {"cache_mb": 2048}, "limits": {"max_response_bytes": 134217728},
 "models": {"bench": {"matrices": {"wte": {"file": "$matrix", "model_axis": "columns"}}}}}
CONF
pids=() urls=() names=()
trap 'kill ${pids[*]:-} 2>/dev/null; rm -rf "$dir"' EXIT
i=0
for b in "$@"; do
    bin=$b; [ -d "$b" ] && bin=$b/embedscope
    start_daemon "$dir/daemon$i.log" "$bin" --config "$dir/config.json" --access-log off
    pids+=("$pid") urls+=("$url") names+=("$b")
    i=$((i + 1))
done
for u in "${urls[@]}"; do # loading 309 MB takes a minute on a loaded machine
    for _ in $(seq 1 1200); do
        [ "$(curl -s -o /dev/null -w '%{http_code}' "$u/readyz")" = 200 ] && break
        sleep 0.5
    done
done
base=/v1/models/bench/matrices/wte/pca
# CPU nanoseconds used so far by every thread of process $1 (schedstat: not moved by what else runs).
cpu_ns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{s += $1} END {printf "%.0f", s}'; }
# "wall_s/cpu_ms" of one request to daemon $pid: curl's time_total and the server's CPU time meanwhile
# (a background task it leaves running, such as a gzip for later requests, is counted where it lands).
t() {
    local before after wall
    before=$(cpu_ns "$pid")
    wall=$(curl -sS -o /dev/null -w '%{time_total}' -H 'Prefer: wait=600' "$@")
    after=$(cpu_ns "$pid")
    printf '%.3f/%.1f' "$wall" "$(( (after - before) / 1000 ))e-3"
}
for j in "${!urls[@]}"; do # the exact decomposition, once
    pid=${pids[$j]}
    echo "# warm-up (decomposition) of ${names[$j]}: $(t "${urls[$j]}$base?k=2&method=exact&format=npy") (s/CPU ms)"
done
echo "Each cell: wall seconds / server CPU ms."
echo "| round | load | build | NPY fresh | CSV fresh | NPY cached identity | NPY cached gzip | top-k first NPY |"
echo "|---|---|---|---|---|---|---|---|"
for r in $(seq 1 "$rounds"); do
    k=$((31 - r))
    for j in "${!urls[@]}"; do
        u=${urls[$j]} pid=${pids[$j]}
        load=$(cut -d' ' -f1 /proc/loadavg)
        npy=$(t "$u$base?k=$k&method=exact&format=npy")
        csv=$(t "$u$base?k=$k&method=exact&format=csv")
        ident=$(t "$u$base?k=$k&method=exact&format=npy")
        gz=$(t -H 'Accept-Encoding: gzip' "$u$base?k=$k&method=exact&format=npy")
        topk=$(t "$u$base?k=$k&method=topk&format=npy")
        echo "| $r (k=$k) | $load | ${names[$j]} | $npy | $csv | $ident | $gz | $topk |"
    done
done
