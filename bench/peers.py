"""One timed run of a peer on the same matrix as bench_svd (load not timed), column-centred, the first
k singular values reported. Prints {"tool", "seconds", "s"}. Usage: peers.py FILE TOOL K
TOOL: numpy_svd (np.linalg.svd, full_matrices=False), numpy_values (compute_uv=False), sklearn_full,
sklearn_randomized (PCA svd_solver=...), sklearn_covariance_eigh (when this sklearn has it),
scipy_svds (scipy.sparse.linalg.svds, k)."""
import json
import sys
import time

import numpy as np

path, tool, k = sys.argv[1], sys.argv[2], int(sys.argv[3])
x = np.load(path)


def centred():
    return x - x.mean(axis=0)


t0 = time.perf_counter()
if tool == "numpy_svd":
    s = np.linalg.svd(centred(), full_matrices=False)[1]
elif tool == "numpy_values":
    s = np.linalg.svd(centred(), compute_uv=False)
elif tool.startswith("sklearn_"):
    from sklearn.decomposition import PCA
    solver = tool[len("sklearn_"):]
    pca = PCA(n_components=k, svd_solver=solver, random_state=0)
    pca.fit_transform(x)
    s = pca.singular_values_
elif tool == "scipy_svds":
    from scipy.sparse.linalg import svds
    s = np.sort(svds(centred(), k=k, random_state=0)[1])[::-1]
else:
    sys.exit("unknown tool " + tool)
seconds = time.perf_counter() - t0
print(json.dumps({"tool": tool, "seconds": seconds, "s": [float(v) for v in s[:k]]}))
