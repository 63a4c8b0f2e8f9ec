#!/usr/bin/env bash
# make bench: embedscope against its peers in one interleaved run (each tool in its own process under
# /usr/bin/time -v for the peak RSS, the same float64 matrix, the same BLAS thread count for every tool),
# then the HTTP comparison against nginx (bench/http.sh). Prints and writes bench/results/report.md.
# First the OpenBLAS core and version embedscope runs (after its kernel check, see bench_svd --blas) and
# numpy's BLAS. BENCH_THREADS (default "1 all"): the thread counts, each a full run ("all" = the cores this
# process may use); peers get BENCH_THREADS through threadpoolctl when installed, and
# OPENBLAS_NUM_THREADS / OMP_NUM_THREADS / MKL_NUM_THREADS in their environment either way.
# BENCH_ROUNDS (default 3) rounds per size; BENCH_SIZES (default "wpe 4096 16384 50257"; add 128256x1024
# as "128256x1024" when memory allows); BENCH_K (default 30) singular triplets for top-k and PCA.
set -euo pipefail
build=${1:-build}
rounds=${BENCH_ROUNDS:-3}
sizes=${BENCH_SIZES:-wpe 4096 16384 50257}
k=${BENCH_K:-30}
data=$build/bench-data
mkdir -p "$data" bench/results
py=/usr/bin/python3
all_cores=$(nproc)
echo "embedscope's OpenBLAS: $(OPENBLAS_NUM_THREADS=1 "$build/bench/bench_svd" --blas)"
echo "numpy's BLAS: $($py -c 'import json; from threadpoolctl import threadpool_info; print(json.dumps([p for p in threadpool_info() if p.get("user_api") == "blas"]))' 2>/dev/null || $py -c 'import numpy; numpy.show_config()' 2>&1 | grep -iA3 'blas' | head -8 | tr '\n' ' ')"
: >bench/results/report.md
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

for threads in ${BENCH_THREADS:-1 all}; do
[ "$threads" = all ] && threads=$all_cores
export OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads MKL_NUM_THREADS=$threads BENCH_THREADS=$threads
out=bench/results/runs-${threads}t.jsonl
: >"$out"
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
                echo "$line" | $py -c "import json,sys; d=json.loads(sys.stdin.read()); d.update(size='$size', threads=$threads, round=$round, rss_kb=int('${rss:-0}'), file_bytes=$(stat -c %s "$file")); print(json.dumps(d))" >>"$out"
                echo "$size $threads thr round $round $tool: $(echo "$line" | sed -nE 's/.*"seconds": ([0-9.]+).*/\1/p') s"
            else
                echo "$size $threads thr round $round $tool: FAILED"; tail -3 "$log"
            fi
            rm -f "$log"
        done
    done
done
$py bench/report.py "$out" "$k" | tee -a bench/results/report.md
done
