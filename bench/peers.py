"""One timed run of a peer on the same matrix as bench_svd (load not timed), column-centred, the first
k singular values reported. Prints {"tool", "seconds", "warm_seconds", "s"}. Usage: peers.py FILE TOOL K
TOOL: numpy_svd (np.linalg.svd, full_matrices=False), numpy_values (compute_uv=False), sklearn_full,
sklearn_randomized (PCA svd_solver=...), sklearn_covariance_eigh (when this sklearn has it),
scipy_svds (scipy.sparse.linalg.svds, k).
Threads: BENCH_THREADS (default 1) through threadpoolctl when it is installed, else the
OPENBLAS_NUM_THREADS / OMP_NUM_THREADS the caller set for this process (bench/run.sh sets both); the
JSON line reports "threads" and numpy's BLAS ("blas": its library, version and core, from threadpoolctl).
BENCH_NO_WARM=1 skips the warm call (warm_seconds null).
Imports are not timed, nor is a first untimed call on the first d + 256 rows (sklearn and scipy import
parts of themselves on first use). "seconds" is then the first call on the whole matrix, "warm_seconds" a
second identical call: on this VM fresh memory costs ~3 ms per MiB to fault in (a first 309 MB np.array
copy takes 0.9 s, the next 0.03 s), so a tool that copies the matrix pays that on its first call only.
bench_svd measures both the same way."""
import json
import os
import sys
import time

import numpy as np

path, tool, k = sys.argv[1], sys.argv[2], int(sys.argv[3])
threads = int(os.environ.get("BENCH_THREADS", "1"))
try:
    from threadpoolctl import threadpool_info, threadpool_limits
    threadpool_limits(threads)
    pools = [p for p in threadpool_info() if p.get("user_api") == "blas"]
    blas = {"library": pools[0].get("internal_api"), "version": pools[0].get("version"),
            "core": pools[0].get("architecture"), "threads": pools[0].get("num_threads")} if pools else None
except ImportError:  # the environment variables bench/run.sh set hold the count
    blas = None
x = np.load(path)
if tool.startswith("sklearn_"):
    from sklearn.decomposition import PCA
elif tool == "scipy_svds":
    from scipy.sparse.linalg import svds


def singular_values(a):
    """The first k singular values of a, column-centred, by the tool."""
    if tool == "numpy_svd":
        return np.linalg.svd(a - a.mean(axis=0), full_matrices=False)[1]
    if tool == "numpy_values":
        return np.linalg.svd(a - a.mean(axis=0), compute_uv=False)
    if tool.startswith("sklearn_"):
        pca = PCA(n_components=k, svd_solver=tool[len("sklearn_"):], random_state=0)
        pca.fit_transform(a)
        return pca.singular_values_
    if tool == "scipy_svds":
        return np.sort(svds(a - a.mean(axis=0), k=k, random_state=0)[1])[::-1]
    sys.exit("unknown tool " + tool)


singular_values(x[:min(len(x), x.shape[1] + 256)])  # imports and set-up, untimed
times = []
for _ in range(1 if os.environ.get("BENCH_NO_WARM") == "1" else 2):  # the first call on the whole matrix, then a warm one
    t0 = time.perf_counter()
    s = singular_values(x)
    times.append(time.perf_counter() - t0)
print(json.dumps({"tool": tool, "seconds": times[0], "warm_seconds": times[1] if len(times) > 1 else None,
                  "threads": blas["threads"] if blas else threads, "blas": blas, "s": [float(v) for v in s[:k]]}))
