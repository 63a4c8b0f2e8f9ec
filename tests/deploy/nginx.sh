#!/usr/bin/env bash
# Run Debian's nginx with deploy/nginx.conf in front of an embedscope daemon,
# from a private directory, on a free loopback port (for tests and for trying
# the proxy by hand).
#
#   tests/deploy/nginx.sh start DIR UPSTREAM [PORT]
#       UPSTREAM is the daemon's host:port (e.g. 127.0.0.1:8080), or several
#       joined by commas (replicas: one upstream server each); PORT defaults
#       to a free one. Renders deploy/nginx.conf into DIR (listen 127.0.0.1:PORT,
#       that upstream, the cache under DIR/cache), starts nginx in the
#       background with pid, logs and temp files inside DIR, waits until it
#       accepts connections and prints its base URL, http://127.0.0.1:PORT.
#       Fails (exit 1, nginx's error log on stderr) if it does not start.
#       Environment (tests): NGINX_CORS_ORIGINS, space-separated origins listed
#       in the config's Origin map (the daemon's restricted server.cors_origins);
#       NGINX_WRITE_ALLOW, addresses (CIDR) listed in its geo block (writes
#       without a token); NGINX_READ_TIMEOUT, its proxy_read_timeout (e.g. 1s).
#   tests/deploy/nginx.sh reload DIR UPSTREAM
#       Renders that nginx's configuration again with these upstream servers
#       (same port) and has it reload (SIGHUP): a replica's new address.
#   tests/deploy/nginx.sh stop DIR
#       Stops that nginx (SIGQUIT, then SIGTERM after 5 s) and waits for it.
#       Nothing to do when it is not running. DIR itself is the caller's.
#
# Needs the nginx package (the Makefile's deps install it).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
NGINX=${NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}

die() { echo "nginx.sh: $*" >&2; exit 1; }

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# The main context around deploy/nginx.conf: everything nginx writes stays in $dir.
render() {  # render DIR UPSTREAM PORT
    local dir=$1 upstream=$2 port=$3 user=""
    [ "$(id -u)" -eq 0 ] && user="user $(id -un) $(id -gn);"   # workers as the caller, who owns DIR
    mkdir -p "$dir/logs" "$dir/cache" "$dir/temp"
    local servers="" u   # one server line per replica, each with the shipped line's parameters
    for u in ${upstream//,/ }; do servers+="${servers:+\n}\1server $u\2;"; done
    local origins="" allow="" o
    for o in ${NGINX_CORS_ORIGINS:-}; do origins+="    \"$o\" \$http_origin;\n"; done
    for o in ${NGINX_WRITE_ALLOW:-}; do allow+="    $o 1;\n"; done
    sed -E -e "s#^( *)listen +[^;]+;#\1listen 127.0.0.1:$port;#" \
           -e "/^upstream embedscope/,/^}/s#^( *)server +[^ ;]+([^;]*);#$servers#" \
           -e "s#^proxy_cache_path +[^ ]+#proxy_cache_path $dir/cache#" \
           -e "s#^( *)access_log +[^ ;]+#\1access_log $dir/logs/embedscope.access.log#" \
           -e "/^map \\\$http_origin /,/^}/s#^( *default \"\";)#\1\n$origins#" \
           -e "/^geo \\\$embedscope_write_allowed /,/^}/s#^( *default 0;)#\1\n$allow#" \
           ${NGINX_READ_TIMEOUT:+-e "s#proxy_read_timeout +[^;]+;#proxy_read_timeout $NGINX_READ_TIMEOUT;#"} \
           "$root/deploy/nginx.conf" >"$dir/embedscope.conf"
    grep -q "listen 127.0.0.1:$port;" "$dir/embedscope.conf" && grep -q "server ${upstream##*,}" "$dir/embedscope.conf" \
        && grep -q "access_log $dir/logs/embedscope.access.log" "$dir/embedscope.conf" \
        || die "deploy/nginx.conf no longer has the listen / upstream server / access_log lines this script rewrites"
    for o in ${NGINX_CORS_ORIGINS:-} ${NGINX_WRITE_ALLOW:-}; do
        grep -qF "$o" "$dir/embedscope.conf" || die "deploy/nginx.conf: no Origin map / geo block to list $o in"
    done
    cat >"$dir/nginx.conf" <<EOF
$user
worker_processes 1;
pid $dir/nginx.pid;
error_log $dir/logs/error.log info;
events { worker_connections 1024; }
http {
    include /etc/nginx/mime.types;
    access_log $dir/logs/access.log;
    client_body_temp_path $dir/temp/body;
    proxy_temp_path $dir/temp/proxy;
    fastcgi_temp_path $dir/temp/fastcgi;
    uwsgi_temp_path $dir/temp/uwsgi;
    scgi_temp_path $dir/temp/scgi;
    include $dir/embedscope.conf;
}
EOF
}

start() {  # start DIR UPSTREAM [PORT]
    local dir upstream=$2 port=${3:-} tries
    [ -x "$NGINX" ] || die "nginx is not installed (make deps installs it)"
    mkdir -p "$1"; dir=$(cd "$1" && pwd)
    for tries in 1 2 3; do   # a free port can be taken between the probe and nginx's bind
        local p=${port:-$(free_port)}
        render "$dir" "$upstream" "$p"
        rm -f "$dir/nginx.pid"
        setsid "$NGINX" -p "$dir" -c "$dir/nginx.conf" -e "$dir/logs/error.log" -g 'daemon off;' \
            </dev/null >>"$dir/logs/stdout.log" 2>&1 &
        local pid=$! i
        for i in $(seq 100); do
            kill -0 "$pid" 2>/dev/null || break
            if [ -s "$dir/nginx.pid" ] && (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
                echo "$pid" >"$dir/master.pid"
                echo "http://127.0.0.1:$p"
                return 0
            fi
            sleep 0.05
        done
        kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true
        [ -z "$port" ] && grep -q 'Address already in use' "$dir/logs/error.log" && continue
        break
    done
    cat "$dir/logs/error.log" "$dir/logs/stdout.log" >&2 2>/dev/null || true
    die "nginx did not start (config: $dir/nginx.conf)"
}

reload() {  # reload DIR UPSTREAM
    local dir=$1 port
    [ -s "$dir/master.pid" ] || die "no nginx running from $dir"
    port=$(sed -n 's#^ *listen 127\.0\.0\.1:\([0-9]*\);#\1#p' "$dir/embedscope.conf" | head -1)
    render "$dir" "$2" "$port"
    kill -HUP "$(cat "$dir/master.pid")"
}

stop() {  # stop DIR
    local dir=$1 pid i
    [ -s "$dir/master.pid" ] || return 0
    pid=$(cat "$dir/master.pid")
    rm -f "$dir/master.pid"
    kill -QUIT "$pid" 2>/dev/null || return 0
    for i in $(seq 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.05; done
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.05; done
    die "nginx (pid $pid) did not stop"
}

case ${1:-} in
    start) [ $# -ge 3 ] || die "usage: $0 start DIR UPSTREAM [PORT]"; start "$2" "$3" "${4:-}" ;;
    reload) [ $# -eq 3 ] || die "usage: $0 reload DIR UPSTREAM"; reload "$2" "$3" ;;
    stop) [ $# -eq 2 ] || die "usage: $0 stop DIR"; stop "$2" ;;
    *) die "usage: $0 start DIR UPSTREAM [PORT] | reload DIR UPSTREAM | stop DIR" ;;
esac
