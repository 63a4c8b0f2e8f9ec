#!/usr/bin/python3
"""Start-up half of make bench: seconds from exec to the first /readyz 200 of config/gpt2-full.json
(98 matrices of ../shared/data, W_pos warmed), interleaved round by round:
  - no cache_dir: every file read, validated, hashed and converted, the warm decomposition computed;
  - cold: an empty cache_dir, the same work plus writing the converted copies and the decomposition;
  - warm: the same cache_dir again (the copies and the decomposition mapped from it).
The warm start reads its copies from the page cache (they were just written); after a reboot the
first start also pays the disk. Appends a markdown table to bench/results/report.md.
Usage: bench/ready.py BUILD   (BENCH_READY_ROUNDS, default 5)

Large file entry (issue 33 §6): one float64 C-order .npy of ROWS x COLS as the only entry, no warm list:
  bench/ready.py BUILD --file ROWS COLS [--before BINARY] [--dir DIR] [--before-rounds K] [--before-no-cache-only]
                [--load-only] [--fixed-rates]
seconds from exec to /readyz 200 and the daemon's CPU seconds (utime + stime from /proc at that moment),
rounds interleaved: without cache_dir, with an empty cache_dir (first start: hashed, record written), and
with that cache_dir again (record found: nothing read or hashed); BINARY (an embedscope built from an
earlier commit) runs the same starts in the same rounds, at most K rounds (default: all; its conversion of
4 GB takes minutes), only the start without cache_dir with --before-no-cache-only. --load-only stops each
start at the log's "configuration ... loaded" line, before the cost model's calibration (seconds to minutes
on a loaded machine, the same whatever the entry): the "to /readyz" columns are then to that line. The matrix is seeded normal values written a block at a time (the values do not
matter to loading, only that they are finite); it is made once under DIR (default /tmp) and kept for the
next run (delete it yourself: 4.2 GB at 128256 x 4096). Refuses to write it unless 10 GB stay free.
--fixed-rates starts the daemons with --cost-rates fixed (no calibration), so /readyz measures the entry.
A start whose entry is hashed after loading (log "sha256 (computing)") is kept running after /readyz until
its log says the hash is done (or failed), so its record is written for the next start: "hash known" is
the seconds from exec to that line."""
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

build = sys.argv[1] if len(sys.argv) > 1 else "build"
rounds = int(os.environ.get("BENCH_READY_ROUNDS", "5"))
root = os.getcwd()


def option(name, default=None):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def cpu_seconds(pid):
    """utime + stime of a live process, from /proc (clock ticks)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


HASH_DONE = re.compile(r"sha256 of \d+ tensors? .*computed in|sha256 not known")


def wait_for_hash(proc, log_path, t0):
    """Seconds from exec until the log says the background sha256 is done (or failed), when the entry was
    loaded with its hash still computing; nan otherwise."""
    if "sha256 (computing)" not in open(log_path).read():
        return float("nan")
    while not HASH_DONE.search(open(log_path).read()):
        if proc.poll() is not None:
            raise SystemExit("daemon exited %s while hashing:\n%s" % (proc.returncode, open(log_path).read()))
        time.sleep(0.01)
    return time.monotonic() - t0


def start_to_ready(binary, cfg, work):
    """(seconds from exec to the first /readyz 200, the daemon's CPU seconds then, its log, seconds from exec
    until its background sha256 was done: wait_for_hash)."""
    path = os.path.join(work, "config.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    log_path = os.path.join(work, "daemon.log")
    with open(log_path, "wb") as log:
        t0 = time.monotonic()
        rates = ["--cost-rates", "fixed"] if "--fixed-rates" in sys.argv else []
        proc = subprocess.Popen([binary, "--config", path, "--access-log", "off", *rates], stderr=log,
                                env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    port = None
    try:
        while True:
            if proc.poll() is not None:
                raise SystemExit("daemon exited %s:\n%s" % (proc.returncode, open(log_path).read()))
            if "--load-only" in sys.argv and re.search(r"configuration .* loaded in", open(log_path).read()):
                wall, cpu = time.monotonic() - t0, cpu_seconds(proc.pid)
                return wall, cpu, open(log_path).read(), wait_for_hash(proc, log_path, t0)
            if port is None:
                m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", open(log_path).read())
                port = m and m.group(1)
            if port:
                try:
                    with urllib.request.urlopen("http://127.0.0.1:%s/readyz" % port, timeout=5) as r:
                        if r.status == 200:
                            wall, cpu = time.monotonic() - t0, cpu_seconds(proc.pid)
                            return wall, cpu, open(log_path).read(), wait_for_hash(proc, log_path, t0)
                except OSError:
                    pass
            time.sleep(0.002)
    finally:
        proc.terminate()
        proc.wait()


def make_big_npy(path, n, d):
    import numpy as np
    if os.path.exists(path) and os.path.getsize(path) >= n * d * 8:
        return
    st = os.statvfs(os.path.dirname(path))
    if st.f_bavail * st.f_frsize - n * d * 8 < 10 * 2**30:
        raise SystemExit("ready: %s would leave under 10 GB free" % path)
    rng = np.random.default_rng(33)
    x = np.lib.format.open_memmap(path + ".tmp", mode="w+", dtype="<f8", shape=(n, d))
    for i in range(0, n, 4096):
        x[i:i + 4096] = rng.standard_normal((min(4096, n - i), d))
    x.flush()
    del x
    os.rename(path + ".tmp", path)
    time.sleep(2.2)  # older than the settle time, so the first start may write its record


def file_entry_bench():
    i = sys.argv.index("--file")
    n, d = int(sys.argv[i + 1]), int(sys.argv[i + 2])
    before = option("--before")
    before_rounds = int(option("--before-rounds", str(rounds)))
    data = option("--dir", "/tmp")
    name = "embedscope-ready-%dx%d.npy" % (n, d)
    make_big_npy(os.path.join(data, name), n, d)
    work = tempfile.mkdtemp(prefix="embedscope-ready.")
    cfg = {"data_dir": data, "server": {"listen": "127.0.0.1:0"},
           "models": {"m": {"matrices": {"x": {"file": name}}}}}
    binaries = [("after", os.path.join(root, build, "embedscope"))] + ([("before", before)] if before else [])
    kinds = ("no cache_dir", "empty cache_dir", "its cache_dir again")
    times = {}
    for r in range(rounds):
        for label, binary in binaries:
            if label == "before" and r >= before_rounds:
                continue
            cache = os.path.join(work, "cache-%s-%d" % (label, r))
            for kind in kinds:
                if label == "before" and "--before-no-cache-only" in sys.argv and kind != kinds[0]:
                    continue
                c = json.loads(json.dumps(cfg))
                if kind != "no cache_dir":
                    c["server"]["cache_dir"] = cache
                wall, cpu, log, hashed = start_to_ready(binary, c, work)
                how = re.search(r"loaded m/x .* from (.*) in ([0-9.]+) ms", log)
                calib = re.search(r"cost model calibrated in ([0-9.]+) s", log)
                load_s = float(how.group(2)) / 1e3 if how else float("nan")
                times.setdefault((label, kind), []).append((wall, cpu, load_s,
                                                            float(calib.group(1)) if calib else 0.0, hashed))
                print("round %d %s, %s: %.2f s to /readyz, %.2f CPU s, entry loaded in %.3f s (%s), hash known "
                      "%.2f s after exec" % (r, label, kind, wall, cpu, load_s, how.group(1) if how else "?", hashed),
                      flush=True)
            shutil.rmtree(cache, ignore_errors=True)
    shutil.rmtree(work)
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    until = "\"configuration loaded\"" if "--load-only" in sys.argv else "/readyz"
    lines = ["", "### Start-up with one %d x %d float64 .npy file entry (%.2f GB), exec to /readyz 200 "
             "(%d rounds, load %s at the end)" % (n, d, n * d * 8 / 1e9, rounds, load), "",
             "Command: bench/ready.py %s" % " ".join(sys.argv[1:]), "",
             "The entry's load is the daemon's own \"loaded m/x ... in MS\" (mapping or reading, checking, hashing, "
             "converting); /readyz also waits for the cost model's start-up calibration (its median shown), "
             "which does not depend on the entry.", "",
             "| binary | start | entry loaded, median s | min | max | to %s, median s | min | max "
             "| daemon CPU s then, median | calibration, median s | sha256 known, median s after exec |" % until,
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for (label, kind), ts in times.items():
        loads, walls = [t[2] for t in ts], [t[0] for t in ts]
        hashed = [t[4] for t in ts if t[4] == t[4]]
        lines.append("| %s | %s | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %s |" % (
            label, kind, statistics.median(loads), min(loads), max(loads), statistics.median(walls), min(walls),
            max(walls), statistics.median(t[1] for t in ts), statistics.median(t[3] for t in ts),
            "%.3f" % statistics.median(hashed) if hashed else "at load"))
    print("\n".join(lines))


if "--file" in sys.argv:
    file_entry_bench()
    sys.exit(0)
config_path = os.path.join(root, "config", "gpt2-full.json")
with open(config_path) as f:
    config = json.load(f)
data_dir = os.path.normpath(os.path.join(root, "config", config["data_dir"]))
if not os.path.isdir(data_dir):
    print("ready: SKIPPED (no %s)" % data_dir)
    sys.exit(0)
config["data_dir"] = data_dir
work = tempfile.mkdtemp(prefix="embedscope-ready.")


def ready_seconds(cache_dir):
    """(seconds from exec to /readyz 200, the daemon's log)."""
    cfg = dict(config, server=dict(config.get("server", {}), listen="127.0.0.1:0"))
    if cache_dir:
        cfg["server"]["cache_dir"] = cache_dir
    wall, _, log, _ = start_to_ready(os.path.join(root, build, "embedscope"), cfg, work)
    return wall, log


times = {"no cache_dir": [], "cold cache_dir": [], "warm cache_dir": []}
for i in range(rounds):
    cache = os.path.join(work, "cache%d" % i)
    times["no cache_dir"].append(ready_seconds(None)[0])
    times["cold cache_dir"].append(ready_seconds(cache)[0])
    seconds, log = ready_seconds(cache)
    if log.count("converted copy in cache_dir") == 0:
        raise SystemExit("the warm start mapped no converted copy:\n" + log)
    times["warm cache_dir"].append(seconds)
    shutil.rmtree(cache)
shutil.rmtree(work)

lines = ["", "### Start-up: exec to the first /readyz 200, config/gpt2-full.json (%d interleaved rounds)" % rounds, "",
         "| start | median s | min s | max s |", "|---|---|---|---|"]
for name, ts in times.items():
    lines.append("| %s | %.3f | %.3f | %.3f |" % (name, statistics.median(ts), min(ts), max(ts)))
text = "\n".join(lines) + "\n"
print(text, end="")
os.makedirs("bench/results", exist_ok=True)
with open("bench/results/report.md", "a") as f:
    f.write(text)
