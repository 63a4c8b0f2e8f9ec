#!/usr/bin/env python3
"""A Llama-3-8B-sized token embedding end to end (make bench-llama; a benchmark, never a test): start the
daemon on its embedded default configuration (no limit raised), PUT a 128256 x 4096 matrix, then ask its
top-30 PCA (method=topk, as NPY: the 128256 x 30 coordinates, 30.8 MB, within max_response_bytes) and
its spectrum (method=values, uncentred) with Prefer: respond-async. Each answers 202 with a job: the script polls
/v1/jobs/{id}, printing the state, the running pass and the progress fractions (`~` marks the estimated
pass, LAPACK's), follows the 303 to the result, checks it, and prints the times, the predictions and the
daemon's CPU seconds and peak memory.

The matrix (LLAMA_SOURCE):
- gaussian (the default): the `gaussian` generator, seed 1 — exact singular values (j+1)^-1, checked
  against the spectrum. Its two QRs and product (about 1.3e13 flops) run on one BLAS thread by design (its
  bytes must not depend on the thread count): minutes on a fast core, far longer on a loaded one.
- npy: a float32 .npy of seeded standard normal numbers (numpy's PCG64, seed 1) streamed as the PUT body
  (2.1 GB, never written to disk here): the upload path a user takes with their own embedding.

LLAMA_SPECTRUM=0 skips the spectrum (the TSQR of the whole matrix: about twice the top-30's compute);
LLAMA_SHAPE=4096x512 runs the same steps on a small matrix (a check of the script).
Usage: bench/llama.py [BUILD]"""
import http.client
import io
import json
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "http"))
build = sys.argv[1] if len(sys.argv) > 1 else "build"
os.environ.setdefault("EMBEDSCOPE_BIN", os.path.join(ROOT, build, "embedscope"))
from httpkit import Daemon, request  # noqa: E402

N, D = (int(x) for x in os.environ.get("LLAMA_SHAPE", "128256x4096").split("x"))  # another for a smoke run
K = 30
SOURCE = os.environ.get("LLAMA_SOURCE", "gaussian")
SPECTRUM = os.environ.get("LLAMA_SPECTRUM", "1") != "0"
MATRIX = "/v1/models/llama/matrices/wte"
ASYNC = {"Prefer": "respond-async"}
HOURS = 4 * 3600  # no client timeout that a slow machine could hit


def load():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def process_figures(pid):
    """(CPU seconds, peak resident GB) of a process so far (Linux /proc)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    with open("/proc/%d/status" % pid) as f:
        peak = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    return cpu, peak / 2**20


def npy_header():
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": (N, D)})
    return header.getvalue()


def npy_blocks(rows_per_block=2048):
    """The .npy header, then the float32 rows a block at a time (seeded standard normal)."""
    yield npy_header()
    rng = np.random.default_rng(1)
    for start in range(0, N, rows_per_block):
        yield rng.standard_normal((min(rows_per_block, N - start), D), dtype=np.float32).tobytes()


def put_npy(base):
    url = base.split("//", 1)[1]
    host, port = url.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=HOURS)
    length = len(npy_header()) + N * D * 4
    conn.putrequest("PUT", MATRIX)
    conn.putheader("Content-Type", "application/x-npy")
    conn.putheader("Content-Length", str(length))
    conn.endheaders()
    sent = 0
    for block in npy_blocks():
        conn.send(block)
        sent += len(block)
    assert sent == length, (sent, length)
    r = conn.getresponse()
    return r.status, r.read()


def put_matrix(base):
    t0 = time.monotonic()
    if SOURCE == "npy":
        status, body = put_npy(base)
    else:
        r = request(MATRIX, method="PUT", headers={"Content-Type": "application/json"}, base=base, timeout=HOURS,
                    body=json.dumps({"generator": "gaussian", "rows": N, "cols": D, "seed": 1}).encode())
        status, body = r.status, r.body
    seconds = time.monotonic() - t0
    if status not in (200, 201):
        sys.exit("PUT %s: %d %s" % (MATRIX, status, body[:400]))
    print("PUT %s (%s %d x %d): %d in %.1f s" % (MATRIX, SOURCE, N, D, status, seconds))
    return seconds


def run_job(base, path, label):
    """Ask path with respond-async, poll its job to the end, fetch the result: (reply, seconds, job)."""
    t0 = time.monotonic()
    r = request(path, headers=ASYNC, base=base, timeout=HOURS)
    if r.status != 202:
        sys.exit("%s: expected 202, got %d %s" % (path, r.status, r.body[:400]))
    location = r.headers["Location"]
    job = r.json()
    print("%s: 202 -> %s, predicted %.1f s" % (label, location, job["predicted_s"]))
    last, printed = None, 0.0
    while True:
        r = request(location, base=base)
        if r.status == 303:
            break
        if r.status != 200:
            sys.exit("%s: job answered %d %s" % (label, r.status, r.body[:400]))
        job = r.json()
        if job["state"] in ("failed", "cancelled"):
            sys.exit("%s: job %s: %s" % (label, job["state"], json.dumps(job.get("error"))[:400]))
        p = job["progress"]
        now = time.monotonic() - t0
        line = "%-5s %s %.2f%s" % (p["pass"], "blocks %d/%d" % (p["blocks_done"], p["blocks"]) if p["blocks"]
                                   else "", p["pass_fraction"], " ~" if p.get("estimated") else "")
        if p["pass"] != last or now - printed >= 5:
            print("  %7.1f s  %-8s %-34s fraction %.3f" % (now, job["state"], line, p["fraction"]), flush=True)
            last, printed = p["pass"], now
        time.sleep(0.5)
    result = r.headers["Location"]
    if result != path:
        sys.exit("%s: 303 to %s, not the request's URL" % (label, result))
    reply = request(result, base=base, timeout=HOURS)
    seconds = time.monotonic() - t0
    if reply.status != 200:
        sys.exit("%s: the result answered %d %s" % (label, reply.status, reply.body[:400]))
    print("%s: 303 -> 200 (%d bytes) in %.1f s" % (label, len(reply.body), seconds))
    return reply, seconds, job


def main():
    daemon = Daemon(None, args=("--access-log", "off"), start_timeout=600)  # the embedded default configuration
    try:
        daemon.wait_ready(timeout=600)
        print("machine: %d cores, load %s; daemon ready (embedded default configuration)" % (os.cpu_count(), load()))
        print("".join(line for line in daemon.log().splitlines(True) if "cost model calibrated" in line).strip())
        put_s = put_matrix(daemon.base)
        cpu0 = process_figures(daemon.proc.pid)[0]
        reply, pca_s, _ = run_job(daemon.base, MATRIX + "/pca?k=%d&method=topk&format=npy" % K, "top-%d PCA" % K)
        coords = np.load(io.BytesIO(reply.body))
        assert coords.shape == (N, K) and np.isfinite(coords).all(), coords.shape
        pca_cpu = process_figures(daemon.proc.pid)[0] - cpu0
        print("  coordinates %s, finite; %.0f CPU s; load %s" % (coords.shape, pca_cpu, load()))
        if SPECTRUM:
            cpu0 = process_figures(daemon.proc.pid)[0]
            reply, spec_s, _ = run_job(daemon.base, MATRIX + "/spectrum?method=values&center=none",
                                         "spectrum (values, uncentred)")
            sv = np.array(reply.json()["singular_values"], dtype=float)
            assert sv.shape == (D,) and (np.diff(sv) <= 0).all(), sv.shape
            if SOURCE == "gaussian":  # exact singular values (j+1)^-1
                err = np.max(np.abs(sv - 1.0 / np.arange(1, D + 1)))
                print("  max |s_j - 1/(j+1)| = %.2e" % err)
            print("  %d values, s_1 %.6g, s_%d %.6g; %.0f CPU s; load %s"
                  % (len(sv), sv[0], D, sv[-1], process_figures(daemon.proc.pid)[0] - cpu0, load()))
        cpu, peak = process_figures(daemon.proc.pid)
        print("daemon: %.0f CPU s in all, peak resident %.1f GB; load %s" % (cpu, peak, load()))
    finally:
        daemon.close()


if __name__ == "__main__":
    main()
