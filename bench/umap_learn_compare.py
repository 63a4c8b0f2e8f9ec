#!/usr/bin/env python3
"""UMAP against umap-learn (make bench-umap; a benchmark, never a test): a matrix of planted clusters
(UMAP_SHAPE, default 50257x768, UMAP_CLUSTERS 20: seeded Gaussian centres, each row a centre plus unit
Gaussian noise, float32) uploaded to the daemon on its embedded default, its 2-D UMAP asked as a job
(Prefer: respond-async, NPY) and timed from the request to the result; then umap-learn (Debian's
umap-learn, its defaults but metric='cosine' like the daemon's: spectral start, approximate neighbours by
NN-descent, every core) on the same rows, timed around fit_transform. Both layouts are scored by
sklearn's trustworthiness (k = 10, cosine in the input space) on one seeded sample of UMAP_SAMPLE rows
(default 5000: the score needs the sample's whole distance matrix), and by the share of each sampled
row's 10 nearest layout neighbours that share its cluster. Rounds alternate which runs first (UMAP_ROUNDS,
default 2: umap-learn's first call, numba compiling, then its compiled call). Each round the daemon gets the
rows under a new name, so it computes its start (the PCA decomposition) each time, as umap-learn computes its
spectral start each call. The last lines sum up: the daemon's wall and CPU over umap-learn's compiled calls'
(rounds after the first) and over its first call's, and the trustworthiness of both.

Usage: bench/umap_learn_compare.py [BUILD]"""
import http.client
import io
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
build = sys.argv[1] if len(sys.argv) > 1 else "build"
BIN = os.path.join(ROOT, build, "embedscope")
N, D = (int(x) for x in os.environ.get("UMAP_SHAPE", "50257x768").split("x"))
CLUSTERS = int(os.environ.get("UMAP_CLUSTERS", "20"))
SAMPLE = int(os.environ.get("UMAP_SAMPLE", "5000"))
ROUNDS = int(os.environ.get("UMAP_ROUNDS", "2"))
MATRIX = "/v1/models/bench/matrices/clusters"


def load():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def cpu_seconds(pid):
    """User + system CPU seconds of a process so far (Linux /proc)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def planted():
    rng = np.random.default_rng(1)
    centres = rng.standard_normal((CLUSTERS, D)) * 1.5
    labels = rng.integers(CLUSTERS, size=N)
    x = (centres[labels] + rng.standard_normal((N, D))).astype(np.float32)
    return x, labels


def call(port, method, path, body=None, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=4 * 3600)
    conn.request(method, path, body=body, headers=headers or {})
    r = conn.getresponse()
    data = r.read()
    conn.close()
    return r.status, dict(r.getheaders()), data


def put(port, name, npy):
    st, _, body = call(port, "PUT", name, body=npy, headers={"Content-Type": "application/x-npy"})
    if st not in (200, 201):
        raise SystemExit("PUT %d %s" % (st, body[:300]))


def daemon_umap(port, name, seed):
    """The layout as a job: 202, polled until its 303, then the NPY result; seconds from the request."""
    t0 = time.monotonic()
    st, h, body = call(port, "GET", name + "/umap?format=npy&seed=%d" % seed, headers={"Prefer": "respond-async"})
    if st == 202:
        job = h["Location"]
        while True:
            st, h, body = call(port, "GET", job)
            if st == 303:
                st, h, body = call(port, "GET", h["Location"])
                break
            if st != 200:
                break
            time.sleep(0.5)
    elapsed = time.monotonic() - t0
    if st != 200:
        raise SystemExit("daemon UMAP: %d %s" % (st, body[:300]))
    return np.load(io.BytesIO(body)), elapsed


def scores(x, labels, emb, sample):
    from sklearn.manifold import trustworthiness
    from sklearn.neighbors import NearestNeighbors
    t = trustworthiness(x[sample], emb[sample], n_neighbors=10, metric="cosine")
    nn = NearestNeighbors(n_neighbors=11).fit(emb).kneighbors(emb[sample], return_distance=False)[:, 1:]
    purity = float(np.mean(labels[nn] == labels[sample][:, None]))
    return t, purity


def summary(got):
    """The daemon's mean wall and CPU over umap-learn's compiled calls' (rounds after its first) and its first's."""
    def mean(rows, i):
        return sum(row[i] for row in rows) / len(rows) if rows else float("nan")
    ours = [g for g in got if g[1] == "daemon"]
    first = [g for g in got if g[1] == "umap-learn" and g[0] == 0]
    compiled = [g for g in got if g[1] == "umap-learn" and g[0] > 0]
    print("daemon mean %.1f s wall %.1f s CPU, trustworthiness %.4f (%d rounds)"
          % (mean(ours, 2), mean(ours, 3), mean(ours, 4), len(ours)))
    for label, rows in (("compiled", compiled), ("first call", first)):
        if rows:
            print("umap-learn %-10s mean %.1f s wall %.1f s CPU, trustworthiness %.4f: daemon/umap-learn %.2fx wall "
                  "%.2fx CPU" % (label, mean(rows, 2), mean(rows, 3), mean(rows, 4), mean(ours, 2) / mean(rows, 2),
                                 mean(ours, 3) / mean(rows, 3)), flush=True)


def main():
    x, labels = planted()
    sample = np.random.default_rng(2).choice(N, size=min(SAMPLE, N), replace=False)
    tmp = tempfile.TemporaryDirectory()
    log = open(os.path.join(tmp.name, "daemon.log"), "wb")
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    proc = subprocess.Popen([BIN, "--listen", "127.0.0.1:0"], stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        port = None
        while port is None:
            time.sleep(0.2)
            text = open(log.name).read()
            if "listening on http://127.0.0.1:" in text:
                port = int(text.split("listening on http://127.0.0.1:")[1].split()[0].rstrip(")"))
        buf = io.BytesIO()
        np.save(buf, x)
        npy = buf.getvalue()
        print("matrix %dx%d, %d clusters; load %s" % (N, D, CLUSTERS, load()))
        from umap.umap_ import UMAP
        import numba
        print("threads: umap-learn's numba %d, the daemon's compute job %d (OpenBLAS and the layout's parts, "
              "server.blas_threads auto on %d cores)" % (numba.get_num_threads(), min(os.cpu_count(), 2),
                                                         len(os.sched_getaffinity(0))), flush=True)
        got = []
        for r in range(ROUNDS):
            order = ("daemon", "umap-learn") if r % 2 == 0 else ("umap-learn", "daemon")
            for who in order:
                if who == "daemon":
                    name = "%s-r%d" % (MATRIX, r + 1)
                    put(port, name, npy)
                    c0 = cpu_seconds(proc.pid)
                    emb, secs = daemon_umap(port, name, r)
                    cpu = cpu_seconds(proc.pid) - c0
                else:
                    t0, c0 = time.monotonic(), time.process_time()
                    emb = UMAP(n_neighbors=15, min_dist=0.1, metric="cosine").fit_transform(x)
                    secs, cpu = time.monotonic() - t0, time.process_time() - c0
                t, purity = scores(x, labels, emb, sample)
                got.append((r, who, secs, cpu, t))
                print("round %d %-10s %8.1f s wall %8.1f s CPU  trustworthiness(k=10) %.4f  cluster purity %.4f  "
                      "load %s" % (r + 1, who, secs, cpu, t, purity, load()), flush=True)
        summary(got)
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
