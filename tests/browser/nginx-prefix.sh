#!/usr/bin/env bash
# Debian's nginx from a test directory, proxying a path prefix to a daemon on loopback.
#   nginx-prefix.sh start DIR UPSTREAM [PREFIX]   prints the prefixed URL (http://127.0.0.1:PORT/embedscope/)
#   nginx-prefix.sh stop DIR
# The configuration mirrors deploy/nginx.conf's prefix location: PREFIX/ is stripped before the
# daemon (proxy_pass with a URI part), PREFIX without its slash redirects to PREFIX/. nginx runs
# as the calling user with its pid, logs and temp paths inside DIR, on a free port of 127.0.0.1.
set -eu
cmd=${1:?usage: nginx-prefix.sh start DIR UPSTREAM [PREFIX] | stop DIR}
dir=${2:?directory}
nginx=$(command -v nginx || echo /usr/sbin/nginx)
case $cmd in
stop)
    [ -f "$dir/nginx.pid" ] && kill -QUIT "$(cat "$dir/nginx.pid")" 2>/dev/null || true
    for _ in $(seq 1 50); do [ -f "$dir/nginx.pid" ] || break; sleep 0.1; done
    rm -rf "$dir"
    exit 0 ;;
start) ;;
*) echo "unknown command $cmd" >&2; exit 2 ;;
esac
upstream=${3:?upstream host:port}
prefix=${4:-/embedscope}
mkdir -p "$dir/tmp"
chmod 755 "$dir"
for _ in 1 2 3 4 5; do
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    cat >"$dir/nginx.conf" <<EOF
worker_processes 1;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 64; }
http {
    access_log $dir/access.log;
    client_body_temp_path $dir/tmp/body;
    proxy_temp_path $dir/tmp/proxy;
    fastcgi_temp_path $dir/tmp/fastcgi;
    uwsgi_temp_path $dir/tmp/uwsgi;
    scgi_temp_path $dir/tmp/scgi;
    server {
        listen 127.0.0.1:$port;
        location = $prefix { return 301 $prefix/; }
        location $prefix/ {
            proxy_pass http://$upstream/;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host \$host;
            proxy_max_temp_file_size 0;   # no temp files: workers may run as another user
        }
    }
}
EOF
    "$nginx" -p "$dir" -c "$dir/nginx.conf" -g 'daemon on;' 2>>"$dir/error.log" || continue
    for _ in $(seq 1 50); do
        if curl -fs -o /dev/null "http://127.0.0.1:$port$prefix/healthz"; then
            echo "http://127.0.0.1:$port$prefix/"
            exit 0
        fi
        sleep 0.1
    done
    [ -f "$dir/nginx.pid" ] && kill -QUIT "$(cat "$dir/nginx.pid")" 2>/dev/null || true
done
exit 1
