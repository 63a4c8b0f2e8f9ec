#!/usr/bin/env python3
"""cosine?mode=offset over HTTP against numpy's FFT of the same computation, 50257 x 768 (make bench-offsets;
never a timed test). Issue 33's target: the daemon <= 0.3x numpy's time, numpy at its best. Interleaved rounds:
each round asks the daemon (and the --before daemon, when given) for a fresh selection (rows=r:50257, so no
reply is cached) and runs numpy on a matrix of the same shape: rows normalised, each column's power spectrum
by np.fft.rfft of length L along axis 0, summed, one np.fft.irfft, divided by the pair counts. numpy four ways:
  L = 2n            what one writes (100514 = 2 x 29 x 1733: pocketfft falls back to Bluestein), 64 columns at a time;
  L = smooth        the smallest 2^a 3^b 5^c 7^d >= 2n - 1 (100800, the daemon's length), 64 columns at a time;
  L = smooth, all   the same length, every column in one rfft call (axis=0);
  L = 2^k           the next power of two (131072): pocketfft's fastest length here, 64 columns at a time.
Wall and CPU seconds of each (a daemon's from /proc, every thread), the load. The daemons run with one compute
thread (the FFT's column blocks on the computation's 2 BLAS threads). The first round of a daemon also measures
the matrix's row norms (kept for every later selection); later rounds reuse them. The agreement with the direct
sums is bench/bench_offsets.c's (make bench-offsets runs both).

Usage: bench/cosine_offset.py [BUILD] [ROUNDS] [ROWSxCOLS] [--before OTHER_BUILD]"""
import os
import statistics
import sys
import time

import numpy as np

from benchkit import MATRIX as M, cpu_of, generated_daemon, request

argv = [a for a in sys.argv[1:]]
before = None
if "--before" in argv:
    at = argv.index("--before")
    before = argv[at + 1]
    del argv[at:at + 2]
build = argv[0] if len(argv) > 0 else "build"
rounds = int(argv[1]) if len(argv) > 1 else 3
N, D = (int(x) for x in (argv[2] if len(argv) > 2 else "50257x768").split("x"))


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


def numpy_offsets(x, length, block=64):
    """Mean cosine by offset of the rows of x (n x d, contiguous selection) by FFTs of the given length, block
    columns per rfft call (None: all of them)."""
    n, d = x.shape
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    power = np.zeros(length // 2 + 1)
    step = block or d
    for j in range(0, d, step):
        f = np.fft.rfft(u[:, j:j + step], n=length, axis=0)
        power += (f.real ** 2 + f.imag ** 2).sum(axis=1)
        del f
    sums = np.fft.irfft(power, n=length)[:n]
    return sums / (n - np.arange(n))


def ask(daemon, r):
    c0, t0 = cpu_of(daemon.proc.pid), time.monotonic()
    resp = request(M + "cosine?mode=offset&rows=%d:%d" % (r, N), base=daemon.base, timeout=7200)
    wall, cpu = time.monotonic() - t0, cpu_of(daemon.proc.pid) - c0
    assert resp.status == 200, resp.body[:300]
    return wall, cpu, resp.json()


def main():
    daemons = {"daemon": generated_daemon(N, D, args=("--compute-threads", "1", "--access-log", "off"), build=build)}
    if before:
        daemons["daemon before"] = generated_daemon(N, D, args=("--compute-threads", "1", "--access-log", "off"),
                                                    build=before)
    x = np.random.default_rng(7).standard_normal((N, D))
    fast = smooth_length(2 * N - 1)
    pow2 = 1 << (2 * N - 1).bit_length()
    numpys = [("numpy L=2n", lambda n: 2 * n, 64), ("numpy L=%d" % fast, lambda n: smooth_length(2 * n - 1), 64),
              ("numpy L=%d all" % fast, lambda n: smooth_length(2 * n - 1), None),
              ("numpy L=%d" % pow2, lambda n: 1 << (2 * n - 1).bit_length(), 64)]
    rows = {name: [] for name in list(daemons) + [name for name, _, _ in numpys]}
    try:
        for d in daemons.values():
            d.wait_ready()
        print("cores %d, numpy %s" % (os.cpu_count(), np.__version__), flush=True)
        for r in range(rounds):
            for name, d in daemons.items():
                load = os.getloadavg()[0]
                wall, cpu, body = ask(d, r)
                rows[name].append((wall, cpu))
                print("round %d  load %4.1f  %-18s %8.3f s wall %8.3f s CPU  method %s, N %s, error_bound %s" %
                      (r, load, name, wall, cpu, body["method"], body.get("fft_length"), body["error_bound"]),
                      flush=True)
            for name, length, block in numpys:
                load = os.getloadavg()[0]
                c0, t0 = time.process_time(), time.monotonic()
                numpy_offsets(x[r:], length(N - r), block)
                wall, cpu = time.monotonic() - t0, time.process_time() - c0
                rows[name].append((wall, cpu))
                print("round %d  load %4.1f  %-18s %8.3f s wall %8.3f s CPU" % (r, load, name, wall, cpu), flush=True)
    finally:
        for d in daemons.values():
            d.close()
    med = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for k, v in rows.items()}
    best = min((k for k in med if k.startswith("numpy")), key=lambda k: med[k][1])
    print("\n| median of %d | wall | CPU | %s |\n|---|---|---|%s" %
          (rounds, " | ".join("%s / it (wall, CPU)" % k for k in daemons), "---|" * len(daemons)))
    for k, (w, c) in med.items():
        print("| %s%s | %.3f s | %.3f s | %s |" % (k, " (best numpy)" if k == best else "", w, c,
                                                   " | ".join("%.2fx, %.2fx" % (med[n][0] / w, med[n][1] / c)
                                                              for n in daemons)))


if __name__ == "__main__":
    main()
