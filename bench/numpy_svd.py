"""Peer timing for bench/run.sh: numpy's SVD of the same centred block
(np.linalg.svd, full_matrices=False, float64). Prints one JSON line."""
import json
import sys
import time

import numpy as np

path, reps = sys.argv[1], int(sys.argv[2])
x = np.load(path).astype(np.float64)
x = x - x.mean(axis=0)
times = []
for _ in range(reps):
    t0 = time.perf_counter()
    np.linalg.svd(x, full_matrices=False)
    times.append(time.perf_counter() - t0)
print(json.dumps({"case": "numpy svd %dx%d centred" % x.shape, "numpy_s": float(np.median(times))}))
