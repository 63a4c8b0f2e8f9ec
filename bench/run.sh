#!/usr/bin/env bash
# make bench: embedscope against its peers in one interleaved run (each tool in its own process under
# /usr/bin/time -v for the peak RSS, one BLAS thread each, the same float64 matrix), then the HTTP
# comparison against nginx (bench/http.sh). Prints and writes bench/results/report.md.
# BENCH_ROUNDS (default 3) rounds per size; BENCH_SIZES (default "wpe 4096 16384 50257"; add 128256x1024
# as "128256x1024" when memory allows); BENCH_K (default 30) singular triplets for top-k and PCA.
set -euo pipefail
build=${1:-build}
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
rounds=${BENCH_ROUNDS:-3}
sizes=${BENCH_SIZES:-wpe 4096 16384 50257}
k=${BENCH_K:-30}
data=$build/bench-data
mkdir -p "$data" bench/results
out=bench/results/runs.jsonl
: >"$out"
py=/usr/bin/python3
tools="embedscope_exact embedscope_topk embedscope_values lapacke_dgesdd numpy_svd numpy_values sklearn_full sklearn_randomized scipy_svds"
if $py -c "from sklearn.decomposition import PCA; import numpy; PCA(1, svd_solver='covariance_eigh').fit(numpy.eye(3))" 2>/dev/null; then
    tools="$tools sklearn_covariance_eigh"
fi

command_of() { # tool file -> the command line
    case $1 in
        embedscope_exact) echo "$build/bench/bench_svd $2 exact $k" ;;
        embedscope_topk) echo "$build/bench/bench_svd $2 topk $k" ;;
        embedscope_values) echo "$build/bench/bench_svd $2 values $k" ;;
        lapacke_dgesdd) echo "$build/bench/bench_svd $2 lapacke $k" ;;
        *) echo "$py bench/peers.py $2 $1 $k" ;;
    esac
}

for size in $sizes; do
    case $size in
        wpe) file=$data/wpe1.npy; [ -f "$file" ] || $py bench/make_matrix.py wpe "$file" ;;
        *x*) file=$data/m$size.npy; [ -f "$file" ] || $py bench/make_matrix.py "${size%x*}" "${size#*x}" 1 "$file" ;;
        *) file=$data/m${size}x768.npy; [ -f "$file" ] || $py bench/make_matrix.py "$size" 768 1 "$file" ;;
    esac
    for round in $(seq 1 "$rounds"); do
        for tool in $tools; do
            log=$(mktemp)
            if line=$(/usr/bin/time -v $(command_of "$tool" "$file") 2>"$log"); then
                rss=$(sed -nE 's/.*Maximum resident set size \(kbytes\): ([0-9]+).*/\1/p' "$log")
                echo "$line" | $py -c "import json,sys; d=json.loads(sys.stdin.read()); d.update(size='$size', round=$round, rss_kb=int('${rss:-0}'), file_bytes=$(stat -c %s "$file")); print(json.dumps(d))" >>"$out"
                echo "$size round $round $tool: $(echo "$line" | sed -nE 's/.*"seconds": ([0-9.]+).*/\1/p') s"
            else
                echo "$size round $round $tool: FAILED"; tail -3 "$log"
            fi
            rm -f "$log"
        done
    done
done
$py bench/report.py "$out" "$k" | tee bench/results/report.md
