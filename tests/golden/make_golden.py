#!/usr/bin/python3
"""Golden values for the core analyses (issue 2), computed with numpy from the
shipped weights. Run from the repository root with Debian's python3-numpy:

    /usr/bin/python3 tests/golden/make_golden.py      (or: make golden)

Reads data/gpt2-small/{wpe,h0_c_attn}.npy and data/openai-gpt/wpe.npy with np.load,
converts to float64 and decomposes with np.linalg.svd (full_matrices=False).
Writes tests/golden/golden.json, read by tests/analysis/test_golden.c:
  spectra: singular values, explained-variance ratios (first 20), sums, n50/n90/n99;
  pca:     top-3 coordinates (U S) of a few items, per component sign fixed by the
           embedscope convention (largest-|x| entry of the right vector positive);
  capture: c_j = |P_k v_j|^2 of the first 64 right (model-space) singular vectors of
           GPT-2's h0.q / h0.k / h0.v by W_pos's top-k subspace, and their sum over all;
  cosine:  cosine similarity of one row to a few others.
Matrices use the model orientation of embedscope: items x d_model. The q/k/v blocks of
c_attn are [d_model, 768] (Conv1D), so their items are the 768 columns (X = block.T)
and their model-space vectors are the LEFT singular vectors of the block.
Row selections are Python slices over items ("" = all); centring: none, columns
(subtract the mean item, PCA) or rows (subtract each item's mean over d_model).
Floats are written by json with repr (shortest text that round-trips, <= 17 digits)."""
import hashlib
import json
import os
import sys

import numpy as np

OUT = "tests/golden/golden.json"
FILES = {
    "gpt2-small/wpe": "data/gpt2-small/wpe.npy",
    "gpt2-small/h0.c_attn": "data/gpt2-small/h0_c_attn.npy",
    "openai-gpt/wpe": "data/openai-gpt/wpe.npy",
}
HEAD = 20          # singular values / ratios kept per spectrum case
CAPTURE_HEAD = 64  # capture values kept per capture case


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def load_items():
    """Matrix id -> items x d float64 array (model orientation)."""
    raw = {mid: np.load(path).astype(np.float64) for mid, path in FILES.items()}
    c_attn = raw.pop("gpt2-small/h0.c_attn")
    for b, name in enumerate(("q", "k", "v")):
        raw[f"gpt2-small/h0.{name}"] = c_attn[:, 768 * b:768 * (b + 1)].T
    return raw


def select(x, rows):
    """Items chosen by a Python slice text such as "1:1024:2" ("" = all)."""
    parts = [int(p) if p else None for p in rows.split(":")]
    idx = np.arange(x.shape[0])[slice(*parts) if len(parts) > 1 else slice(None)]
    return idx, x[idx]


def center(x, how):
    if how == "columns":
        return x - x.mean(axis=0, keepdims=True)
    if how == "rows":
        return x - x.mean(axis=1, keepdims=True)
    return x.copy()


def svd(x, rows, how):
    """Thin SVD with embedscope's sign convention: the largest-|x| entry (first on
    ties) of each right singular vector is positive; u follows."""
    idx, sel = select(x, rows)
    u, s, vt = np.linalg.svd(center(sel, how), full_matrices=False)
    signs = np.sign(vt[np.arange(vt.shape[0]), np.argmax(np.abs(vt), axis=1)])
    signs[signs == 0] = 1.0
    return idx, u * signs, s, vt * signs[:, None]


def needed(cumulative, threshold):
    """Smallest m with cumulative[m-1] >= threshold (1e-12 slack, as documented)."""
    return int(np.searchsorted(cumulative, threshold - 1e-12) + 1)


def spectrum_case(items, mid, rows, how):
    idx, _, s, _ = svd(items[mid], rows, how)
    total = float(np.sum(s ** 2))
    evr = s ** 2 / total
    cumulative = np.cumsum(evr)
    return {"matrix": mid, "rows": rows, "center": how, "n": len(idx), "r": len(s),
            "singular_values": s[:HEAD].tolist(), "evr": evr[:HEAD].tolist(),
            "sum_singular_values": float(np.sum(s)), "total_ss": total,
            "n50": needed(cumulative, 0.5), "n90": needed(cumulative, 0.9), "n99": needed(cumulative, 0.99)}


def pca_case(items, mid, rows, how, picks, k=3):
    idx, u, s, _ = svd(items[mid], rows, how)
    coords = u[:, :k] * s[:k]
    positions = [int(np.where(idx == p)[0][0]) for p in picks]
    return {"matrix": mid, "rows": rows, "center": how, "k": k, "items": picks,
            "singular_values": s[:k].tolist(), "coords": [coords[i].tolist() for i in positions]}


def capture_case(items, a, a_rows, a_center, k, b, b_rows, b_center):
    _, _, _, vt_a = svd(items[a], a_rows, a_center)
    _, _, _, vt_b = svd(items[b], b_rows, b_center)
    proj = vt_b @ vt_a[:k].T            # (v_j . a_i) for the top-k a_i
    capture = np.sum(proj ** 2, axis=1)
    return {"a": a, "a_rows": a_rows, "a_center": a_center, "k": k, "b": b, "b_rows": b_rows,
            "b_center": b_center, "count": len(capture), "capture": capture[:CAPTURE_HEAD].tolist(),
            "sum": float(np.sum(capture)), "baseline": k / vt_a.shape[1]}


def cosine_case(items, mid, row, others):
    x = items[mid]
    norms = np.linalg.norm(x, axis=1)
    sims = [float(x[row] @ x[o] / (norms[row] * norms[o])) for o in others]
    return {"matrix": mid, "row": row, "items": others, "similarity": sims}


def main():
    if not os.path.isdir("data"):
        sys.exit("run from the repository root")
    items = load_items()
    spectra = [spectrum_case(items, "gpt2-small/wpe", rows, how)
               for rows in ("", "1:", "100:", ":100", "1:1024:2") for how in ("none", "columns", "rows")]
    spectra += [spectrum_case(items, "openai-gpt/wpe", rows, how)
                for rows in ("", "1:") for how in ("none", "columns")]
    spectra += [spectrum_case(items, f"gpt2-small/h0.{b}", "", "none") for b in "qkv"]
    pca = [pca_case(items, "gpt2-small/wpe", "1:", "columns", [1, 2, 100, 511, 1023]),
           pca_case(items, "gpt2-small/wpe", "", "rows", [0, 1, 500, 1023]),
           pca_case(items, "openai-gpt/wpe", "", "columns", [0, 1, 255, 511])]
    capture = [capture_case(items, "gpt2-small/wpe", "1:", "columns", k, f"gpt2-small/h0.{b}", "", "none")
               for b in "qkv" for k in (10, 30)]
    cosine = [cosine_case(items, "gpt2-small/wpe", 0, [1, 2, 100, 1023]),
              cosine_case(items, "gpt2-small/wpe", 100, [0, 99, 101, 200, 900]),
              cosine_case(items, "gpt2-small/wpe", 1023, [0, 512, 1022]),
              cosine_case(items, "openai-gpt/wpe", 10, [0, 11, 20, 511])]
    golden = {
        "generator": "tests/golden/make_golden.py",
        "numpy": np.__version__,
        "python": sys.version.split()[0],
        "inputs": {path: sha256(path) for path in sorted(set(FILES.values()))},
        "tolerance": 1e-9,
        "spectra": spectra, "pca": pca, "capture": capture, "cosine": cosine,
    }
    with open(OUT, "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")
    print(f"wrote {OUT} ({os.path.getsize(OUT)} bytes)")


if __name__ == "__main__":
    main()
