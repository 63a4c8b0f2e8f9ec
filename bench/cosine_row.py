#!/usr/bin/env python3
"""cosine?row=i against neighbors?row=i of the same 50257 x 768 matrix (make bench; never a timed test):
issue 33's target is cosine row <= 2x neighbours. Interleaved rounds, a fresh row each request so that
no reply is cached, one compute thread and one BLAS thread. Prints each round and the medians.

Usage: bench/cosine_row.py [BUILD] [ROUNDS]"""
import os
import statistics
import sys
import time

from benchkit import MATRIX as M, generated_daemon, request

build = sys.argv[1] if len(sys.argv) > 1 else "build"
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
os.environ["OPENBLAS_NUM_THREADS"] = "1"

N, D = 50257, 768
KINDS = [("neighbors", "neighbors?row=%d&k=10"), ("cosine none", "cosine?row=%d&center=none"),
         ("cosine columns", "cosine?row=%d&center=columns")]


def main():
    daemon = generated_daemon(N, D, args=("--compute-threads", "1", "--access-log", "off"), build=build)
    times = {name: [] for name, _ in KINDS}
    try:
        daemon.wait_ready()
        row = 1
        for r in range(rounds):
            for name, path in KINDS:
                row += 1
                t0 = time.monotonic()
                resp = request(M + path % row + "&format=npy", base=daemon.base, timeout=3600)
                seconds = time.monotonic() - t0
                assert resp.status == 200, resp.body[:300]
                times[name].append(seconds)
                print("round %d %-15s %.3f s" % (r, name, seconds), flush=True)
    finally:
        daemon.close()
    base = statistics.median(times["neighbors"])
    for name, _ in KINDS:
        med = statistics.median(times[name])
        print("median %-15s %.3f s  (%.2fx neighbors)" % (name, med, med / base))


if __name__ == "__main__":
    main()
