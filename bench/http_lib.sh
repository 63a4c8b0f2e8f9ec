# Sourced by bench/http.sh and bench/http_threads.sh: a server's CPU time around a wrk run.
# CPU clock ticks (utime + stime) used so far by every thread of the given processes.
cpu_ticks() {
    local t=0 p task f
    for p in "$@"; do
        for task in /proc/"$p"/task/*/stat; do
            # the fields after the command's ") ": state first, utime the 12th, stime the 13th
            read -ra f <<<"$(sed 's/.*) //' "$task" 2>/dev/null)" || continue
            [ "${#f[@]}" -gt 12 ] && t=$((t + f[11] + f[12]))
        done
    done
    echo $t
}
hz=$(getconf CLK_TCK)
# wrk's output for one run and the servers' CPU ticks during it -> "req/s p50_ms p99_ms cpu_ms_per_1000"
summary() {
    python3 - "$1" "$2" "$hz" <<'PY'
import re, sys
o, ticks, hz = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def ms(label):
    m = re.search(r"\s%s%%\s+([\d.]+)(us|ms|s)" % label, o)
    v, u = float(m.group(1)), m.group(2)
    return v / 1000 if u == "us" else v * 1000 if u == "s" else v
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", o).group(1))
replies = int(re.search(r"(\d+) requests in", o).group(1))
print("%.0f %.2f %.2f %.2f" % (rps, ms("50"), ms("99"), ticks * 1000 / hz / (replies / 1000)))
PY
}
measure() { # "pids" wrk-arguments... -> summary of one wrk run and the CPU the pids used during it
    local pids=$1 before out
    shift
    before=$(cpu_ticks $pids)
    out=$("$@" 2>&1)
    summary "$out" $(($(cpu_ticks $pids) - before))
}
