#!/usr/bin/env bash
# The HTTP half of make bench: wrk against embedscope's warm cached reply and against nginx serving
# the byte-identical body as a static file (identity, and gzip from a pre-compressed file), at 64 and
# 256 connections, interleaved, on 127.0.0.1 only; the same for the /v1/models listing. Appends a
# markdown table to bench/results/report.md. nginx logs nothing, so embedscope runs with --access-log off.
# Usage: bench/http.sh BUILD   (BENCH_HTTP_SECONDS per wrk run, default 5; BENCH_HTTP_ROUNDS, default 3;
# BENCH_HTTP_ARGS: more daemon arguments, e.g. --threads 4). With two or more cores the 64-connection
# cases run again with wrk on CPU 0 and the servers on CPU 1 (taskset), where p99 measures the server.
# Each run also counts the CPU time the server's processes used (utime + stime of all their threads, from
# /proc) per 1000 replies: unlike requests/s it does not move with what else loads the machine.
# BENCH_HTTP_BEFORE=BINARY: an earlier embedscope measured too, interleaved in every shared round (its
# columns "before"), so a change's effect is read from one run on one machine state.
set -euo pipefail
build=${1:-build}
secs=${BENCH_HTTP_SECONDS:-5}
root=$(pwd)
. tests/daemon.sh
. bench/http_lib.sh
dir=$(mktemp -d /tmp/embedscope-bench.XXXXXX)
path='/v1/models/gpt2-small/matrices/wpe/pca?k=3&rows=1:'
# shellcheck disable=SC2086
start_daemon "$dir/daemon.log" "$root/$build/embedscope" --access-log off ${BENCH_HTTP_ARGS:-}
daemon_pid=$pid shared_url=$url
before_pid=""
if [ -n "${BENCH_HTTP_BEFORE:-}" ]; then
    # shellcheck disable=SC2086
    start_daemon "$dir/before.log" "$BENCH_HTTP_BEFORE" --access-log off ${BENCH_HTTP_ARGS:-}
    before_pid=$pid before_url=$url
    wait_ready "$before_url"
    curl -fsS "$before_url$path" -o /dev/null
    curl -fsS -H 'Accept-Encoding: gzip' "$before_url$path" -o /dev/null
    url=$shared_url
fi
trap 'kill $daemon_pid ${pinned_pid:-} ${before_pid:-} 2>/dev/null; for f in $dir/nginx.pid $dir/nginx-pinned.pid; do [ -f $f ] && kill $(cat $f) 2>/dev/null; done; rm -rf $dir' EXIT
wait_ready "$url"
mkdir -p "$dir/www/v1" "$dir/logs"
curl -fsS "$url$path" -o "$dir/www/body.json"
curl -fsS -H 'Accept-Encoding: gzip' "$url$path" -o "$dir/www/body.json.gz"
curl -fsS "$url/v1/models" -o "$dir/www/models.json"
curl -fsS -H 'Accept-Encoding: gzip' "$url/v1/models" -o "$dir/www/models.json.gz"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
user=""; [ "$(id -u)" -eq 0 ] && user="user $(id -un) $(id -gn);"
cat >"$dir/nginx.conf" <<CONF
$user
worker_processes 2;
pid $dir/nginx.pid;
error_log $dir/logs/error.log;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $dir/t1; proxy_temp_path $dir/t2; fastcgi_temp_path $dir/t3; uwsgi_temp_path $dir/t4; scgi_temp_path $dir/t5;
    server {
        listen 127.0.0.1:$port;
        location = /identity { default_type application/json; alias $dir/www/body.json; }
        location = /gzip { default_type application/json; add_header Content-Encoding gzip; alias $dir/www/body.json.gz; }
        location = /models-identity { default_type application/json; alias $dir/www/models.json; }
        location = /models-gzip { default_type application/json; add_header Content-Encoding gzip; alias $dir/www/models.json.gz; }
    }
}
CONF
/usr/sbin/nginx -c "$dir/nginx.conf" -p "$dir"
sleep 0.5
run() { # url conns header pids -> "req/s p50_ms p99_ms cpu_ms_per_1000", wrk -t2 on any core
    measure "$4" wrk -t2 -c"$2" -d"${secs}s" --latency ${3:+-H "$3"} "$1"
}
run_pinned() { # the same with wrk (one thread) on CPU 0 only
    measure "$4" taskset -c 0 wrk -t1 -c"$2" -d"${secs}s" --latency ${3:+-H "$3"} "$1"
}
workers() { # nginx's worker processes (its master, whose pid file is $1, only waits)
    pgrep -P "$(cat "$1")" | tr '\n' ' '
}
# One round of every case: "mode what enc conns es_rps es_p50 es_p99 es_cpu nginx_rps nginx_p50 nginx_p99 nginx_cpu"
# lines (cpu: milliseconds of CPU time per 1000 replies).
# Mode shared: wrk -t2 and the server on both cores; mode pinned (64 connections): wrk on CPU 0, a second
# daemon and a one-worker nginx on CPU 1, so the p99 is the server's and not the scheduler's.
round() {
    for mode in shared pinned; do
        [ "$mode" = pinned ] && [ -z "$pinned_url" ] && continue
        for conns in 64 256; do
            [ "$mode" = pinned ] && [ "$conns" != 64 ] && continue
            for what in pca models; do
                for enc in identity gzip; do
                    hdr=""; [ "$enc" = gzip ] && hdr="Accept-Encoding: gzip"
                    es_path=$path; static=$enc
                    [ "$what" = models ] && es_path=/v1/models && static=models-$enc
                    if [ "$mode" = shared ]; then
                        before=""
                        [ -n "$before_pid" ] && before=$(run "$before_url$es_path" "$conns" "$hdr" "$before_pid")
                        echo "$mode $what $enc $conns $(run "$shared_url$es_path" "$conns" "$hdr" "$daemon_pid") $(run "http://127.0.0.1:$port/$static" "$conns" "" "$(workers "$dir/nginx.pid")") $before"
                    else
                        echo "$mode $what $enc $conns $(run_pinned "$pinned_url$es_path" "$conns" "$hdr" "$pinned_pid") $(run_pinned "http://127.0.0.1:$pinned_port/$static" "$conns" "" "$(workers "$dir/nginx-pinned.pid")")"
                    fi
                done
            done
        done
    done
}
pinned_url=""
if [ "$(nproc)" -ge 2 ]; then
    start_daemon "$dir/pinned.log" taskset -c 1 "$root/$build/embedscope" --access-log off ${BENCH_HTTP_ARGS:-}
    pinned_pid=$pid
    wait_ready "$url" && pinned_url=$url
    curl -fsS "$pinned_url$path" -o /dev/null
    pinned_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    sed -e "s/^worker_processes 2;/worker_processes 1;/" -e "s#$dir/nginx.pid#$dir/nginx-pinned.pid#" \
        -e "s/listen 127.0.0.1:$port;/listen 127.0.0.1:$pinned_port;/" "$dir/nginx.conf" >"$dir/nginx-pinned.conf"
    taskset -c 1 /usr/sbin/nginx -c "$dir/nginx-pinned.conf" -p "$dir"
    sleep 0.5
fi
rounds=${BENCH_HTTP_ROUNDS:-3}
for r in $(seq 1 "$rounds"); do round; done >"$dir/runs.txt"
{
echo
echo "### Warm replies against nginx (${secs} s per wrk run, $rounds interleaved rounds, medians; 127.0.0.1; pca $(stat -c %s "$dir/www/body.json") B / gzip $(stat -c %s "$dir/www/body.json.gz") B, /v1/models $(stat -c %s "$dir/www/models.json") B / gzip $(stat -c %s "$dir/www/models.json.gz") B)"
echo
echo "shared: wrk -t2 and the server on the same two cores; pinned: wrk -t1 on CPU 0, the server (a second daemon, a one-worker nginx) on CPU 1. CPU ms / 1000: CPU time (utime + stime) of the server's processes per 1000 replies, which other load on the machine does not move."
echo
python3 - "$dir/runs.txt" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()
    runs[tuple(f[:4])].append([float(x) for x in f[4:]])
print("| mode | reply | encoding | conns | embedscope req/s | nginx req/s | ratio | embedscope p50 / p99 ms | nginx p50 / p99 ms "
      "| embedscope CPU ms / 1000 | nginx CPU ms / 1000 | CPU ratio |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for key, rs in runs.items():
    m = [statistics.median(r[i] for r in rs) for i in range(min(len(r) for r in rs))]
    print("| %s | %s | %s | %s | %.0f | %.0f | %.2f | %.2f / %.2f | %.2f / %.2f | %.1f | %.1f | %.2f |" % (
        *key, m[0], m[4], m[0] / m[4], m[1], m[2], m[5], m[6], m[3], m[7], m[3] / m[7]), end="")
    print(" before: %.0f req/s, %.1f CPU ms / 1000 (now / before %.2f) |" % (m[8], m[11], m[3] / m[11]) if len(m) > 8 else "")
PY
} | tee -a bench/results/report.md
