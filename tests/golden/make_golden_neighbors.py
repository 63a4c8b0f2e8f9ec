#!/usr/bin/python3
"""Golden nearest neighbours (the neighbors endpoint), computed with numpy from the
shipped weights. Run from the repository root with Debian's python3-numpy:

    /usr/bin/python3 tests/golden/make_golden_neighbors.py      (or: make golden)

Reads data/gpt2-small/wpe.npy and data/openai-gpt/wpe.npy (float64, items x d_model).
For each case the selected rows (a Python slice) are scored against the query row:
  full space: the raw rows; cosine x.q / (|x| |q|) (0 for a zero row), euclidean |x - q|;
  pca space:  the rows' coordinates U S on the top `components` principal components of
              the selection centred by columns (np.linalg.svd); cosine and distances
              do not depend on the sign of a component.
The query row itself is left out; the k best by score (cosine highest first, distance
lowest first), ties to the lower row (np.lexsort). Writes tests/golden/golden_neighbors.json,
read by tests/http/test_neighbors.py. Floats are written with repr (round-trip exact)."""
import hashlib
import json

import numpy as np

OUT = "tests/golden/golden_neighbors.json"
FILES = {"gpt2-small/wpe": "data/gpt2-small/wpe.npy", "openai-gpt/wpe": "data/openai-gpt/wpe.npy"}
CASES = [
    # matrix, rows, row, k, metric, space, components
    ("gpt2-small/wpe", "1:", 100, 10, "cosine", "full", None),
    ("gpt2-small/wpe", "", 0, 5, "euclidean", "full", None),
    ("gpt2-small/wpe", "1:", 512, 8, "cosine", "pca", 3),
    ("gpt2-small/wpe", "1:", 700, 12, "euclidean", "pca", 10),
    ("gpt2-small/wpe", "0:1024:4", 1023, 6, "cosine", "full", None),  # a query outside the selection
    ("openai-gpt/wpe", "", 10, 7, "euclidean", "full", None),
]


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def select(n, rows):
    parts = [int(p) if p else None for p in rows.split(":")]
    return np.arange(n)[slice(*parts) if len(parts) > 1 else slice(None)]


def scores(points, query, metric):
    if metric == "cosine":
        norms = np.linalg.norm(points, axis=1) * np.linalg.norm(query)
        dots = points @ query
        return np.where(norms > 0, dots / np.where(norms > 0, norms, 1), 0.0)
    return np.sqrt(((points - query) ** 2).sum(axis=1))


def case(items, mid, rows, row, k, metric, space, components):
    x = items[mid]
    idx = select(x.shape[0], rows)
    if space == "full":
        points, query = x[idx], x[row]
    else:
        sel = x[idx] - x[idx].mean(axis=0, keepdims=True)
        u, s, _ = np.linalg.svd(sel, full_matrices=False)
        points = u[:, :components] * s[:components]
        query = points[list(idx).index(row)]
    sc = scores(points, query, metric)
    keep = idx != row
    idx, sc = idx[keep], sc[keep]
    order = np.lexsort((idx, -sc if metric == "cosine" else sc))[:k]
    return {"matrix": mid, "rows": rows, "row": row, "k": k, "metric": metric, "space": space,
            "components": components, "want_rows": [int(i) for i in idx[order]],
            "want_scores": [float(v) for v in sc[order]]}


def main():
    items = {mid: np.load(path).astype(np.float64) for mid, path in FILES.items()}
    golden = {"generator": "tests/golden/make_golden_neighbors.py", "numpy": np.__version__,
              "inputs": {path: sha256(path) for path in sorted(FILES.values())}, "tolerance": 1e-9,
              "cases": [case(items, *c) for c in CASES]}
    with open(OUT, "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
