#!/usr/bin/env python3
"""Issue 33's many-core table, the daemon measured over HTTP (bench/device_http.sh runs it on the host, after
unpacking .devbench/esdev.tar.gz into /tmp/esdev; see bench/README.md). In one run, the most important rows first,
each step skipped (and said so) when it would start too late for DEVICE_BUDGET_S:

1. seeded float64 matrices (bench/make_matrix.py, every core) for DEVICE_SIZES, the largest first;
2. the daemon with a file configuration (every size a file entry, plus gpt2-small/wpe; cache_dir; no request
   deadline, sync_seconds large, so nothing becomes a 202 job or a 504): seconds from exec to /readyz 200
   on a first start (empty cache_dir: no sha256 record) and on a second start (the records kept);
3. on that second daemon, over HTTP, each first request timed (whole body read) with the daemon's own
   "computed ... in S s" log lines beside it, then its peer (bench/peers.py, every core, BENCH_NO_WARM) in the
   same run: the smallest size's spectrum?method=values / exact PCA NPY / top-k PCA NPY against numpy σ only /
   numpy svd / sklearn randomized, the largest's top-k PCA NPY and σ only against sklearn randomized / numpy σ
   only; each PCA's decomposition checked through the cached vectors?k=30 reply (its method, the top-k
   certificate ≤ 1e-10, σ against the peer's);
4. warm replies: wrk against three daemons on the embedded default (default threads, --threads 2, --threads
   CORES) and nginx (CORES workers) serving the byte-identical bodies, /v1/models and the 86 KB PCA, at 64 and
   256 connections, interleaved per case; req/s, latency, and each server's CPU ms per 1000 replies (utime +
   stime of every thread, /proc).

Writes $OUT/device-http.md (the table, rewritten after every step, so a run cut short keeps what it measured),
$OUT/device-http-runs.jsonl and $OUT/device-http-logs.txt (the daemons' and nginx's log tails), and prints the
table. Environment: DEVICE_BUDGET_S (420), DEVICE_SIZES ("50257x768 128256x4096": the first is the small one,
the last the large one), DEVICE_WRK_SECONDS (4), DEVICE_WRK_CONNS ("64 256"), DEVICE_WRK_THREADS (cores / 2),
DEVICE_STEPS ("http wrk": steps 1-3, step 4; name one for a rerun of the other's half),
DEVICE_T0 (the Unix time the run started; the budget counts from it), ESDEV (/tmp/esdev), DEVICE_DATA
(/tmp/esdev-data, where the matrices are kept for a rerun), OUT (/tmp/esdev-out)."""
import datetime
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

T0 = float(os.environ.get("DEVICE_T0") or time.time())
BUDGET = float(os.environ.get("DEVICE_BUDGET_S", "420"))
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ESDEV = os.environ.get("ESDEV", "/tmp/esdev")
DATA = os.environ.get("DEVICE_DATA", "/tmp/esdev-data")
OUT = os.environ.get("OUT") or "/tmp/esdev-out"
WORK = "/tmp/esdev-work"
SIZES = [tuple(int(x) for x in s.split("x")) for s in
         os.environ.get("DEVICE_SIZES", "50257x768 128256x4096").split()]
CORES = len(os.sched_getaffinity(0))
K = 30
WRK_SECONDS = int(os.environ.get("DEVICE_WRK_SECONDS", "4"))
WRK_CONNS = [int(c) for c in os.environ.get("DEVICE_WRK_CONNS", "64 256").split()]
WRK_THREADS = int(os.environ.get("DEVICE_WRK_THREADS", str(max(1, CORES // 2))))
LOADER = [os.path.join(ESDEV, "ld-linux-x86-64.so.2"), "--library-path", ESDEV]
PCA_PATH = "/v1/models/gpt2-small/matrices/wpe/pca?k=3&rows=1:"
HZ = os.sysconf("SC_CLK_TCK")
# the host's python3, with numpy and scikit-learn (not sys.executable: a pyenv shim's interpreter may lack them)
PYTHON = os.environ.get("PYTHON", "python3")
os.environ["no_proxy"] = "127.0.0.1,localhost"

runs, skipped, facts, logs, started = [], [], {}, [], []


def left():
    return BUDGET - (time.time() - T0)


def elapsed():
    return time.time() - T0


def note(line):
    print("[%5.0f s] %s" % (elapsed(), line), flush=True)


def skip(what, need):
    skipped.append("%s (needs %.0f s, %.0f left)" % (what, need, left()))
    note("skipped (time budget): " + skipped[-1])


def record(row):
    runs.append(row)
    with open(os.path.join(OUT, "device-http-runs.jsonl"), "a") as f:
        f.write(json.dumps(row) + "\n")
    try:
        write_table()
    except Exception as e:  # noqa: BLE001 (the rows are in the jsonl; the run goes on)
        note("table: %r" % e)


def cpu_ticks(pids):
    """utime + stime clock ticks of every thread of the given processes so far."""
    t = 0
    for pid in pids:
        try:
            tasks = os.listdir("/proc/%d/task" % pid)
        except OSError:
            continue
        for task in tasks:
            try:
                with open("/proc/%d/task/%s/stat" % (pid, task)) as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                t += int(fields[11]) + int(fields[12])
            except (OSError, IndexError):
                pass
    return t


def children(pid):
    """The processes whose parent is pid (nginx's workers)."""
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open("/proc/%s/stat" % p) as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(p))
            except (OSError, IndexError, ValueError):
                pass
    return out


def get(url, timeout, headers=None):
    """(status, body, seconds) of a GET, the whole body read."""
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=timeout) as r:
            body = r.read()
            return r.status, body, time.monotonic() - t0
    except urllib.error.HTTPError as e:
        return e.code, e.read(), time.monotonic() - t0


class Daemon:
    """The packed embedscope, its stderr to a log file; started at once."""

    def __init__(self, name, args, env=None):
        self.name, self.log_path = name, os.path.join(WORK, name + ".log")
        self.log_file = open(self.log_path, "wb")
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen([os.path.join(ESDEV, "embedscope"), *args], stdout=self.log_file,
                                     stderr=self.log_file, env=dict(os.environ, **(env or {})))
        self.base = None
        started.append(self)

    def log(self, offset=0):
        with open(self.log_path, errors="replace") as f:
            f.seek(offset)
            return f.read()

    def log_size(self):
        return os.path.getsize(self.log_path)

    def wait_ready(self, timeout):
        """Seconds from exec to the first /readyz 200 (polled every 5 ms), or None."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                note("%s exited %s: %s" % (self.name, self.proc.returncode, self.log()[-2000:]))
                return None
            if not self.base:
                m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", self.log())
                self.base = m and m.group(1)
            if self.base:
                try:
                    with urllib.request.urlopen(self.base + "/readyz", timeout=5) as r:
                        if r.status == 200:
                            return time.monotonic() - self.t0
                except OSError:
                    pass
            time.sleep(0.005)
        return None

    def stop(self):
        if self.log_file.closed:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log_file.close()
        logs.append("==== %s (last 60 lines)\n%s" % (self.name, "\n".join(self.log().splitlines()[-60:])))


def machine():
    def sh(cmd):
        try:
            return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=30).stdout.strip()
        except subprocess.TimeoutExpired:
            return "?"
    facts["machine"] = "%s; %d cores; %s; avx512: %s" % (
        sh("lscpu | sed -n 's/^Model name:\\s*//p'"), CORES, sh("free -g | awk '/^Mem:/{print $2\" GiB RAM\"}'"),
        sh("grep -o 'avx512[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\\n' ' '") or "none")
    facts["numpy"] = sh("%s -c 'import json, numpy, sklearn; from threadpoolctl import threadpool_info; "
                        "print(\"numpy\", numpy.__version__, \"sklearn\", sklearn.__version__, json.dumps([{k: p.get(k) "
                        "for k in (\"internal_api\", \"version\", \"architecture\", \"num_threads\")} for p in "
                        "threadpool_info() if p.get(\"user_api\") == \"blas\"]))' 2>&1 | tail -1" % PYTHON)
    facts["commit"] = sh("%s --version" % os.path.join(ESDEV, "embedscope"))
    facts["date"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    note("machine: %s\nnumpy: %s\ndaemon: %s" % (facts["machine"], facts["numpy"], facts["commit"]))


def matrix_file(n, d):
    return os.path.join(DATA, "m%dx%d.npy" % (n, d))


def make_matrices():
    """The seeded matrices, the largest first; False for a size skipped. The newest is left 2.2 s to settle,
    so the daemon's first start may write its sha256 record."""
    made = {}
    for n, d in sorted(SIZES, key=lambda s: -s[0] * s[1]):
        path = matrix_file(n, d)
        if os.path.exists(path):
            made[(n, d)] = True
            continue
        need = 10 + n * d * 8 / 1e9 * 15  # seconds: ~60 at 4.2 GB
        if left() < need + 60:
            skip("matrix %dx%d" % (n, d), need + 60)
            made[(n, d)] = False
            continue
        t = time.monotonic()
        tmp = path[:-4] + ".tmp.npy"
        env = dict(os.environ, OPENBLAS_NUM_THREADS=str(CORES), OMP_NUM_THREADS=str(CORES))
        r = subprocess.run([PYTHON, os.path.join(ROOT, "bench", "make_matrix.py"), str(n), str(d), "1", tmp],
                           env=env, capture_output=True, text=True, timeout=max(10, left()))
        if r.returncode != 0:
            note("make_matrix %dx%d failed: %s" % (n, d, r.stderr[-1000:]))
            made[(n, d)] = False
            continue
        os.rename(tmp, path)
        made[(n, d)] = True
        note("matrix %dx%d (%.2f GB) made in %.1f s" % (n, d, n * d * 8 / 1e9, time.monotonic() - t))
    newest = max((os.path.getmtime(matrix_file(*s)) for s in SIZES if made.get(s)), default=0)
    time.sleep(max(0.0, newest + 2.2 - time.time()))
    return [s for s in SIZES if made.get(s)]


def file_config(sizes):
    return {"data_dir": DATA,
            "server": {"listen": "127.0.0.1:0", "cache_dir": os.path.join(WORK, "cache"), "cache_mb": 32768},
            "limits": {"max_response_bytes": 1 << 30, "request_timeout_s": 0, "sync_seconds": 86400},
            "models": {"m": {"matrices": {"x%dx%d" % s: {"file": os.path.basename(matrix_file(*s))} for s in sizes}},
                       "gpt2-small": {"matrices": {"wpe": {"file": os.path.join(ROOT, "data", "gpt2-small", "wpe.npy"),
                                                           "model_axis": "columns"}}}}}


def start_file_daemon(label, config_path, names, hashed=False, args=()):
    """One start of the file-configured daemon: its row; the daemon (ready) or None."""
    d = Daemon("file-" + label.split()[0], ["--config", config_path, *args])
    seconds = d.wait_ready(max(5, min(120, left() - 30)))
    cpu = cpu_ticks([d.proc.pid]) / HZ
    log = d.log()
    loads = ["%s %s in %s ms" % m for m in re.findall(r"loaded (m/\S+) (\d+x\d+) .* in ([0-9.]+) ms", log)]
    calib = re.search(r"cost model calibrated in ([0-9.]+) s", log)
    row = {"step": "readyz", "start": label, "seconds": seconds, "cpu_s": cpu, "entries": loads,
           "calibration_s": float(calib.group(1)) if calib else None,
           "sizes": ["%dx%d" % s for s in SIZES]}
    if seconds is not None and (label.startswith("first") or hashed):  # its sha256s known (and kept)
        row["hashed_after_ready_s"] = wait_hashed(d, names)
    if seconds is not None and label.startswith("first"):
        row["records"] = len(os.listdir(os.path.join(WORK, "cache")))
    note("%s: /readyz after %s s, %.2f CPU s; %s" % (label, "%.3f" % seconds if seconds else "never", cpu,
                                                      "; ".join(loads)))
    record(row)
    if seconds is None:
        d.stop()
        return None
    return d


def wait_hashed(d, names):
    """Seconds until every file entry's sha256 is known (provenance.sha256_state, where the daemon hashes
    after /readyz; a daemon without it had them at /readyz), then its records written; None if never."""
    t, cap = time.monotonic(), min(90, max(0, left() - 60))
    while time.monotonic() - t < cap:
        states = []
        for name in names:
            status, body, _ = get(d.base + "/v1/models/m/matrices/" + name, 10)
            states.append(json.loads(body).get("provenance", {}).get("sha256_state", "known") if status == 200
                          else "?")
        if all(s != "computing" for s in states):
            seconds = time.monotonic() - t
            time.sleep(0.5)  # the record follows the hash
            return seconds
        time.sleep(0.05)
    return None


def daemon_request(d, path, timeout, phases=None):
    """(status, body, HTTP seconds, [(method, computed seconds)], access ms) of one request; its decompositions'
    phase lines (the daemon's debug log) appended to phases."""
    phases = [] if phases is None else phases
    offset = d.log_size()
    status, body, seconds = get(d.base + path, timeout)
    time.sleep(0.05)  # the access line follows the reply
    new = d.log(offset)
    computed = [(m, float(s)) for m, s in re.findall(r"computed \S+: (\S+) in ([0-9.]+) s", new)]
    # the decomposition's phases (debug lines of src/linalg: top-k's, the TSQR's chunks and merges, the Gram sum)
    phases.extend(re.findall(r"debug  ?((?:top-k phases|values phases|exact phases|gram \d|tsqr \d).*)", new))
    access = re.search(r"access GET \S+ \d+ \d+ B ([0-9.]+) ms", new)
    return status, body, seconds, computed, float(access.group(1)) if access else None


def peer(tool, path):
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(CORES), OMP_NUM_THREADS=str(CORES), MKL_NUM_THREADS=str(CORES),
               BENCH_THREADS=str(CORES), BENCH_NO_WARM="1")
    try:
        r = subprocess.run([PYTHON, os.path.join(ROOT, "bench", "peers.py"), path, tool, str(K)], env=env,
                           capture_output=True, text=True, timeout=max(5, left()))
    except subprocess.TimeoutExpired:
        return {"error": "timed out"}
    if r.returncode != 0:
        return {"error": r.stderr[-500:]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def first_requests(d, small, big):
    """Each first request over HTTP and its peer in the same run."""
    cases = []
    if small:
        cases += [(small, "spectrum?method=values", "numpy_values", "σ only", None, 20),
                  (small, "pca?k=%d&method=exact&format=npy" % K, "numpy_svd", "exact first PCA, NPY", 0.3, 20),
                  (small, "pca?k=%d&method=topk&format=npy" % K, "sklearn_randomized", "top-%d PCA, NPY" % K, None,
                   20)]
    if big:
        cases += [(big, "pca?k=%d&method=topk&format=npy" % K, "sklearn_randomized", "top-%d PCA, NPY" % K, 0.5, 70),
                  (big, "spectrum?method=values", "numpy_values", "σ only", 0.5, 130)]
    for (n, dd), query, tool, what, target, need in cases:
        size = "%dx%d" % (n, dd)
        if left() < need:
            skip("%s %s" % (size, query), need)
            continue
        path = "/v1/models/m/matrices/x%s/%s" % (size, query)
        phases = []
        status, body, seconds, computed, access_ms = daemon_request(d, path, max(5, left()), phases)
        row = {"step": "first", "size": size, "request": query, "what": what, "status": status, "bytes": len(body),
               "http_s": seconds, "computed": computed, "computed_s": sum(s for _, s in computed) or None,
               "access_ms": access_ms, "peer": tool, "target": target, "phases": phases}
        for line in phases:
            note("  " + line)
        sigma = None
        if status != 200:
            row["error"] = body[:300].decode(errors="replace")
        elif query.startswith("spectrum"):
            doc = json.loads(body)
            sigma = doc.get("singular_values") or doc.get("values")
            row["method"] = doc.get("input", {}).get("matrix", {}).get("method")
        else:
            row["npy_header"] = body[10:10 + int.from_bytes(body[8:10], "little")].decode(errors="replace").strip()
            method = "topk" if "topk" in query else "exact"
            # the decomposition the NPY came from, from the cache: its method, certificate and values
            vs, vbody, vsec, vcomputed, _ = daemon_request(d, "/v1/models/m/matrices/x%s/vectors?k=%d&method=%s" % (
                size, K, method), max(5, left()))
            if vs == 200:
                doc = json.loads(vbody)
                m = doc["input"]["matrix"]
                row.update(method=m.get("method"), certificate=m.get("certificate"), check_s=vsec,
                           check_computed=vcomputed)
                sigma = [v["singular_value"] for v in doc.get("vectors", [])]
                cert = m.get("certificate")
                if method == "topk":
                    row["certified"] = bool(cert) and max(cert["residual"], cert["sigma_bound"]) <= 1e-10
        note("%s %s: %d, %s B in %.3f s (computed %s, access %s ms)" % (
            size, query, status, len(body), seconds, computed, access_ms))
        if left() < need / 3:
            skip("peer %s on %s" % (tool, size), need / 3)
        else:
            p = peer(tool, matrix_file(n, dd))
            row["peer_s"] = p.get("seconds")
            row["peer_error"] = p.get("error")
            facts.setdefault("peer_blas", p.get("blas"))
            if sigma and p.get("s"):
                row["sigma_agreement"] = max(abs(a - b) for a, b in zip(sigma[:K], p["s"][:K])) / p["s"][0]
            note("  peer %s: %s s" % (tool, p.get("seconds", p.get("error"))))
        record(row)


def readiness_and_first_requests():
    sizes = make_matrices()
    if not sizes:
        return
    small = SIZES[0] if SIZES[0] in sizes else None
    big = SIZES[-1] if len(SIZES) > 1 and SIZES[-1] in sizes else None
    shutil.rmtree(os.path.join(WORK, "cache"), ignore_errors=True)
    os.makedirs(os.path.join(WORK, "cache"))
    names = ["x%dx%d" % s for s in sizes]
    config_path = os.path.join(WORK, "file-config.json")
    with open(config_path, "w") as f:
        json.dump(file_config(sizes), f, indent=1)
    if left() < 40:
        skip("daemon starts", 40)
        return
    d = start_file_daemon("first start (empty cache_dir: no sha256 record)", config_path, names)
    if d is None:
        return
    d.stop()
    d = start_file_daemon("second start (the sha256 records kept)", config_path, names)
    if d is None:
        return
    d.stop()
    # the first requests on a daemon without cache_dir (nothing written to disk in a request's time), its
    # entries hashed before they start (a daemon that hashes after /readyz would share the cores with them)
    config = file_config(sizes)
    del config["server"]["cache_dir"]
    with open(config_path, "w") as f:
        json.dump(config, f, indent=1)
    d = start_file_daemon("third start (no cache_dir), for the requests", config_path, names, hashed=True,
                          args=["--log-level", "debug"])  # the decompositions' phases
    if d is None:
        return
    try:
        status, body, _ = get(d.base + "/v1", 10)
        facts["kernels"] = json.loads(body).get("blas") if status == 200 else "?"
        m = re.search(r"listening on \S+ \((.*)\)", d.log())
        facts["file_daemon"] = m.group(1) if m else "?"
        status, body, _ = get(d.base + PCA_PATH, 60)
        facts["file_config_pca"] = (status, len(body))
        first_requests(d, small, big)
    finally:
        d.stop()


def wrk(url, conns, pids):
    """One wrk run and the servers' CPU during it: a row."""
    before = cpu_ticks(pids)
    r = subprocess.run(LOADER + [os.path.join(ESDEV, "wrk"), "-t%d" % min(WRK_THREADS, conns), "-c%d" % conns,
                                 "-d%ds" % WRK_SECONDS, "--latency", url],
                       capture_output=True, text=True, timeout=WRK_SECONDS + 30)
    ticks = cpu_ticks(pids) - before
    o = r.stdout

    def ms(label):
        m = re.search(r"\s%s%%\s+([\d.]+)(us|ms|s)" % label, o)
        if not m:
            return None
        v, u = float(m.group(1)), m.group(2)
        return v / 1000 if u == "us" else v * 1000 if u == "s" else v
    rps = re.search(r"Requests/sec:\s+([\d.]+)", o)
    replies = re.search(r"(\d+) requests in", o)
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", o)
    socket_errors = re.search(r"Socket errors: (.*)", o)
    if not rps or not replies or int(replies.group(1)) == 0:
        return {"error": (o + r.stderr)[-500:]}
    n = int(replies.group(1))
    return {"rps": float(rps.group(1)), "replies": n, "p50_ms": ms("50"), "p99_ms": ms("99"),
            "cpu_ms_per_1000": ticks * 1000 / HZ / (n / 1000), "non_2xx": int(errors.group(1)) if errors else 0,
            "socket_errors": socket_errors.group(1) if socket_errors else None}


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def warm_replies():
    per_case = WRK_SECONDS + 2
    if left() < 30 + per_case * 4:
        skip("warm replies (wrk)", 30 + per_case * 4)
        return
    env = {"EMBEDSCOPE_DATA_DIR": os.path.join(ROOT, "data")}
    variants = list({name: (name, args) for name, args in (
        ("default threads", []), ("threads 2", ["--threads", "2"]),
        ("threads %d" % CORES, ["--threads", str(CORES)]))}.values())  # 2 cores: 2 and CORES are one
    daemons = {name: Daemon("wrk-" + name.replace(" ", "-"), ["--listen", "127.0.0.1:0", "--access-log", "off",
                                                               *args], env) for name, args in variants}
    www = os.path.join(WORK, "www")
    os.makedirs(www, exist_ok=True)
    nginx = None
    try:
        for name, d in daemons.items():
            if d.wait_ready(max(5, min(90, left() - 20))) is None:
                note("wrk daemon %s not ready" % name)
                return
        bodies = {}
        for name, d in daemons.items():  # each daemon's PCA reply computed and cached before its runs
            for what, path in (("pca", PCA_PATH), ("models", "/v1/models")):
                status, body, _ = get(d.base + path, 60)
                bodies.setdefault(what, {})[name] = (status, body)
        default = variants[0][0]
        for what in ("pca", "models"):
            with open(os.path.join(www, what), "wb") as f:
                f.write(bodies[what][default][1])
        facts["bodies"] = {what: {name: [s, len(b)] for name, (s, b) in v.items()} for what, v in bodies.items()}
        if facts.get("file_config_pca"):
            facts["bodies"]["pca"]["file config"] = list(facts["file_config_pca"])
        for name, d in daemons.items():  # "http threads N, compute threads ..." as each daemon says
            m = re.search(r"listening on \S+ \((.*)\)", d.log())
            facts.setdefault("wrk_daemons", {})[name] = m.group(1) if m else "?"
        port = free_port()
        user = "user root root;" if os.getuid() == 0 else ""
        conf = os.path.join(WORK, "nginx.conf")
        with open(conf, "w") as f:
            f.write("""%s
worker_processes %d;
daemon off;
pid %s/nginx.pid;
error_log %s/nginx-error.log;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path %s/t1; proxy_temp_path %s/t2; fastcgi_temp_path %s/t3; uwsgi_temp_path %s/t4; scgi_temp_path %s/t5;
    server {
        listen 127.0.0.1:%d;
        location = /pca { default_type application/json; alias %s/pca; }
        location = /models { default_type application/json; alias %s/models; }
    }
}
""" % (user, CORES, WORK, WORK, *([WORK] * 5), port, www, www))
        nginx = subprocess.Popen(LOADER + [os.path.join(ESDEV, "nginx"), "-c", conf, "-p", WORK, "-e",
                                           os.path.join(WORK, "nginx-error.log")],
                                 stdout=subprocess.DEVNULL, stderr=open(os.path.join(WORK, "nginx.stderr"), "wb"))
        nurl = "http://127.0.0.1:%d" % port
        for _ in range(400):
            try:
                if get(nurl + "/models", 2)[0] == 200:
                    break
            except OSError:
                time.sleep(0.025)
        workers = children(nginx.pid)
        facts["nginx_workers"] = len(workers)
        same = get(nurl + "/pca", 5)[1] == bodies["pca"][default][1]
        facts["nginx_body_identical"] = same
        for conns in WRK_CONNS:
            for what, path in (("models", "/v1/models"), ("pca", PCA_PATH)):
                servers = [("nginx", nurl + "/" + what, [nginx.pid] + workers)] + [
                    (name, d.base + path, [d.proc.pid]) for name, d in daemons.items()]
                for server, url, pids in servers:
                    if left() < per_case:
                        skip("wrk %s %s %d conns" % (server, what, conns), per_case)
                        continue
                    row = {"step": "wrk", "server": server, "reply": what, "conns": conns,
                           "threads": WRK_THREADS, "seconds": WRK_SECONDS, **wrk(url, conns, pids)}
                    note("wrk %s %s %d conns: %s" % (server, what, conns, {k: row.get(k) for k in (
                        "rps", "p50_ms", "p99_ms", "cpu_ms_per_1000", "non_2xx", "error")}))
                    record(row)
    finally:
        for d in daemons.values():
            d.stop()
        if nginx:
            nginx.send_signal(signal.SIGQUIT)
            try:
                nginx.wait(10)
            except subprocess.TimeoutExpired:
                nginx.kill()
            err = os.path.join(WORK, "nginx-error.log")
            if os.path.exists(err):
                logs.append("==== nginx error log\n" + open(err, errors="replace").read()[-3000:])


def fmt(v, f="%.3f"):
    return f % v if isinstance(v, (int, float)) else "-"


def write_table():
    lines = ["# embedscope over HTTP on %d cores, %s" % (CORES, facts.get("date", "?")), "",
             "Machine: %s" % facts.get("machine", "?"), "",
             "Daemon: %s; its BLAS (/v1): `%s`; with the file configuration: %s" % (
                 facts.get("commit", "?"), json.dumps(facts.get("kernels")), facts.get("file_daemon", "?")), "",
             "Peers: %s; threads %d" % (facts.get("numpy", "?"), CORES), ""]
    ready = [r for r in runs if r["step"] == "readyz"]
    if ready:
        lines += ["## Start-up with file entries %s (target: ≤ 5 s to /readyz)" % ", ".join(ready[0]["sizes"]), "",
                  "| start | exec to /readyz 200, s | daemon CPU s then | cost-model calibration s | entries loaded "
                  "| sha256s known after /readyz, s | files in cache_dir |", "|---|---|---|---|---|---|---|"]
        for r in ready:
            lines.append("| %s | %s | %.2f | %s | %s | %s | %s |" % (
                r["start"], fmt(r["seconds"]), r["cpu_s"], fmt(r["calibration_s"]), "; ".join(r["entries"]),
                fmt(r.get("hashed_after_ready_s")), r.get("records", "")))
        lines.append("")
    first = [r for r in runs if r["step"] == "first"]
    if first:
        lines += ["## First requests over HTTP, each with its peer in the same run (%d threads)" % CORES, "",
                  "HTTP s: the request until its whole body was read (urllib, 127.0.0.1); computed s: the daemon's "
                  "own \"computed ... in S s\" log lines during it; peer s: bench/peers.py's first call on the "
                  "whole matrix (load and imports untimed). Certificate: the top-k decomposition's residual / σ "
                  "bound (≤ 1e-10 needed), read from the cached vectors?k=%d reply." % K, "",
                  "| size | request | status | bytes | HTTP s | computed s | method | peer | peer s | ratio (HTTP) "
                  "| ratio (computed) | target | certificate | σ agreement |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in first:
            ps, cs = r.get("peer_s"), r.get("computed_s")
            cert = r.get("certificate")
            lines.append("| %s | `%s` | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                r["size"], r["request"], r["status"], r["bytes"], fmt(r["http_s"]), fmt(cs), r.get("method", "-"),
                r["peer"], fmt(ps), "**%.2f×**" % (r["http_s"] / ps) if ps else "-",
                "%.2f×" % (cs / ps) if ps and cs else "-", "≤ %.1f×" % r["target"] if r["target"] else "",
                "%.1e / %.1e %s" % (cert["residual"], cert["sigma_bound"], "ok" if r.get("certified") else "NOT")
                if cert else "-", fmt(r.get("sigma_agreement"), "%.1e")))
        lines.append("")
        phased = [r for r in first if r.get("phases")]
        if phased:
            lines += ["Where each decomposition's time went (the daemon's debug lines, src/linalg):", ""]
            for r in phased:
                lines += ["- %s `%s`: %s" % (r["size"], r["request"], "; ".join(r["phases"]))]
            lines.append("")
    wrk_rows = [r for r in runs if r["step"] == "wrk" and "rps" in r]
    if wrk_rows:
        b = facts.get("bodies", {})
        lines += ["## Warm replies: wrk -t%d, %d s per run, 127.0.0.1, nginx %s workers, interleaved per case" % (
            WRK_THREADS, WRK_SECONDS, facts.get("nginx_workers", "?")), "",
                  "Bodies (status, bytes) per daemon: %s; nginx serves the default daemon's, identical: %s. "
                  "The daemons (embedded default, --access-log off) by variant: %s. CPU ms / 1000: utime + stime of every thread of the server's processes per 1000 "
                  "replies. Targets: ≥ 0.8× nginx req/s, CPU ≤ 1.3× nginx's, 2 → %d threads changes CPU per "
                  "reply by ≤ 10 %%." % (json.dumps(b), facts.get("nginx_body_identical"),
                                         json.dumps(facts.get("wrk_daemons")), CORES), "",
                  "| reply | conns | server | req/s | ratio to nginx | p50 / p99 ms | CPU ms / 1000 | CPU ratio to "
                  "nginx | non-2xx |", "|---|---|---|---|---|---|---|---|---|"]
        for r in wrk_rows:
            ng = next((x for x in wrk_rows if x["server"] == "nginx" and (x["reply"], x["conns"]) == (
                r["reply"], r["conns"])), None)
            lines.append("| %s | %d | %s | %.0f | %s | %s / %s | %.1f | %s | %d |" % (
                r["reply"], r["conns"], r["server"], r["rps"], "**%.2f×**" % (r["rps"] / ng["rps"]) if ng else "-",
                fmt(r["p50_ms"], "%.2f"), fmt(r["p99_ms"], "%.2f"), r["cpu_ms_per_1000"],
                "**%.2f×**" % (r["cpu_ms_per_1000"] / ng["cpu_ms_per_1000"]) if ng and ng["cpu_ms_per_1000"] else "-",
                r["non_2xx"]))
        changes = []
        for r2 in (r for r in wrk_rows if r["server"] == "threads 2"):
            r16 = next((x for x in wrk_rows if x["server"] == "threads %d" % CORES and (x["reply"], x["conns"]) == (
                r2["reply"], r2["conns"])), None)
            if r16 and r2["cpu_ms_per_1000"] > 0 and r16 is not r2:
                changes.append("%s at %d conns %+.0f %%" % (r2["reply"], r2["conns"],
                                                           100 * (r16["cpu_ms_per_1000"] / r2["cpu_ms_per_1000"] - 1)))
        if changes:
            lines += ["", "CPU per reply, threads 2 → %d: %s." % (CORES, "; ".join(changes))]
        lines.append("")
    errors = [r for r in runs if r.get("error") or r.get("peer_error")]
    if errors:
        lines += ["## Errors", ""] + ["- %s" % json.dumps(r)[:600] for r in errors] + [""]
    if skipped:
        lines += ["## Skipped (time budget %.0f s)" % BUDGET, ""] + ["- " + s for s in skipped] + [""]
    lines.append("Elapsed %.0f s of %.0f." % (elapsed(), BUDGET))
    with open(os.path.join(OUT, "device-http.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    os.makedirs(OUT, exist_ok=True)
    os.makedirs(DATA, exist_ok=True)
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    open(os.path.join(OUT, "device-http-runs.jsonl"), "w").close()
    try:
        machine()
        write_table()
        steps = os.environ.get("DEVICE_STEPS", "http wrk").split()
        if "http" in steps:
            readiness_and_first_requests()
        if "wrk" in steps:
            warm_replies()
    finally:
        for d in started:
            d.stop()
        write_table()
        with open(os.path.join(OUT, "device-http-logs.txt"), "w") as f:
            f.write("\n\n".join(logs) + "\n")
        print(open(os.path.join(OUT, "device-http.md")).read(), flush=True)


if __name__ == "__main__":
    main()
