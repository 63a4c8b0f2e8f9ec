#!/usr/bin/env bash
# make bench: time embedscope against peers in the same run and report ratios.
# Both sides use one BLAS thread so the comparison is like for like.
set -euo pipefail
build=${1:-build}
reps=${BENCH_REPEATS:-7}
data=data/gpt2-small/wpe.npy
export OPENBLAS_NUM_THREADS=1
mkdir -p bench/results
ours=$("$build/bench/bench_svd" "$data" "$reps")
peer=$(/usr/bin/python3 bench/numpy_svd.py "$data" "$reps")
echo "$ours"; echo "$peer"
/usr/bin/python3 - "$ours" "$peer" <<'PY' | tee bench/results/svd.txt
import json, sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print("SVD of GPT-2 W_pos (centred, 1 BLAS thread), median of runs:")
print("  embedscope %.4f s | raw LAPACKE dgesdd %.4f s | numpy %.4f s" % (a["embedscope_s"], a["lapack_s"], b["numpy_s"]))
print("  ratio embedscope/LAPACK %.2f, embedscope/numpy %.2f" % (a["embedscope_s"] / a["lapack_s"], a["embedscope_s"] / b["numpy_s"]))
PY
