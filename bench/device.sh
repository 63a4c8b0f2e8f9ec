#!/usr/bin/env bash
# The issue's table on a many-core host where nothing can be installed (its numpy and scikit-learn are the
# peers): run from the repository root with .devbench/esdev.tar.gz (bench/devbench-pack.sh) beside it. Prints the
# machine, the OpenBLAS core the library picks there and the one embedscope runs (bench_svd --blas: its
# kernel check may restart it with OPENBLAS_CORETYPE), numpy's BLAS, then 50257x768 values / exact PCA /
# top-30 at 1 thread and at every core against numpy's values / svd and sklearn's randomized PCA with the
# same thread count (threadpoolctl and OPENBLAS_NUM_THREADS), the library's own generic pick timed once
# when the kernel check replaced it, then 128256x4096 values and top-30 at every core while the time
# budget allows. Matrices: bench/make_matrix.py, seeded. Everything goes to stdout and, when $OUT is set,
# $OUT/device-runs.jsonl and $OUT/device.md. DEVICE_BUDGET_S (default 400) bounds the whole run: a step
# that would start too late is skipped and says so. DEVICE_SIZES (default "50257x768 128256x4096")
# shrinks it for a local try; for a short rerun, DEVICE_THREADS (default "1 CORES") and DEVICE_TOOLS (default
# all six) pick the runs of the smaller sizes, DEVICE_GENERIC=0 skips the library's generic pick, and
# DEVICE_BIG_TOOLS (default values and top-k with their peers) the runs of the large one.
set -uo pipefail
t0=$SECONDS
budget=${DEVICE_BUDGET_S:-400}
sizes=${DEVICE_SIZES:-50257x768 128256x4096}
k=30
py=${PYTHON:-python3}
out=${OUT:-/tmp/esdev-out}
mkdir -p /tmp/esdev /tmp/esdev-data "$out"
tar -C /tmp/esdev -xzf .devbench/esdev.tar.gz
bin=/tmp/esdev/bench_svd
runs=$out/device-runs.jsonl
: >"$runs"
cores=$(nproc)
thread_counts=${DEVICE_THREADS:-1 $cores}
tools=${DEVICE_TOOLS:-embedscope_values numpy_values embedscope_exact numpy_svd embedscope_topk sklearn_randomized}
big_tools=${DEVICE_BIG_TOOLS:-embedscope_values numpy_values embedscope_topk sklearn_randomized}
left() { echo $((budget - (SECONDS - t0))); }

echo "## machine"
lscpu | grep -E '^(Model name|CPU\(s\)|Thread|Core|Socket|Flags)' | sed -E 's/^(Flags:\s+).*/\1(avx512: '"$(grep -o 'avx512[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' ')"')/'
free -g | head -2
echo "## kernels"
echo "embedscope (library's pick = library_core, in use = core): $(OPENBLAS_NUM_THREADS=1 $bin --blas)"
echo "library at its first load (OPENBLAS_VERBOSE=2, before any restart): $(OPENBLAS_VERBOSE=2 OPENBLAS_NUM_THREADS=1 $bin --blas 2>&1 | grep -m1 Core)"
echo "numpy: $($py -c 'import json, numpy, sklearn; from threadpoolctl import threadpool_info; print(numpy.__version__, sklearn.__version__, json.dumps([p for p in threadpool_info() if p.get("user_api") == "blas"]))' 2>&1 | tail -1)"
library_core=$(OPENBLAS_NUM_THREADS=1 $bin --blas | sed -nE 's/.*"library_core": "([^"]*)".*"coretype_source": "([a-z]*)".*/\1 \2/p')

# one TOOL FILE SIZE THREADS [VAR=VALUE ...]: one run, its JSON line (size, threads, label added) to $runs
one() {
    local tool=$1 file=$2 size=$3 threads=$4 label=$1 line
    shift 4
    [ $# -gt 0 ] && label="$tool ($*)"
    if [ "$(left)" -lt 20 ]; then echo "skipped (time budget): $size $threads thr $label"; return; fi
    local cmd
    case $tool in
        embedscope_*) cmd="$bin $file ${tool#embedscope_} $k" ;;
        *) cmd="$py bench/peers.py $file $tool $k" ;;
    esac
    if line=$(env OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads MKL_NUM_THREADS=$threads \
              BENCH_THREADS=$threads "$@" timeout "$(left)" $cmd 2>/tmp/esdev-err); then
        echo "$line" | $py -c "import json,sys; d=json.loads(sys.stdin.read()); d.update(size='$size', threads=$threads, label='$label'); print(json.dumps(d))" >>"$runs"
        echo "$size $threads thr $label: $(echo "$line" | sed -nE 's/.*"seconds": ([0-9.]+).*/\1/p') s"
    else
        echo "$size $threads thr $label: FAILED or timed out"; tail -3 /tmp/esdev-err
    fi
}

for size in $sizes; do
    n=${size%x*} d=${size#*x}
    file=/tmp/esdev-data/m$size.npy
    big=$([ "$n" -gt 60000 ] && echo 1 || echo 0)
    if [ "$big" = 1 ] && [ "$(left)" -lt 200 ]; then echo "skipped (time budget): $size"; continue; fi
    [ -f "$file" ] || OPENBLAS_NUM_THREADS=$cores $py bench/make_matrix.py "$n" "$d" 1 "$file"
    echo "## $size (matrix ready at $((SECONDS - t0)) s)"
    if [ "$big" = 1 ]; then
        export BENCH_NO_WARM=1
        for tool in $big_tools; do one $tool "$file" "$size" "$cores"; done
        unset BENCH_NO_WARM
        continue
    fi
    for threads in $thread_counts; do
        for tool in $tools; do
            one $tool "$file" "$size" "$threads"
        done
    done
    set -- $library_core
    if [ "${2:-}" = embedscope ] && [ "${DEVICE_GENERIC:-1}" != 0 ]; then # the library's own generic pick, as it ran before the kernel check
        one embedscope_values "$file" "$size" 1 OPENBLAS_CORETYPE="$1"
        one embedscope_values "$file" "$size" "$cores" OPENBLAS_CORETYPE="$1"
    fi
done
echo "## table (elapsed $((SECONDS - t0)) s)"
$py bench/device_table.py "$runs" | tee "$out/device.md"
