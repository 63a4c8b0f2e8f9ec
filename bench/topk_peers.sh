#!/usr/bin/env bash
# Top-k and σ only against their peers, interleaved, in one run: for each matrix file, embedscope top-k
# (bench_svd), sklearn randomized, embedscope σ only, numpy σ only (and, with TOPK_DENSE=1, the top-k with
# dsyevr's Gram eigenpairs too). Each in its own process under /usr/bin/time: wall, CPU (user + system) and
# peak RSS, plus the certificate and σ_{k-1}. THREADS (default 2) BLAS threads for every tool; ROUNDS
# (default 1); K (default 30); NO_VALUES=1 skips σ only (numpy's copy of a 4.2 GB matrix).
# Usage: bench/topk_peers.sh FILE.npy...   (run `make build/bench/bench_svd` first)
set -euo pipefail
threads=${THREADS:-2} rounds=${ROUNDS:-1} k=${K:-30}
export OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads BENCH_THREADS=$threads BENCH_NO_WARM=1
run() { # label file command...
    local label=$1 file=$2
    shift 2
    /usr/bin/time -f "$label $file CPU user %U sys %S wall %e maxrss_kb %M" "$@" 2>&1 | /usr/bin/python3 -c "
import json, sys
for line in sys.stdin:
    if line.startswith('{'):
        j = json.loads(line)
        print('$label $file seconds %.3f certified %s vector_bound %s eigensolver %s s_k-1 %r' % (j['seconds'],
              j.get('certified'), j.get('vector_bound'), j.get('eigensolver'), j['s'][$k - 1]), flush=True)
    elif ' CPU ' in line:
        print(line.strip(), flush=True)"
    echo "load $(cut -d' ' -f1-3 /proc/loadavg)"
}
for round in $(seq 1 "$rounds"); do
    for f in "$@"; do
        run embedscope_topk "$f" build/bench/bench_svd "$f" topk "$k"
        run sklearn_randomized "$f" /usr/bin/python3 bench/peers.py "$f" sklearn_randomized "$k"
        [ "${TOPK_DENSE:-0}" != 1 ] || BENCH_TOPK_DENSE=1 run embedscope_topk_dsyevr "$f" build/bench/bench_svd "$f" topk "$k"
        [ "${NO_VALUES:-0}" = 1 ] || run embedscope_values "$f" build/bench/bench_svd "$f" values "$k"
        [ "${NO_VALUES:-0}" = 1 ] || run numpy_values "$f" /usr/bin/python3 bench/peers.py "$f" numpy_values "$k"
    done
done
