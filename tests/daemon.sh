# Sourced by the test runners (tests/http/run.sh, tests/browser/run.sh).
#
# start_daemon LOG BIN [ARGS...]
#   Starts BIN ARGS on a free loopback port (--listen 127.0.0.1:0: the daemon binds one and logs
#   "listening on http://127.0.0.1:PORT"), stderr to LOG, in the background. Sets pid and url
#   (http://127.0.0.1:PORT, no trailing slash). Returns 1 if it exits or logs no port within 600 s.
# wait_ready URL
#   Waits until URL/readyz answers 200. Returns 1 after 600 s.
# Both limits guard against a hang, never check speed: a loaded machine stretches seconds to minutes.

start_daemon() {
    local log=$1 bin=$2 port=
    shift 2
    : >"$log"   # emptied here: the background job's own redirection may come after the first read
    "$bin" "$@" --listen 127.0.0.1:0 2>"$log" &
    pid=$!
    for _ in $(seq 1 6000); do
        port=$(sed -nE 's#.*listening on http://127\.0\.0\.1:([0-9]+).*#\1#p' "$log" | head -1)
        [ -n "$port" ] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    [ -n "$port" ] || return 1
    url=http://127.0.0.1:$port
}

wait_ready() {
    for _ in $(seq 1 6000); do
        [ "$(curl -s -o /dev/null -w '%{http_code}' "$1/readyz")" = 200 ] && return 0
        sleep 0.1
    done
    return 1
}
