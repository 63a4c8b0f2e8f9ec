#!/usr/bin/env python3
"""The cost model against the clock (make bench; never a timed test): every analysis over a grid of
generated matrices, each request on a row selection of its own so that no decomposition or reply is
cached, answered by a daemon with one compute thread and one BLAS thread. Prints, per request, the
prediction the answer carries (input.cost.predicted_seconds) and the measured wall time of the request,
then the median and worst |log(predicted / measured)|: the targets are log 2 and log 4.

Usage: bench/cost.py [BUILD]   (BENCH_COST_SIZES="4096x256 16384x512" to change the grid)"""
import json
import math
import os
import statistics
import sys
import time

from benchkit import ROOT, daemon as make_daemon, request

build = sys.argv[1] if len(sys.argv) > 1 else "build"

SIZES = [tuple(int(x) for x in s.split("x"))
         for s in os.environ.get("BENCH_COST_SIZES", "2048x128 8192x256 16384x512 50257x768").split()]


def analyses(n, d):
    """(name, path) of every analysis on matrix b/g<n>x<d>; {r} is a fresh first row."""
    m = "b/g%dx%d" % (n, d)
    one = "/v1/models/b/matrices/g%dx%d/" % (n, d)
    small = n <= 8192
    out = [("pca topk k=3", one + "pca?k=3&method=topk&rows={r}:"),
           ("pca exact k=3", one + "pca?k=3&method=exact&rows={r}:"),
           ("spectrum exact", one + "spectrum?method=exact&rows={r}:"),
           ("spectrum values", one + "spectrum?method=values&rows={r}:"),
           ("vectors k=30", one + "vectors?k=30&rows={r}:"),
           ("cosine row", one + "cosine?row=0&rows={r}:"),
           ("outliers", one + "outliers?rows={r}:"),
           ("capture k=30", "/v1/capture?a=%s&b=%s&k=30&a_rows={r}:&b_rows={r}:" % (m, m)),
           ("overlap", "/v1/overlap?a=%s&b=%s&ka=30&kb=30&a_rows={r}:&b_rows={r}:" % (m, m)),
           ("alignment", "/v1/alignment?w=%s&r=%s&w_rows={r}:&r_rows={r}:" % (m, m)),
           ("averaging g=4", one + "averaging?g=4&rows={r}:")]
    if small:
        out += [("cosine offset", one + "cosine?mode=offset&rows={r}:"),
                ("cosine matrix", one + "cosine?mode=matrix&bins=64&rows={r}:"),
                ("toeplitz", one + "toeplitz?rows={r}:"),
                ("periodicity k=3", one + "periodicity?k=3&rows={r}:"),
                ("rows", one + "rows?rows={r}:")]
    return out


def main():
    models = {"g%dx%d" % (n, d): {"generator": "gaussian", "rows": n, "cols": d, "seed": 7} for n, d in SIZES}
    daemon = make_daemon(models, args=("--compute-threads", "1", "--access-log", "off"), build=build)
    rows, first = [], 1
    try:
        daemon.wait_ready()
        for n, d in SIZES:
            for name, path in analyses(n, d):
                first += 1
                target = path.replace("{r}", str(first))
                t0 = time.monotonic()
                r = request(target, base=daemon.base, timeout=3600)
                seconds = time.monotonic() - t0
                if r.status != 200:
                    print("%-16s %6dx%-4d %d %s" % (name, n, d, r.status, r.body[:200]))
                    continue
                cost = r.json()["input"].get("cost")
                if not cost:
                    continue
                predicted = cost["predicted_seconds"]
                ratio = math.log(predicted / seconds)
                rows.append((name, n, d, predicted, seconds, ratio))
                print("%-16s %6dx%-4d predicted %8.3f s  measured %8.3f s  log ratio %+.2f"
                      % (name, n, d, predicted, seconds, ratio), flush=True)
    finally:
        daemon.close()
    errors = [abs(r[5]) for r in rows]
    if errors:
        print("%d requests: median |log(predicted/measured)| %.2f (target <= log 2 = %.2f), worst %.2f "
              "(target <= log 4 = %.2f)" % (len(errors), statistics.median(errors), math.log(2), max(errors),
                                            math.log(4)))
    with open(os.path.join(ROOT, "bench", "results", "cost.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(dict(zip(("analysis", "n", "d", "predicted_s", "measured_s", "log_ratio"), r))) + "\n")


if __name__ == "__main__":
    main()
