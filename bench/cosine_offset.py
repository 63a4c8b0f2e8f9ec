#!/usr/bin/env python3
"""cosine?mode=offset over HTTP against numpy's FFT of the same computation, 50257 x 768 (make bench-offsets;
never a timed test). Issue 33's target: the daemon <= 0.3x numpy's time. Interleaved rounds: each round asks the
daemon for a fresh selection (rows=r:50257, so no reply is cached) and runs numpy on a matrix of the same shape:
rows normalised, each column's power spectrum by np.fft.rfft of length L (the columns 64 at a time, so memory
stays near the daemon's), summed, one np.fft.irfft, divided by the pair counts. numpy twice: L = 2n (what one
writes: 100514 = 2 x 29 x 1733, so pocketfft falls back to Bluestein) and L = the smallest 2^a 3^b 5^c 7^d >= 2n - 1
(100800, the length the daemon uses). Wall and CPU seconds of each (the daemon's from /proc, every thread), the
load. The agreement with the direct sums is bench/bench_offsets.c's (make bench-offsets runs both).

Usage: bench/cosine_offset.py [BUILD] [ROUNDS] [ROWSxCOLS]"""
import os
import statistics
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "http"))
build = sys.argv[1] if len(sys.argv) > 1 else "build"
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
N, D = (int(x) for x in (sys.argv[3] if len(sys.argv) > 3 else "50257x768").split("x"))
os.environ.setdefault("EMBEDSCOPE_BIN", os.path.join(ROOT, build, "embedscope"))
from httpkit import Daemon, request  # noqa: E402

M = "/v1/models/b/matrices/g/"


def smooth_length(m):
    best = 1 << 62
    a = 1
    while a < best:
        b = a
        while b < best:
            c = b
            while c < best:
                e = c
                while e < best:
                    if e >= m:
                        best = e
                        break
                    e *= 7
                c *= 5
            b *= 3
        a *= 2
    return best


def numpy_offsets(x, length):
    """Mean cosine by offset of the rows of x (n x d, contiguous selection) by FFTs of the given length."""
    n, d = x.shape
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    power = np.zeros(length // 2 + 1)
    for j in range(0, d, 64):
        f = np.fft.rfft(u[:, j:j + 64], n=length, axis=0)
        power += (f.real ** 2 + f.imag ** 2).sum(axis=1)
    sums = np.fft.irfft(power, n=length)[:n]
    return sums / (n - np.arange(n))


def cpu_of(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main():
    daemon = Daemon({"limits": {"max_response_bytes": 1 << 30, "request_timeout_s": 0, "sync_seconds": 86400,
                                "max_generated_elements": 1 << 28},
                     "models": {"b": {"matrices": {"g": {"generator": "gaussian", "rows": N, "cols": D,
                                                         "seed": 7}}}}},
                    args=("--compute-threads", "1", "--access-log", "off"))
    x = np.random.default_rng(7).standard_normal((N, D))
    fast = smooth_length(2 * N - 1)
    rows = {"daemon": [], "numpy L=2n": [], "numpy L=%d" % fast: []}
    try:
        daemon.wait_ready()
        for r in range(rounds):
            load = os.getloadavg()[0]
            c0, t0 = cpu_of(daemon.proc.pid), time.monotonic()
            resp = request(M + "cosine?mode=offset&rows=%d:%d" % (r, N), base=daemon.base, timeout=7200)
            wall, cpu = time.monotonic() - t0, cpu_of(daemon.proc.pid) - c0
            assert resp.status == 200, resp.body[:300]
            body = resp.json()
            rows["daemon"].append((wall, cpu))
            print("round %d  load %4.1f  daemon     %8.3f s wall %8.3f s CPU  method %s, N %s, error_bound %s" %
                  (r, load, wall, cpu, body["method"], body.get("fft_length"), body["error_bound"]), flush=True)
            for name, length in (("numpy L=2n", 2 * (N - r)), ("numpy L=%d" % fast, smooth_length(2 * (N - r) - 1))):
                c0, t0 = time.process_time(), time.monotonic()
                numpy_offsets(x[r:], length)
                wall, cpu = time.monotonic() - t0, time.process_time() - c0
                rows[name].append((wall, cpu))
                print("round %d  load %4.1f  %-10s %8.3f s wall %8.3f s CPU" % (r, os.getloadavg()[0], name, wall, cpu),
                      flush=True)
    finally:
        daemon.close()
    med = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for k, v in rows.items()}
    print("\n| median of %d | wall | CPU | daemon / it (wall, CPU) |\n|---|---|---|---|" % rounds)
    for k, (w, c) in med.items():
        print("| %s | %.3f s | %.3f s | %.2fx, %.2fx |" % (k, w, c, med["daemon"][0] / w, med["daemon"][1] / c))


if __name__ == "__main__":
    main()
