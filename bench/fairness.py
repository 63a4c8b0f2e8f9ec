#!/usr/bin/env python3
"""One client's flood against another client's light requests (issue 29 §1; make bench-fairness, never a
timed test). The daemon runs on the machine's default compute threads (the cores) with its default lane
(server.light_threads 1, limits.light_seconds 0.25), trusting 127.0.0.1 as a proxy so that the two clients
are told apart by X-Forwarded-For.

The flood: FLOOD connections (default 16) of one client, each in a loop asking either
`periodicity?axis=columns` of GPT-2's W_pos or an exact PCA of a 16384 x 512 Gaussian, every request on
rows of its own (nothing cached; each is heavy: seconds of compute). The light client: `neighbors?k=2`
of the 16384 x 512 matrix on a new row each time (never cached), one at a time, SAMPLES of them; its
latency is measured quiet, then under the flood, for ROUNDS rounds, and printed as p50 / p99 / max.

Usage: bench/fairness.py [BUILD]   (BENCH_FAIRNESS_FLOOD, _SAMPLES, _ROUNDS, _ARGS: daemon arguments,
       BENCH_FAIRNESS_LIGHT_THREADS=0: no lane, the daemon as before issue 29, for comparison)
Writes bench/results/fairness.jsonl (one line per round) and prints a table."""
import json
import os
import statistics
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "http"))
build = sys.argv[1] if len(sys.argv) > 1 else "build"
os.environ.setdefault("EMBEDSCOPE_BIN", os.path.join(ROOT, build, "embedscope"))
os.environ["OPENBLAS_NUM_THREADS"] = "1"
from httpkit import Daemon, exchange, metrics  # noqa: E402

FLOOD = int(os.environ.get("BENCH_FAIRNESS_FLOOD", "16"))
SAMPLES = int(os.environ.get("BENCH_FAIRNESS_SAMPLES", "60"))
ROUNDS = int(os.environ.get("BENCH_FAIRNESS_ROUNDS", "3"))
ARGS = os.environ.get("BENCH_FAIRNESS_ARGS", "").split()
LIGHT_THREADS = os.environ.get("BENCH_FAIRNESS_LIGHT_THREADS")  # unset: the default (1); 0: no lane, to compare
HEAVY_CLIENT = {"X-Forwarded-For": "10.0.0.1", "Prefer": "wait=600"}
LIGHT_CLIENT = {"X-Forwarded-For": "10.0.0.2", "Prefer": "wait=600"}
G = "/v1/models/b/matrices/g"


def percentile(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


class Flood:
    """FLOOD threads of the heavy client, each on rows of its own (a counter makes every request new)."""

    def __init__(self, base):
        self.base, self.stop, self.counter, self.lock = base, threading.Event(), 0, threading.Lock()
        self.answers, self.statuses = 0, {}
        self.threads = [threading.Thread(target=self.run, args=(i,)) for i in range(FLOOD)]

    def next_path(self, i):
        with self.lock:
            self.counter += 1
            c = self.counter
        if i % 2:  # W_pos 1024 x 768: 768 periodograms of up to 1024 positions
            return "/v1/models/gpt2-small/matrices/wpe/periodicity?axis=columns&rows=%d:1024" % (c % 900)
        return G + "/pca?k=3&method=exact&rows=%d:" % c

    def run(self, i):
        while not self.stop.is_set():
            try:
                r = exchange(self.next_path(i), headers=HEAVY_CLIENT, base=self.base, timeout=900)
                with self.lock:
                    self.answers += 1
                    self.statuses[r.status] = self.statuses.get(r.status, 0) + 1
            except OSError:
                time.sleep(0.1)

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join()


def light_latencies(base, first_row):
    """SAMPLES uncached neighbors?k=2 requests, one at a time, 0.1 s apart: their wall times."""
    out = []
    for s in range(SAMPLES):
        t0 = time.monotonic()
        r = exchange(G + "/neighbors?k=2&row=%d" % (first_row + s), headers=LIGHT_CLIENT, base=base, timeout=900)
        out.append(time.monotonic() - t0)
        if r.status != 200:
            raise SystemExit("light request answered %d: %s" % (r.status, r.body[:300]))
        time.sleep(0.1)
    return out


def summary(xs):
    return {"p50": percentile(xs, 50), "p99": percentile(xs, 99), "max": max(xs), "mean": statistics.mean(xs)}


def main():
    config = {"server": {"trusted_proxies": ["127.0.0.1"], **({"light_threads": int(LIGHT_THREADS)}
                                                              if LIGHT_THREADS is not None else {})},
              "limits": {"request_timeout_s": 0, "max_generated_elements": 1 << 24},
              "models": {"b": {"matrices": {"g": {"generator": "gaussian", "rows": 16384, "cols": 512,
                                                  "seed": 5}}}}}
    config["models"]["gpt2-small"] = {"matrices": {"wpe": {"file": "gpt2-small/wpe.npy", "model_axis": "columns"}}}
    daemon = Daemon(config, args=("--access-log", "off", *ARGS), start_timeout=300)
    results, row = [], 0
    try:
        daemon.wait_ready(timeout=300)
        m = metrics(daemon.base)
        threads, light = int(m["embedscope_compute_threads"]), int(m["embedscope_compute_light_threads"])
        load = os.getloadavg()[0]
        print("compute threads %d (%d kept for light requests), load %.1f, %d flood connections, %d samples"
              % (threads, light, load, FLOOD, SAMPLES))
        for rnd in range(ROUNDS):
            quiet = light_latencies(daemon.base, row)
            row += SAMPLES
            with Flood(daemon.base) as flood:
                time.sleep(3)  # the flood holds the heavy threads and fills the queue
                busy = metrics(daemon.base)
                flooded = light_latencies(daemon.base, row)
                row += SAMPLES
            line = {"round": rnd + 1, "compute_threads": threads, "light_threads": light, "flood": FLOOD,
                    "load": round(os.getloadavg()[0], 1), "quiet": summary(quiet), "flooded": summary(flooded),
                    "heavy_running": busy["embedscope_compute_heavy_jobs_running"],
                    "queued": busy["embedscope_compute_queue_depth"], "flood_answers": flood.answers,
                    "flood_statuses": flood.statuses, "args": ARGS,
                    "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            results.append(line)
            print("round %d: quiet p50 %.3f p99 %.3f s | flooded p50 %.3f p99 %.3f max %.3f s "
                  "(heavy running %d, queued %d, load %.1f, flood answers %d %s)"
                  % (rnd + 1, line["quiet"]["p50"], line["quiet"]["p99"], line["flooded"]["p50"],
                     line["flooded"]["p99"], line["flooded"]["max"], line["heavy_running"], line["queued"],
                     line["load"], flood.answers, flood.statuses))
    finally:
        daemon.close()
    with open(os.path.join(ROOT, "bench", "results", "fairness.jsonl"), "a") as f:
        for line in results:
            f.write(json.dumps(line) + "\n")


if __name__ == "__main__":
    main()
