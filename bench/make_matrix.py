"""Benchmark inputs as float64 .npy: `wpe` (GPT-2 W_pos rows 1:, 1023x768, from data/) or a seeded
N x D matrix with a decaying spectrum (Gaussian columns scaled by (j+1)^-0.5, then rotated by a
random orthogonal matrix), the stand-in for a token embedding the issue asks for.
Usage: make_matrix.py wpe|N D SEED OUT"""
import sys

import numpy as np

if sys.argv[1] == "wpe":
    x = np.load("data/gpt2-small/wpe.npy").astype(np.float64)[1:]
    out = sys.argv[2]
else:
    n, d, seed, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    x = np.empty((n, d))
    scale = (np.arange(d) + 1.0) ** -0.5
    for i in range(0, n, 8192):  # in blocks: one n x d array at a time
        x[i:i + 8192] = (rng.standard_normal((min(8192, n - i), d)) * scale) @ q
np.save(out, np.ascontiguousarray(x))
