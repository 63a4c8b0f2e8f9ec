#!/usr/bin/python3
"""Golden values for the analyses added for exactness (cosine of centred rows, the averaged
rows in the unaveraged PCA basis, per-column periodicity, compare of cosine), computed with
numpy from the shipped weights. Run from the repository root with Debian's python3-numpy:

    /usr/bin/python3 tests/golden/make_golden_analyses.py      (or: make golden)

Reads data/gpt2-small/wpe.npy and data/openai-gpt/wpe.npy (float64). Writes
tests/golden/golden_analyses.json, read by tests/http/test_exact.py. Definitions follow
openapi.yaml, implemented independently: cosines by matrix products of centred, normalised rows;
PCA by np.linalg.svd with embedscope's sign convention (largest-|x| entry of each right vector
positive); periods by the FFT periodogram and a least-squares sinusoid (np.linalg.lstsq) refined
by a dense scan and golden-section search, Fisher's g-test summed exactly in rationals
(the functions of make_golden_positional.py)."""
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_golden_positional import ls_power, period  # noqa: E402

OUT = "tests/golden/golden_analyses.json"


def load(path):
    return np.load(path).astype(np.float64)


def unit(x):
    n = np.linalg.norm(x, axis=1, keepdims=True)
    return np.divide(x, n, out=np.zeros_like(x), where=n > 0)


def centred(x, sel, how, extra=None):
    """The selected rows (and extra rows) centred as `how` says: columns by the selection's mean row."""
    rows = x[sel] if extra is None else x[extra]
    if how == "columns":
        return rows - x[sel].mean(axis=0)
    if how == "rows":
        return rows - rows.mean(axis=1, keepdims=True)
    return rows


def cosine_row(x, start, stop, row, how):
    sel = np.arange(start, stop)
    a, b = unit(centred(x, sel, how)), unit(centred(x, sel, how, [row]))
    return {"rows": "%d:%d" % (start, stop), "row": row, "center": how, "similarity": (a @ b[0]).tolist()}


def cosine_offset(x, start, stop, how):
    sel = np.arange(start, stop)
    u = unit(centred(x, sel, how))
    g = u @ u.T
    n = len(sel)
    means = [float(np.mean(np.diagonal(g, off))) for off in range(n)]
    return {"rows": "%d:%d" % (start, stop), "center": how, "mean": means, "pairs": [n - off for off in range(n)]}


def cosine_matrix(x, start, stop, how):
    sel = np.arange(start, stop)
    u = unit(centred(x, sel, how))
    return {"rows": "%d:%d" % (start, stop), "center": how, "values": (u @ u.T).tolist()}


def signed_pca(rows):
    mean = rows.mean(axis=0)
    _, s, vt = np.linalg.svd(rows - mean, full_matrices=False)
    for j in range(len(vt)):
        i = int(np.argmax(np.abs(vt[j])))
        if vt[j, i] < 0:
            vt[j] = -vt[j]
    return mean, s, vt


def basis_original(x, start, g, k, picks):
    """pca?rows=start:&average=g&basis=original&k=k: the selected rows averaged in groups of g from
    the first selected one, centred by the unaveraged rows' mean, on their top k right vectors."""
    sel = x[start:]
    avg = sel.copy()
    for a in range(0, len(sel), g):
        avg[a:a + g] = sel[a:a + g].mean(axis=0)
    mean, s, vt = signed_pca(sel)
    coords = (avg - mean) @ vt[:k].T
    evr = s[:k] ** 2 / np.sum(s ** 2)
    return {"rows": "%d:" % start, "average": g, "k": k, "picks": picks,
            "coords": [coords[p - start].tolist() for p in picks], "explained_variance_ratio": evr.tolist(),
            "max_abs": float(np.max(np.abs(coords)))}


def column_period(y, step):
    """One column as a periodicity component (make_golden_positional's period) plus the fitted sinusoid's
    phase, amplitude and share of the variance, by np.linalg.lstsq at the refined frequency."""
    out = period(y, step)
    n, f = len(y), out["fit_cycles"]
    y = y - y.mean()
    t = np.arange(n)
    c, s = np.cos(2 * np.pi * f * t / n), np.sin(2 * np.pi * f * t / n)
    basis = np.stack([c - c.mean(), s - s.mean()], axis=1)
    (alpha, beta), *_ = np.linalg.lstsq(basis, y, rcond=None)
    out.update(amplitude=float(math.hypot(alpha, beta)), phase=float(math.atan2(-beta, alpha)),
               r2=ls_power(y, f) / float((y ** 2).sum()))
    return out


def periodicity_columns(x, start, picks):
    rows = x[start:]
    return {"rows": "%d:" % start, "n": len(rows), "columns": {str(j): column_period(rows[:, j], 1) for j in picks}}


def periodicity_all_columns(x, start):
    """Every column's peak bin, verdict, fitted cycles and r2 (period(): a global search of its bracket, a
    dense scan then golden section), for the check that no column reports a lower local maximum."""
    rows = x[start:]
    out = []
    for j in range(rows.shape[1]):
        y = rows[:, j] - rows[:, j].mean()
        p = period(y, 1)
        out.append({"peak_bin": p["peak_bin"], "verdict": p["verdict"], "fit_cycles": p["fit_cycles"],
                    "r2": ls_power(y, p["fit_cycles"]) / float((y ** 2).sum())})
    return {"rows": "%d:" % start, "columns": out}


def main():
    wpe = load("data/gpt2-small/wpe.npy")
    gpt1 = load("data/openai-gpt/wpe.npy")
    out = {
        "generator": "tests/golden/make_golden_analyses.py (numpy %s)" % np.__version__,
        "tolerance": 1e-12,
        "refined_tolerance": 1e-6,
        "cosine_row": [cosine_row(wpe, 0, 64, 5, "columns"), cosine_row(wpe, 0, 64, 1000, "columns"),
                       cosine_row(wpe, 1, 1024, 512, "columns"), cosine_row(wpe, 0, 64, 5, "rows")],
        "cosine_offset": [cosine_offset(wpe, 0, 64, "columns")],
        "cosine_matrix": [cosine_matrix(wpe, 0, 24, "columns")],
        "compare_cosine_offset": {"matrices": ["gpt2-small/wpe", "openai-gpt/wpe"],
                                  "results": [cosine_offset(wpe, 0, 64, "columns"),
                                              cosine_offset(gpt1, 0, 64, "columns")]},
        "basis_original": [basis_original(wpe, 1, 10, 3, [1, 2, 100, 555, 1023])],
        "periodicity_columns": periodicity_columns(wpe, 1, list(range(8)) + [100, 200, 447, 767]),
        "periodicity_all_columns": periodicity_all_columns(wpe, 1),
    }
    with open(OUT, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print("wrote", OUT)


if __name__ == "__main__":
    main()
