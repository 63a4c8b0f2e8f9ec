"""Shared helpers of the HTTP integration tests (Python standard library only).

tests/http/run.sh starts the daemon on the embedded default and exports
EMBEDSCOPE_URL (its base URL) and EMBEDSCOPE_BIN (the binary, so tests can
start their own instances with small configurations through `Daemon`).
"""
import array
import ast
import hashlib
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import time
import unittest
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The caller's variables the daemons the tests start never inherit (tests/hermetic.sh, which the
# runners source, says why); a test about one of them passes it in Daemon's env.
CALLERS_ONLY = ("OPENBLAS_CORETYPE", "OPENBLAS_VERBOSE", "OPENBLAS_MAIN_FREE", "OPENBLAS_DEFAULT_NUM_THREADS",
                "OPENBLAS_L2_SIZE", "OPENBLAS_THREAD_TIMEOUT", "GOTO_NUM_THREADS", "GOTOBLAS_MAIN_FREE",
                "OMP_NUM_THREADS", "GOMP_CPU_AFFINITY", "EMBEDSCOPE_DATA_DIR", "EMBEDSCOPE_UPLOAD_TOKEN",
                "ES_BLAS_REEXEC", "ES_TEST_FAKE_CORENAME", "ES_TEST_BLAS_SELF_TEST_FAIL")
# Requests to the test daemons never go through the caller's proxy (requests and urllib read no_proxy).
for _var in ("no_proxy", "NO_PROXY"):
    os.environ[_var] = ",".join(filter(None, ("127.0.0.1,localhost,::1", os.environ.get(_var))))


def daemon_env(extra=None, tmpdir=None):
    """The environment of a daemon a test starts: the caller's less CALLERS_ONLY, one BLAS thread,
    its own TMPDIR when given, then extra."""
    env = {k: v for k, v in os.environ.items() if k not in CALLERS_ONLY}
    env["OPENBLAS_NUM_THREADS"] = "1"
    if tmpdir:
        env["TMPDIR"] = tmpdir
    env.update(extra or {})
    return env
BASE = os.environ.get("EMBEDSCOPE_URL", "http://127.0.0.1:8080")
BIN = os.environ.get("EMBEDSCOPE_BIN", os.path.join(ROOT, "build", "embedscope"))
DATA = os.path.join(ROOT, "data")
WPE = "/v1/models/gpt2-small/matrices/wpe"
# A test that needs a synchronous answer asks for one (RFC 7240): on a loaded machine a request can run
# past limits.sync_seconds (then a 202 job) or be predicted to (then a job, or a 429 once the client
# holds limits.max_jobs_per_client jobs). Ten minutes is the longest a test waits for anything.
SYNC = {"Prefer": "wait=600"}
# How long a test waits for what should take far less (a start, a reply, an exit): a guard against a
# hang, never a check of speed. At load 25 on 2 cores a daemon's 2 s start takes over a minute.
HANG_S = 600
PROBLEM_FIELDS = ("type", "title", "status", "detail", "instance")
# A sanitizer's report, or its own failure (LeakSanitizer's "has encountered a fatal error", exit status 1).
SANITIZER_REPORT = re.compile(r"ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|Sanitizer has encountered")
# Where the whole log of a daemon that failed its stop is kept (tests/http/run.sh: BUILD/http-logs).
KEPT_LOGS = os.environ.get("EMBEDSCOPE_TEST_LOG_DIR") or tempfile.gettempdir()


def keep_log(log_path, why):
    """A copy of a failed daemon's whole log that outlives its test's directory, and a message: why, where
    the copy is, and the log's end, each line led by '    | ' (the lines tests/http/run.sh prints)."""
    with open(log_path, errors="replace") as f:
        log = f.read()
    os.makedirs(KEPT_LOGS, exist_ok=True)
    fd, kept = tempfile.mkstemp(prefix="daemon-%s-" % time.strftime("%Y%m%dT%H%M%S"), suffix=".log", dir=KEPT_LOGS)
    with os.fdopen(fd, "w") as f:
        f.write(log)
    tail = log[-4000:].splitlines(True) or ["(empty)\n"]
    return "%s; its whole log: %s; its end:\n%s" % (why, kept, "".join("    | " + l for l in tail))


class Reply:
    """One HTTP exchange: status, headers (case-insensitive), raw body."""

    def __init__(self, status, headers, body):
        self.status, self.headers, self.body = status, headers, body

    def json(self):
        return json.loads(self.body)

    def header(self, name):
        return self.headers.get(name)


def exchange(path, method="GET", headers=None, body=None, base=None, timeout=HANG_S, source=None):
    """Send one request on a fresh connection; HTTP errors are returned, never raised. source: the
    local address to send from (e.g. "127.0.0.2", another client on the loopback), None: any."""
    url = urllib.parse.urlsplit(base or BASE)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=timeout,
                                      source_address=(source, 0) if source else None)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return Reply(r.status, r.headers, r.read())
    finally:
        conn.close()


def request(path, method="GET", headers=None, body=None, base=None, timeout=HANG_S):
    """exchange(), and when a GET becomes a job (202: it ran past limits.sync_seconds on a slow or
    loaded machine) the job is followed to its result, as a client that waits would; a request that
    states a Prefer header gets the 202 itself."""
    r = exchange(path, method, headers, body, base, timeout)
    if r.status != 202 or method != "GET" or "Prefer" in (headers or {}) or not r.headers.get("Location"):
        return r
    accepted, job, deadline = r, r.headers["Location"], time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            r = exchange(job, base=base, timeout=timeout)
            if r.status == 303:
                return exchange(r.headers["Location"], headers=headers, base=base, timeout=timeout)
        except OSError:  # the daemon stopped meanwhile: what the client had
            return accepted
        if r.status != 200:
            return r
        state = r.json()
        if state["state"] == "failed" and state.get("error"):  # what the synchronous request would have got
            error = state["error"]
            return Reply(error.get("status", 500), {"Content-Type": "application/problem+json"},
                         json.dumps(error).encode())
        if state["state"] in ("failed", "cancelled"):
            return r
        time.sleep(0.05)
    return r


def read_until_closed(s):
    """Everything s receives until the server closes the connection (or resets it, or stays
    silent for the socket's timeout)."""
    out = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return out
            out += chunk
    except (socket.timeout, ConnectionResetError):
        return out


def raw_exchange(data, base=None, timeout=30):
    """Send raw bytes on a fresh connection; everything the server answers until it
    closes the connection (or resets it, or stays silent for `timeout` seconds)."""
    url = urllib.parse.urlsplit(base or BASE)
    with socket.create_connection((url.hostname, url.port), timeout=timeout) as s:
        s.sendall(data)
        return read_until_closed(s)


_API = None


def api_dump():
    """The daemon's own description of its API (`embedscope --dump-api`, made from its route and analysis
    tables): routes with methods and parameters, analyses with typed parameters and tables. Test lists of
    routes and analyses read it, so a new one cannot be left out unnoticed."""
    global _API
    if _API is None:
        import subprocess
        _API = json.loads(subprocess.run([BIN, "--dump-api"], capture_output=True, text=True, check=True).stdout)
    return _API


def analysis_routes():
    """{route pattern: analysis name} of every analysis route, from api_dump()."""
    return {a["route"]: a["name"] for a in api_dump()["analyses"]}


ONE_MATRIX = "/v1/models/{model}/matrices/{matrix}"


def analysis_examples():
    """{route: its descriptor's example requests} from api_dump() (es_examples, descriptor.h): query, cases
    {param: [one, two or None, bad]}, light, heavy, tables [{query, tables}]. An analysis without
    examples fails here, naming it, so every list built from them is complete."""
    out = {}
    for a in api_dump()["analyses"]:
        assert a.get("examples"), "analysis %s has no examples in its descriptor (es_examples)" % a["name"]
        out[a["route"]] = a["examples"]
    return out


def example_path(route, query, matrix="gpt2-small/wpe"):
    """The request of an example query on route; a route's {model}/{matrix} is `matrix` (model/name)."""
    model, _, name = matrix.partition("/")
    path = route.replace(ONE_MATRIX, "/v1/models/%s/matrices/%s" % (model, name))
    return path + ("?" + query if query else "")


def example_change(fragment):
    """An example case's change as a dict merged into a query: "name=value" sets, "-name" removes (None)."""
    change = {}
    for item in fragment.split("&") if fragment else ():
        if item.startswith("-"):
            change[item[1:]] = None
        else:
            name, _, value = item.partition("=")
            change[name] = value
    return change


def openapi_document():
    """openapi.yaml of the repository, parsed with python3-yaml (flow-style entries included)."""
    import yaml
    with open(os.path.join(ROOT, "openapi.yaml")) as f:
        return yaml.safe_load(f)


def openapi_query_params(doc, path):
    """Names of the query parameters the parsed openapi document gives `path` (inline or $ref'd,
    at path or operation level)."""
    item = doc["paths"][path]
    names = set()
    for entry in item.get("parameters", []) + item.get("get", {}).get("parameters", []):
        if "$ref" in entry:
            entry = doc["components"]["parameters"][entry["$ref"].rsplit("/", 1)[1]]
        if entry["in"] == "query":
            names.add(entry["name"])
    return names


def get_json(path, **kw):
    """(Reply, parsed body) of a GET that must answer with a JSON body."""
    r = request(path, **kw)
    return r, json.loads(r.body)


def metrics(base=None):
    """Unlabelled samples of /metrics as {name: float}."""
    text = request("/metrics", base=base).body.decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and "{" not in line:
            name, value = line.split()
            samples[name] = float(value)
    return samples


def settled_metrics(base=None, timeout=10):
    """metrics() once no compute job is queued or running: a job resumes its client's connection
    as its last step, so the reply can arrive a moment before the job is counted as run."""
    deadline = time.monotonic() + timeout
    while True:
        m = metrics(base)
        if m["embedscope_compute_jobs_running"] == 0 and m["embedscope_compute_queue_depth"] == 0:
            return m
        if time.monotonic() > deadline:
            raise AssertionError("compute jobs still running after %d s: %s" % (timeout, m))
        time.sleep(0.02)


def settled_hashes(base=None, timeout=HANG_S):
    """/v1/models once no matrix's sha256 is still "computing" (docs/operations.md: a file mapped in place,
    such as a restored upload's content file, is served before its background hash is known, and shows
    "sha256": null meanwhile). For tests that compare replies naming the sha256 across a restart; the
    timeout is a guard against a hang, not a check of speed."""
    deadline = time.monotonic() + timeout
    while True:
        doc = request("/v1/models", base=base).json()
        states = [x["provenance"].get("sha256_state") for m in doc["models"] for x in m["matrices"]]
        if "computing" not in states:
            return doc
        if time.monotonic() > deadline:
            raise AssertionError("sha256s still computing after %d s" % timeout)
        time.sleep(0.02)


def query(**params):
    """'?k=v&...' with values percent-encoded (a leading '_' is dropped from names)."""
    return "?" + urllib.parse.urlencode({k.lstrip("_"): v for k, v in params.items()})


class ProblemAssertions(unittest.TestCase):
    """assert_problem: the request fails with an RFC 9457 document of that status."""

    base = None

    def assert_problem(self, path, status, param=None, limit=None, slug=None, method="GET", **kw):
        r = request(path, method=method, base=self.base, **kw)
        self.assertEqual(r.status, status, r.body[:300])
        self.assertEqual(r.header("Content-Type"), "application/problem+json")
        self.assertEqual(r.header("Cache-Control"), "no-store")
        if method == "HEAD":
            self.assertEqual(r.body, b"")
            return r, None
        doc = r.json()
        for key in PROBLEM_FIELDS:
            self.assertIn(key, doc)
        self.assertEqual(doc["status"], status)
        self.assertIsInstance(doc["title"], str)
        self.assertTrue(doc["title"] and doc["detail"])
        self.assertEqual(doc["instance"], urllib.parse.unquote(path.split("?")[0]))
        self.assertEqual(doc["request_id"], r.header("X-Request-Id"))
        if slug:
            self.assertEqual(doc["type"], "/problems/" + slug)
        if param is not None:
            self.assertEqual(doc.get("param"), param, doc)
            self.assertNotIn("limit", doc)
        if limit is not None:
            self.assertEqual(doc["type"], "/problems/limit-exceeded")
            self.assertEqual(doc.get("limit"), limit, doc)
            self.assertIn(limit, doc["detail"])
            self.assertNotIn("param", doc)
        return r, doc


def load_npy(relpath):
    """(shape, float32 array.array, raw data bytes) of a little-endian <f4 C-order .npy under data/."""
    with open(os.path.join(DATA, relpath), "rb") as f:
        blob = f.read()
    assert blob[:6] == b"\x93NUMPY", relpath
    size, start = (2, 8) if blob[6] == 1 else (4, 8)
    hlen = int.from_bytes(blob[start:start + size], "little")
    header = ast.literal_eval(blob[start + size:start + size + hlen].decode("latin1"))
    assert header["descr"] == "<f4" and not header["fortran_order"], header
    raw = blob[start + size + hlen:]
    values = array.array("f")
    values.frombytes(raw)
    return header["shape"], values, raw


_GAUSSIAN_FILES = {}   # (rows, cols, seed) -> path, in _GAUSSIAN_DIR (this process's, removed at its exit)
_GAUSSIAN_DIR = []


def gaussian_file(rows, cols, seed):
    """The path of a rows x cols float64 .npy built as the daemon's gaussian generator builds its matrices
    (decay 1, scale 1): U diag(s) V^T with U, V the orthonormalised columns of Gaussian blocks (numpy's
    default_rng(seed)) and s_j = (j+1)^-1 -- not the generator's own numbers, but the same size and
    spectrum, so a decomposition does the same work (a flat spectrum makes the iterative ones slower).
    Written once per process (the same bytes whoever asks first) and mapped in place by a daemon in
    milliseconds (config {"file": path}), where the generator repeats the two QR factorisations and the
    product at every start of every daemon configured with it: 1.1 CPU s for 4096 x 768. For tests whose
    daemons need a large matrix, not its values."""
    key = (rows, cols, seed)
    if key not in _GAUSSIAN_FILES:
        import numpy
        if not _GAUSSIAN_DIR:
            _GAUSSIAN_DIR.append(tempfile.TemporaryDirectory(prefix="embedscope-matrices-"))
        rng = numpy.random.default_rng(seed)
        r = min(rows, cols)
        u = numpy.linalg.qr(rng.standard_normal((rows, r)))[0]
        v = numpy.linalg.qr(rng.standard_normal((cols, r)))[0]
        path = os.path.join(_GAUSSIAN_DIR[0].name, "gaussian-%dx%d-%d.npy" % key)
        numpy.save(path, (u / numpy.arange(1.0, r + 1.0)) @ v.T)
        _GAUSSIAN_FILES[key] = path
    return _GAUSSIAN_FILES[key]


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def rel_close(got, want, tol):
    """|got - want| <= tol * |want|."""
    return abs(got - want) <= tol * abs(want)


def thread_rounding_differences(a, b, rel=1e-12, path="$"):
    """Where two answers of separate computations differ by more than the rounding of another BLAS
    thread count: a list of "path: a vs b" (empty when they agree). Under blas_threads "auto" the
    thread count of a computation depends on what else runs, and OpenBLAS's threaded products sum in
    another order, so reals may differ in their last digits (docs/operations.md); anything else
    (keys, lengths, strings, integers, a real beyond rel of the larger magnitude) must be equal."""
    if isinstance(a, float) or isinstance(b, float):
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and \
                abs(a - b) <= rel * max(abs(a), abs(b), 1e-300):
            return []
        return ["%s: %r vs %r" % (path, a, b)]
    if isinstance(a, dict) and isinstance(b, dict):
        if list(a) != list(b):
            return ["%s: keys %s vs %s" % (path, list(a), list(b))]
        return [d for k in a for d in thread_rounding_differences(a[k], b[k], rel, "%s.%s" % (path, k))]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return ["%s: %d vs %d items" % (path, len(a), len(b))]
        return [d for i, (x, y) in enumerate(zip(a, b))
                for d in thread_rounding_differences(x, y, rel, "%s[%d]" % (path, i))]
    return [] if a == b else ["%s: %r vs %r" % (path, a, b)]


# Under tests/http/runner.py (make test) the daemons the tests start compute with one OpenBLAS thread
# each unless the test says otherwise (Daemon's blas_threads=None, or its own server.blas_threads), as
# the unit tests do (tests/hermetic.sh): the suite runs several daemons at once on a shared machine, where
# a computation with two OpenBLAS threads waits for a busy core at every synchronisation (a start's
# cost-model calibration: 5 s and 0.9 CPU s with one thread, 17-26 s and 1.9-2.4 CPU s with two, at load
# 15-25). The tests of the "auto" policy (test_blas, test_lifecycle's Threads) and the daemons whose
# configuration a test rewrites keep the default; so do the benchmarks that use Daemon (no variable). The
# embedded default (config None, no --config) gets it as --blas-threads, as the runner's shared daemons do.
TEST_BLAS_THREADS = int(os.environ["EMBEDSCOPE_TEST_BLAS_THREADS"]) if os.environ.get("EMBEDSCOPE_TEST_BLAS_THREADS") else None

# Under the runner the daemons the tests start skip the cost model's calibration at start and predict with
# the built-in rates (`--cost-rates fixed`, docs/api.md): the same predictions on every machine and at any
# load, so whether a request is answered at once or becomes a job never depends on how busy the machine was
# when its daemon started; and a start costs no calibration (about 1 CPU s, 3 under ASan, and the suite
# starts the daemon some 200 times a stage). A test about the calibration passes cost_rates=None (or its own
# --cost-rates); the unit test tests/api/test_cost calibrates, and the benchmarks (no runner) do.
TEST_COST_RATES = os.environ.get("EMBEDSCOPE_TEST_COST_RATES") or None


def cost_rates_args(args=(), cost_rates=TEST_COST_RATES):
    """["--cost-rates", cost_rates] unless cost_rates is None or args name --cost-rates themselves."""
    if cost_rates is None or any(str(a).startswith("--cost-rates") for a in args):
        return []
    return ["--cost-rates", cost_rates]


class Daemon:
    """A separate daemon instance (own config, own port) for one test class.

    config: a dict written to a JSON file in a temporary directory (data_dir
    defaults to the repository's data/), or None for the embedded default;
    prefix: a command that runs the daemon (e.g. taskset); env: variables added to its environment;
    start_timeout: seconds it may take to listen (its configured matrices load first);
    blas_threads: server.blas_threads when the config sets none (None: the daemon's default, "auto");
    by default TEST_BLAS_THREADS; cost_rates: --cost-rates (None: the daemon's default, calibrate), by
    default TEST_COST_RATES."""

    def __init__(self, config=None, args=(), listen="127.0.0.1:0", wait=True, prefix=(), env=None, start_timeout=HANG_S,
                 blas_threads=TEST_BLAS_THREADS, cost_rates=TEST_COST_RATES):
        self.dir = tempfile.TemporaryDirectory(prefix="embedscope-httptest-")
        self.log_path = os.path.join(self.dir.name, "daemon.log")
        cmd = [*prefix, BIN]
        if config is not None:
            config = dict(config)
            config.setdefault("data_dir", DATA)
            if blas_threads is not None:
                config["server"] = dict(config.get("server") or {})
                config["server"].setdefault("blas_threads", blas_threads)
            self.config_path = os.path.join(self.dir.name, "config.json")
            with open(self.config_path, "w") as f:
                json.dump(config, f)
            cmd += ["--config", self.config_path]
        elif blas_threads is not None and not any(str(a).startswith(("--config", "--blas-threads")) for a in args):
            cmd += ["--blas-threads", str(blas_threads)]   # the embedded default: the command line says it
        cmd += ["--listen", listen, *cost_rates_args(args, cost_rates), *args]
        env = daemon_env(env, tmpdir=self.dir.name)
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        if wait:  # else the caller knows the port (a log level that hides "listening on")
            self.port = self._wait_for_port(start_timeout)
            self.base = "http://127.0.0.1:%d" % self.port

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def _wait_for_port(self, timeout=HANG_S):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.log())
            if m:
                return int(m.group(1))
            if self.proc.poll() is not None:
                raise AssertionError("daemon exited %s at start:\n%s" % (self.proc.returncode, self.log()))
            time.sleep(0.02)
        self.proc.kill()
        raise AssertionError("daemon did not listen within %d s:\n%s" % (timeout, self.log()))

    def wait_ready(self, timeout=HANG_S):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if request("/readyz", base=self.base).status == 200:
                return
            time.sleep(0.05)
        raise AssertionError("daemon not ready after %d s:\n%s" % (timeout, self.log()))

    def stop(self, sig=signal.SIGTERM, timeout=HANG_S):
        """Send sig, wait; return the exit status. Kills (and fails) on a hang."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("daemon did not stop within %d s after %s" % (timeout, sig))
        return self.proc.returncode

    def close(self, sig=signal.SIGTERM):
        """Stop with sig and require a clean exit: status 0, no sanitizer report
        (AssertionError otherwise, with the end of the log)."""
        rc = self.stop(sig)
        log = self.log()
        if rc != 0 or SANITIZER_REPORT.search(log):
            message = keep_log(self.log_path, "daemon exited %s after %s" % (rc, sig))
            self.dir.cleanup()
            raise AssertionError(message)
        self.dir.cleanup()
        return log


def run_binary(*args, timeout=HANG_S, env=None):
    """(exit status, stdout, stderr) of the daemon binary run to completion; env: variables added."""
    p = subprocess.run([BIN, *args], capture_output=True, text=True, timeout=timeout,
                       env=daemon_env(env))
    return p.returncode, p.stdout, p.stderr
