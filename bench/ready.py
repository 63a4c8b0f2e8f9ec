#!/usr/bin/python3
"""Start-up half of make bench: seconds from exec to the first /readyz 200 of config/gpt2-full.json
(98 matrices of ../shared/data, W_pos warmed), interleaved round by round:
  - no cache_dir: every file read, validated, hashed and converted, the warm decomposition computed;
  - cold: an empty cache_dir, the same work plus writing the converted copies and the decomposition;
  - warm: the same cache_dir again (the copies and the decomposition mapped from it).
The warm start reads its copies from the page cache (they were just written); after a reboot the
first start also pays the disk. Appends a markdown table to bench/results/report.md.
Usage: bench/ready.py BUILD   (BENCH_READY_ROUNDS, default 5)"""
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
    path = os.path.join(work, "config.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    log_path = os.path.join(work, "daemon.log")
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    with open(log_path, "wb") as log:
        t0 = time.monotonic()
        proc = subprocess.Popen([os.path.join(root, build, "embedscope"), "--config", path, "--access-log", "off"],
                                stderr=log, env=env)
    port = None
    try:
        while True:
            if proc.poll() is not None:
                raise SystemExit("daemon exited %s:\n%s" % (proc.returncode, open(log_path).read()))
            if port is None:
                m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", open(log_path).read())
                port = m and m.group(1)
            if port:
                try:
                    with urllib.request.urlopen("http://127.0.0.1:%s/readyz" % port, timeout=5) as r:
                        if r.status == 200:
                            return time.monotonic() - t0, open(log_path).read()
                except OSError:
                    pass
            time.sleep(0.002)
    finally:
        proc.terminate()
        proc.wait()


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
