#!/usr/bin/python3
"""Golden values for the positional analyses (issue 4), computed with numpy from the
real weights. Run from the repository root with Debian's python3-numpy:

    /usr/bin/python3 tests/golden/make_golden_positional.py

Reads data/gpt2-small/{wpe,h0_c_attn}.npy, data/openai-gpt/wpe.npy and, for the
attention goldens, ../shared/data/gpt2-small/gpt2-small-partial.safetensors (header
parsed with json, tensors with np.frombuffer). Writes tests/golden/golden_positional.json.
Everything is float64; definitions follow include/embedscope/positional.h but are
implemented independently (FFT periodogram, einsum/matmul, np.median; Fisher's g-test
p-values summed exactly in rational arithmetic (fractions), so even where the C code only reports
a lower bound the true value is known)."""
import json
import math
from fractions import Fraction
import os
import struct

import numpy as np

SAFETENSORS = "../shared/data/gpt2-small/gpt2-small-partial.safetensors"
OUT = "tests/golden/golden_positional.json"


def load_npy(path):
    return np.load(path).astype(np.float64)


def load_safetensors(path, names):
    with open(path, "rb") as f:
        raw = f.read()
    (hlen,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + hlen])
    base = 8 + hlen
    out = {}
    for name in names:
        t = header[name]
        assert t["dtype"] == "F32"
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(raw[base + a:base + b], dtype="<f4").reshape(t["shape"]).astype(np.float64)
    return out


# ------------------------------------------------------------------ attention
def attention_patterns(wpe, g, b, w, bias, n_heads, eps=1e-5):
    """Per-head causal softmax patterns of LayerNorm(wpe) through c_attn's q and k."""
    n, d = wpe.shape
    mu = wpe.mean(axis=1, keepdims=True)
    var = ((wpe - mu) ** 2).mean(axis=1, keepdims=True)
    x = (wpe - mu) / np.sqrt(var + eps) * g + b
    qkv = x @ w + bias
    dh = d // n_heads
    mask = np.tril(np.ones((n, n), dtype=bool))
    for h in range(n_heads):
        q = qkv[:, h * dh:(h + 1) * dh]
        k = qkv[:, d + h * dh:d + (h + 1) * dh]
        s = q @ k.T / math.sqrt(dh)
        s = np.where(mask, s, -np.inf)
        s = s - s.max(axis=1, keepdims=True)
        e = np.exp(s)
        yield h, e / e.sum(axis=1, keepdims=True)


def head_scores(a, q0, q1):
    p = np.arange(q0, q1)
    rows = a[q0:q1]
    prev_p = p[p >= 1]
    prev = a[prev_p, prev_p - 1].mean()
    self_ = rows[np.arange(len(p)), p].mean()
    dist = (rows * (p[:, None] - np.arange(a.shape[1])[None, :]).clip(min=0)).sum(axis=1).mean()
    return float(prev), float(self_), float(dist)


def bin_edges(n, bins):
    b = n if bins == 0 or bins > n else bins
    return [i * n // b for i in range(b + 1)]


def binned_means(a, re, ce):
    return [[float(a[re[i]:re[i + 1], ce[j]:ce[j + 1]].mean()) for j in range(len(ce) - 1)]
            for i in range(len(re) - 1)]


def attention_goldens():
    if not os.path.exists(SAFETENSORS):
        return None
    out = {"layers": [], "pattern": None}
    ranges = [(0, 1024), (100, 300)]
    for layer in (0, 5):
        pre = "h.%d." % layer
        t = load_safetensors(SAFETENSORS, ["wpe.weight", pre + "ln_1.weight", pre + "ln_1.bias",
                                           pre + "attn.c_attn.weight", pre + "attn.c_attn.bias"])
        entry = {"layer": layer, "ranges": []}
        per_range = {r: [] for r in ranges}
        for h, a in attention_patterns(t["wpe.weight"], t[pre + "ln_1.weight"], t[pre + "ln_1.bias"],
                                       t[pre + "attn.c_attn.weight"], t[pre + "attn.c_attn.bias"], 12):
            for r in ranges:
                per_range[r].append(head_scores(a, *r))
            if layer == 0 and h == 3:
                q0, q1, bins = 100, 300, 16
                re = bin_edges(q1 - q0, bins)
                ce = bin_edges(q1, bins)
                out["pattern"] = {"layer": 0, "head": 3, "q_start": q0, "q_stop": q1, "bins": bins,
                                  "row_edges": [e + q0 for e in re], "col_edges": ce,
                                  "values": binned_means(a[q0:q1, :q1], re, ce)}
        for r in ranges:
            entry["ranges"].append({"q_start": r[0], "q_stop": r[1],
                                    "prev": [s[0] for s in per_range[r]],
                                    "self": [s[1] for s in per_range[r]],
                                    "distance": [s[2] for s in per_range[r]]})
        out["layers"].append(entry)
    return out


# ------------------------------------------------------------------ outliers, Toeplitz
def outliers(x, threshold=3.5):
    norm = np.linalg.norm(x, axis=1)
    med = np.median(norm)
    mad = np.median(np.abs(norm - med))
    scale = max(1.4826 * mad, 1e-9 * med, np.finfo(float).tiny)
    score = np.abs(norm - med) / scale
    return {"threshold": threshold, "median": float(med), "mad": float(mad),
            "flagged": [int(i) for i in np.nonzero(score > threshold)[0]]}


def toeplitz_score(g):
    n = g.shape[0]
    resid = 0.0
    for off in range(-(n - 1), n):
        dgl = np.diagonal(g, offset=off)
        resid += ((dgl - dgl.mean()) ** 2).sum()
    return float(1 - resid / ((g - g.mean()) ** 2).sum())


def toeplitz_pair(x):
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    return {"gram": toeplitz_score(x @ x.T), "cosine": toeplitz_score(u @ u.T)}


# ------------------------------------------------------------------ alignment
def alignment(wpe, c_attn, k=10):
    r = wpe[1:] - wpe[1:].mean(axis=0)
    vr = np.linalg.svd(r, full_matrices=False)[2]
    out = {"k": k, "reference_rows": "1:", "reference_centering": "columns", "weights": {}}
    for i, name in enumerate("qkv"):
        w_items = c_attn[:, i * 768:(i + 1) * 768].T      # items x model (model axis rows)
        vw = np.linalg.svd(w_items, full_matrices=False)[2]
        ov = (vw @ vr.T) ** 2
        cap = ov[:, :k].sum(axis=1)
        out["weights"][name] = {"capture": [float(c) for c in cap],
                     "top_mean": {str(m): float(cap[:m].mean()) for m in (1, 5, 10, 20, 50)},
                     "overlap10": [[float(v) for v in row] for row in ov[:10, :10]]}
    return out


# ------------------------------------------------------------------ periodicity
def ls_power(y, f):
    n = len(y)
    t = np.arange(n)
    c = np.cos(2 * np.pi * f * t / n)
    s = np.sin(2 * np.pi * f * t / n)
    c -= c.mean()
    s -= s.mean()
    m = np.stack([c, s], axis=1)
    coef, *_ = np.linalg.lstsq(m, y, rcond=None)
    return float(((m @ coef) ** 2).sum())


def refine(y, lo, hi):
    # dense scan, then golden section around the best grid point
    grid = np.linspace(lo, hi, 801)
    vals = [ls_power(y, f) for f in grid]
    i = int(np.argmax(vals))
    a, b = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
    r = (math.sqrt(5) - 1) / 2
    while b - a > 1e-11:
        x1, x2 = b - r * (b - a), a + r * (b - a)
        if ls_power(y, x1) < ls_power(y, x2):
            a = x1
        else:
            b = x2
    return (a + b) / 2


ALPHA = 0.01
EDGE_TOL = 1e-6


def fisher_p(g, m):
    """P(max of m normalised exponential ordinates >= g), Fisher (1929), summed exactly."""
    g = Fraction(g)
    p = Fraction(0)
    j = 1
    while j <= m and j * g < 1:
        p += (-1) ** (j - 1) * math.comb(m, j) * (1 - j * g) ** (m - 1)
        j += 1
    return float(p)


def period(y, step):
    n = len(y)
    y = y - y.mean()
    p = np.abs(np.fft.rfft(y)) ** 2
    p[0] = 0
    k = int(np.argmax(p[1:n // 2 + 1])) + 1
    w = np.where(2 * np.arange(len(p)) == n, 1.0, 2.0)
    near = sum(w[j] * p[j] for j in range(k - 1, k + 2) if 1 <= j <= n // 2)
    share = near / (n * (y ** 2).sum())
    lo, hi = max(k - 1, 0.5), min(k + 1, n / 2)
    f = refine(y, lo, hi)
    m = n // 2
    g = float(p[k] / p[1:m + 1].sum())
    pv = fisher_p(g, m)
    if f - lo <= EDGE_TOL or (hi - f <= EDGE_TOL and 2 * hi < n):
        verdict = "edge_of_search_range"
    elif f < 1 - EDGE_TOL:
        verdict = "under_one_cycle"
    elif pv >= ALPHA:
        verdict = "not_significant"
    else:
        verdict = "found"
    return {"peak_bin": k, "peak_share": float(share), "fit_cycles": float(f),
            "fit_period": float(n * step / f), "verdict": verdict, "g": g, "n_ordinates": m,
            "p_value": pv}


def circle_power(z, f):
    """Power of z explained by the least-squares fit c + a e^{2 pi i f t / n} beyond its mean (numpy lstsq)."""
    n = len(z)
    m = np.stack([np.ones(n), np.exp(2j * np.pi * f * np.arange(n) / n)], axis=1)
    coef, *_ = np.linalg.lstsq(m, z, rcond=None)
    return float(np.sum(np.abs(m @ coef - z.mean()) ** 2))


def turns(u, s, a, b):
    """Turns of the helix in plane (a, b): the frequency of the best circular fit of the PCA coordinates
    s_a u_a + i s_b u_b, searched around the complex FFT peak (either sense), dense scan then golden
    section, as ls_power's refine."""
    z = s[a] * u[:, a] + 1j * s[b] * u[:, b]
    n = len(z)
    p = np.abs(np.fft.fft(z - z.mean())) ** 2
    p[0] = 0
    k = int(np.argmax(p))
    sense, k = (1, k) if 2 * k <= n else (-1, n - k)
    lo, hi = max(k - 1, 0.5), min(k + 1, n / 2)
    grid = np.linspace(lo, hi, 801)
    vals = [circle_power(z, sense * f) for f in grid]
    i = int(np.argmax(vals))
    lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
    r = (math.sqrt(5) - 1) / 2
    while hi - lo > 1e-11:
        x1, x2 = hi - r * (hi - lo), lo + r * (hi - lo)
        if circle_power(z, sense * x1) < circle_power(z, sense * x2):
            lo = x1
        else:
            hi = x2
    return (lo + hi) / 2


def periodicity(x, start, stop, step, m):
    rows = x[start:stop:step]
    u, s, _ = np.linalg.svd(rows - rows.mean(axis=0), full_matrices=False)
    per = [period(u[:, j], step) for j in range(max(m, 3))]
    best, plane = math.inf, (0, 1)
    for a in range(3):
        for b in range(a + 1, 3):
            if per[a]["verdict"] != "found" or per[b]["verdict"] != "found":
                continue
            mis = abs(per[a]["fit_period"] - per[b]["fit_period"]) / max(per[a]["fit_period"],
                                                                        per[b]["fit_period"])
            if mis < best:
                best, plane = mis, (a, b)
    gaps = [float((s[j] - s[j + 1]) / s[j]) for j in range(m)]
    return {"rows": "%d:%d:%d" % (start, stop, step), "m": m, "components": per[:m],
            "relative_gaps": gaps, "turn_plane": list(plane), "turns": turns(u, s, *plane)}


# ------------------------------------------------------------------ averaging, degeneracy
def averaging(x, g):
    n = x.shape[0]
    avg = x.copy()
    for a in range(0, n, g):
        avg[a:a + g] = x[a:a + g].mean(axis=0)
    mean = x.mean(axis=0)
    v = np.linalg.svd(x - mean, full_matrices=False)[2][:3].T
    po, pa = (x - mean) @ v, (avg - mean) @ v
    disp = np.linalg.norm(pa - po, axis=1)
    radius = np.linalg.norm(po, axis=1).mean()
    return {"g": g, "mean_disp": float(disp.mean()), "max_disp": float(disp.max()),
            "max_row": int(np.argmax(disp)), "radius": float(radius)}


def degeneracy(s, threshold=1e-2):
    groups, j, r = [], 0, len(s)
    while j + 1 < r:
        e = j + 1
        while e < r and (s[e - 1] - s[e]) / s[e - 1] < threshold:
            e += 1
        if e - j >= 2:
            groups.append([j, e])
        j = e
    return groups


def main():
    wpe2 = load_npy("data/gpt2-small/wpe.npy")
    wpe1 = load_npy("data/openai-gpt/wpe.npy")
    c_attn = load_npy("data/gpt2-small/h0_c_attn.npy")
    s2 = np.linalg.svd(wpe2 - wpe2.mean(axis=0), compute_uv=False)
    golden = {
        "generator": "tests/golden/make_golden_positional.py (numpy %s)" % np.__version__,
        "outliers": {"gpt2-small/wpe": outliers(wpe2), "openai-gpt/wpe": outliers(wpe1)},
        "toeplitz": {"gpt2-small/wpe": toeplitz_pair(wpe2), "openai-gpt/wpe": toeplitz_pair(wpe1)},
        "alignment": alignment(wpe2, c_attn),
        "periodicity": [periodicity(wpe2, 0, 1024, 1, 6), periodicity(wpe2, 1, 1024, 3, 4),
                        periodicity(wpe2, 1, 1024, 1, 4), periodicity(wpe1, 0, 512, 1, 4)],
        "averaging": [averaging(wpe2, 10), averaging(wpe2, 100)],
        "degeneracy": {"matrix": "gpt2-small/wpe", "centering": "columns", "threshold": 1e-2,
                       "groups": degeneracy(s2)},
        "attention": attention_goldens(),
    }
    with open(OUT, "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
