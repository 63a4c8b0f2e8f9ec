#!/usr/bin/env bash
# The HTTP half of make bench: wrk against embedscope's warm cached reply and against nginx serving
# the byte-identical body as a static file (identity, and gzip from a pre-compressed file), at 64 and
# 256 connections, interleaved, on 127.0.0.1 only; the same for the /v1/models listing. Appends a
# markdown table to bench/results/report.md. nginx logs nothing, so embedscope runs with --access-log off.
# Usage: bench/http.sh BUILD   (BENCH_HTTP_SECONDS per wrk run, default 5; BENCH_HTTP_ARGS: more daemon
# arguments, e.g. --threads 4)
set -euo pipefail
build=${1:-build}
secs=${BENCH_HTTP_SECONDS:-5}
root=$(pwd)
. tests/daemon.sh
dir=$(mktemp -d /tmp/embedscope-bench.XXXXXX)
path='/v1/models/gpt2-small/matrices/wpe/pca?k=3&rows=1:'
# shellcheck disable=SC2086
start_daemon "$dir/daemon.log" "$root/$build/embedscope" --access-log off ${BENCH_HTTP_ARGS:-}
trap 'kill $pid 2>/dev/null; [ -f $dir/nginx.pid ] && kill $(cat $dir/nginx.pid) 2>/dev/null; rm -rf $dir' EXIT
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
run() { # label url conns [header] -> "req/s p50_ms p99_ms"
    local out
    out=$(wrk -t2 -c"$3" -d"${secs}s" --latency ${4:+-H "$4"} "$2" 2>&1)
    python3 - "$out" <<'PY'
import re, sys
o = sys.argv[1]
def ms(label):
    m = re.search(r"\s%s%%\s+([\d.]+)(us|ms|s)" % label, o)
    v, u = float(m.group(1)), m.group(2)
    return v / 1000 if u == "us" else v * 1000 if u == "s" else v
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", o).group(1))
print("%.0f %.2f %.2f" % (rps, ms("50"), ms("99")))
PY
}
{
echo
echo "### Warm replies against nginx (wrk -t2, ${secs} s per run, 127.0.0.1; pca $(stat -c %s "$dir/www/body.json") B / gzip $(stat -c %s "$dir/www/body.json.gz") B, /v1/models $(stat -c %s "$dir/www/models.json") B / gzip $(stat -c %s "$dir/www/models.json.gz") B)"
echo
echo "| reply | encoding | conns | embedscope req/s | nginx req/s | ratio | embedscope p50 / p99 ms | nginx p50 / p99 ms |"
echo "|---|---|---|---|---|---|---|---|"
for conns in 64 256; do
    for what in pca models; do
        for enc in identity gzip; do
            hdr=""; [ "$enc" = gzip ] && hdr="Accept-Encoding: gzip"
            es_path=$path; static=$enc
            [ "$what" = models ] && es_path=/v1/models && static=models-$enc
            read -r er ep50 ep99 <<<"$(run es "$url$es_path" "$conns" "$hdr")"
            read -r nr np50 np99 <<<"$(run nginx "http://127.0.0.1:$port/$static" "$conns")"
            echo "| $what | $enc | $conns | $er | $nr | $(python3 -c "print('%.2f' % ($er / $nr))") | $ep50 / $ep99 | $np50 / $np99 |"
        done
    done
done
} | tee -a bench/results/report.md
