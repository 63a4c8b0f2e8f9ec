#!/usr/bin/env bash
# CPU per warm reply against the number of HTTP threads (issue 33: from 2 to 16 threads it may grow by
# 10 % at most), and before/after a change: one daemon per binary and thread count, all started at
# once, measured in interleaved rounds (every daemon once per round, in turn), so a change is read
# from one run on one machine state. Measures the cached 86 KB PCA of wpe (gzip) and /v1/models with
# wrk; CPU ms / 1000 is utime + stime of all the daemon's threads per 1000 replies (bench/http_lib.sh),
# which other load on the machine does not move as it moves requests/s.
# Usage: bench/http_threads.sh BUILD [BEFORE_BINARY]
#   BENCH_THREADS (default "1 2"; "2 16" on a 16-core host), BENCH_HTTP_CONNS (64), BENCH_HTTP_SECONDS (4),
#   BENCH_HTTP_ROUNDS (3), BENCH_WRK_THREADS (2). Prints a markdown table: medians per daemon and reply,
#   the change from the fewest to the most threads, and now / before per thread count.
set -euo pipefail
build=${1:-build}
before_bin=${2:-}
secs=${BENCH_HTTP_SECONDS:-4}
rounds=${BENCH_HTTP_ROUNDS:-3}
conns=${BENCH_HTTP_CONNS:-64}
wrk_threads=${BENCH_WRK_THREADS:-2}
threads_list=${BENCH_THREADS:-1 2}
root=$(pwd)
. tests/daemon.sh
. bench/http_lib.sh
dir=$(mktemp -d /tmp/embedscope-threads.XXXXXX)
path='/v1/models/gpt2-small/matrices/wpe/pca?k=3&rows=1:'
names=() pids=() urls=()
trap 'kill ${pids[*]:-} 2>/dev/null; rm -rf $dir' EXIT
for which in now before; do
    bin="$root/$build/embedscope"
    if [ "$which" = before ]; then
        [ -n "$before_bin" ] || continue
        bin=$before_bin
    fi
    for t in $threads_list; do
        start_daemon "$dir/$which-$t.log" "$bin" --access-log off --threads "$t"
        names+=("$which $t") pids+=("$pid") urls+=("$url")
    done
done
for u in "${urls[@]}"; do
    wait_ready "$u"
    curl -fsS -H 'Accept-Encoding: gzip' "$u$path" -o /dev/null
    curl -fsS -H 'Accept-Encoding: gzip' "$u/v1/models" -o /dev/null
done
for r in $(seq 1 "$rounds"); do
    for what in pca models; do
        p=$path; [ "$what" = models ] && p=/v1/models
        for i in "${!names[@]}"; do
            echo "${names[$i]} $what $(measure "${pids[$i]}" wrk -t"$wrk_threads" -c"$conns" -d"${secs}s" --latency \
                -H 'Accept-Encoding: gzip' "${urls[$i]}$p")"
        done
    done
done >"$dir/runs.txt"
echo
echo "### CPU per warm reply by HTTP threads ($conns connections, wrk -t$wrk_threads, ${secs} s per run, $rounds interleaved rounds, medians; gzip; $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg))"
echo
python3 - "$dir/runs.txt" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    which, threads, what, rps, p50, p99, cpu = line.split()
    runs[(which, int(threads), what)].append((float(rps), float(cpu)))
med = {k: (statistics.median(r for r, _ in v), statistics.median(c for _, c in v), [c for _, c in v])
       for k, v in runs.items()}
print("| binary | threads | reply | req/s | CPU ms / 1000 (median) | each round | now / before |")
print("|---|---|---|---|---|---|---|")
for (which, threads, what), (rps, cpu, each) in sorted(med.items(), key=lambda kv: (kv[0][2], kv[0][0] != "now", kv[0][1])):
    b = med.get(("before", threads, what))
    ratio = "%.2f" % (cpu / b[1]) if which == "now" and b else ""
    print("| %s | %d | %s | %.0f | %.1f | %s | %s |" % (which, threads, what, rps, cpu, " ".join("%.1f" % c for c in each), ratio))
print()
for which in ("now", "before"):
    for what in ("pca", "models"):
        ts = sorted(t for (w, t, x) in med if w == which and x == what)
        if len(ts) >= 2:
            lo, hi = med[(which, ts[0], what)][1], med[(which, ts[-1], what)][1]
            print("- %s, %s: CPU per reply %d -> %d threads %+.0f %%" % (which, what, ts[0], ts[-1], 100 * (hi / lo - 1)))
PY
