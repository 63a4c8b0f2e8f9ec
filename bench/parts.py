#!/usr/bin/env python3
"""Issue 33 §5: four identical exact PCAs of a 100000 x 768 selection compute once (make bench; never a timed
test). The exact decomposition with its left vectors charged (n x r, 614 MB) is over the default 512 MiB
cache, so before it was never kept and each request computed it again; now it is kept in parts (sigma, V,
the small factors, the kept PCA coordinates) and the left vectors are formed per request that needs them.
Four requests at once (single flight), then four one after the other; prints the counters of /metrics.

Usage: bench/parts.py [BUILD] [ROWS]"""
import sys
import threading
import time

from benchkit import MATRIX, generated_daemon, request

build = sys.argv[1] if len(sys.argv) > 1 else "build"
rows = int(sys.argv[2]) if len(sys.argv) > 2 else 100000

PCA = MATRIX + "pca?k=2&method=exact&format=npy"


def metric(daemon, name):
    for line in request("/metrics", base=daemon.base).body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def main():
    daemon = generated_daemon(rows, 768, build=build)
    try:
        daemon.wait_ready()
        t0 = time.monotonic()
        status = []
        threads = [threading.Thread(target=lambda: status.append(request(PCA, base=daemon.base,
                                                                         timeout=3600).status)) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print("4 at once: %s in %.1f s" % (status, time.monotonic() - t0), flush=True)
        for i in range(4):
            t0 = time.monotonic()
            resp = request(PCA.replace("k=2", "k=%d" % (3 + i)), base=daemon.base, timeout=3600)
            print("then k=%d: %d in %.3f s" % (3 + i, resp.status, time.monotonic() - t0), flush=True)
        for name in ("computations_total", "cache_hits_total", "cache_waits_total", "cache_parts_total",
                     "cache_refused_total", "cache_evictions_total", "cache_bytes", "cache_max_bytes"):
            print("embedscope_svd_%s %s" % (name, metric(daemon, "embedscope_svd_" + name)))
    finally:
        daemon.close()


if __name__ == "__main__":
    main()
