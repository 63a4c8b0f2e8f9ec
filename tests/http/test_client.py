"""The Python client (clients/python) against the live daemon, never a stand-in: installed from the
checkout with pip (offline: --no-index, its in-tree build backend; `pip install -e` too), then every
method checked against the daemon's own answers; jobs (progress, the 202's Retry-After, cancel, Ctrl-C,
a failed job's problem, the listing) on a daemon of its own, with the job document's names checked
against `embedscope --dump-api`; transport failures (a timeout, a killed connection, a 503 with
Retry-After) typed and retried as documented; examples/tour.py run as it is. The tour of
docs/client.md runs in test_readme.py, with every Python snippet of the docs. Every analysis route as a
job, compared with its synchronous answer: test_client_routes.py."""
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.parse

import numpy as np

from httpkit import BASE, DATA, ROOT, Daemon, api_dump, get_json, request, settled_metrics

try:
    import pandas as pd
except ImportError:  # make test installs python3-pandas; without it the numpy paths still run
    pd = None

PYTHON = "/usr/bin/python3"
CLIENT = os.path.join(ROOT, "clients", "python")
WPE = "gpt2-small/wpe"
GENEROUS = 300
_target = tempfile.TemporaryDirectory(prefix="embedscope-client-")


def forget_embedscope():
    """Drop an embedscope imported from elsewhere (another test module's checkout import)."""
    for name in [m for m in sys.modules if m == "embedscope" or m.startswith("embedscope.")]:
        del sys.modules[name]


def setUpModule():
    """pip install ./clients/python into a fresh directory (no index: nothing is downloaded)
    and import it from there, not from the checkout."""
    p = subprocess.run([PYTHON, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--target",
                        _target.name, CLIENT], capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise AssertionError("pip install ./clients/python failed:\n" + p.stdout + p.stderr)
    sys.path.insert(0, _target.name)
    forget_embedscope()
    global embedscope, client_module
    import embedscope
    import embedscope.client as client_module
    assert embedscope.__file__.startswith(_target.name), embedscope.__file__


def tearDownModule():
    sys.path.remove(_target.name)
    forget_embedscope()
    _target.cleanup()


class Install(unittest.TestCase):
    def test_the_wheel_is_typed(self):
        self.assertTrue(os.path.exists(os.path.join(_target.name, "embedscope", "py.typed")))
        with open(os.path.join(_target.name, "embedscope", "client.py")) as f:
            self.assertIn("timeout: float", f.read())

    def test_editable_install_imports_the_checkout(self):
        """pip install -e (PEP 660, the in-tree backend's build_editable) in a venv: the package
        imported there is the checkout's own file, so an edit shows without reinstalling."""
        with tempfile.TemporaryDirectory(prefix="embedscope-venv-") as venv:
            subprocess.run([PYTHON, "-m", "venv", "--system-site-packages", "--without-pip", venv], check=True,
                           timeout=120)
            python = os.path.join(venv, "bin", "python")
            p = subprocess.run([PYTHON, "-m", "pip", "--python", python, "install", "--quiet", "--no-index",
                                "--no-deps", "-e", CLIENT], capture_output=True, text=True, timeout=300)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            p = subprocess.run([python, "-c", "import embedscope; print(embedscope.__file__)"], capture_output=True,
                               text=True, timeout=60, cwd=venv)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(p.stdout.strip(), os.path.join(CLIENT, "embedscope", "__init__.py"))


class Tables(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.es = embedscope.Client(BASE)
        cls.np = embedscope.Client(BASE, as_="numpy")

    @classmethod
    def tearDownClass(cls):
        cls.es.close()
        cls.np.close()

    def test_models_lists_every_matrix(self):
        doc = get_json("/v1/models")[1]
        ids = [x["id"] for m in doc["models"] for x in m["matrices"]]
        rows = self.es.models(as_="numpy")
        self.assertEqual([r["id"] for r in rows], ids)
        wpe = rows[ids.index(WPE)]
        self.assertEqual((wpe["rows"], wpe["cols"], wpe["model_axis"]), (1024, 768, "columns"))
        if pd is not None:
            df = self.es.models()
            self.assertEqual(list(df.index), ids)
            self.assertEqual(df.loc[WPE, "items"], 1024)

    def test_pca_is_the_daemons_answer_bit_for_bit(self):
        doc = get_json("/v1/models/gpt2-small/matrices/wpe/pca?k=3&rows=1:")[1]
        want = np.array([r["coords"] for r in doc["rows"]])
        got = self.np.pca(WPE, k=3, rows="1:")
        self.assertEqual(got.dtype, np.float64)
        np.testing.assert_array_equal(got, want)
        if pd is not None:
            df = self.es.pca(WPE, k=3, rows="1:")
            self.assertEqual((df.shape, df.index.name, df.index[0], df.index[-1]), ((1023, 3), "row", 1, 1023))
            np.testing.assert_array_equal(df.values, want)  # CSV's 17 digits parse back exactly
            var = self.es.pca(WPE, k=3, rows="1:", table="variance")
            np.testing.assert_array_equal(var.iloc[:, 0].values, doc["explained_variance_ratio"])

    def test_spectrum_cosine_capture_overlap(self):
        spec = self.np.spectrum(WPE, rows="1:")
        doc = get_json("/v1/models/gpt2-small/matrices/wpe/spectrum?rows=1:")[1]
        np.testing.assert_array_equal(spec[:, 0], doc["singular_values"])
        row = self.np.cosine(WPE, row=1, rows="0:31")
        x = np.load(os.path.join(DATA, "gpt2-small", "wpe.npy")).astype(np.float64)[0:31]
        cos = x @ x[1] / (np.linalg.norm(x, axis=1) * np.linalg.norm(x[1]))
        np.testing.assert_allclose(row, cos, rtol=0, atol=1e-12)
        full = self.np.cosine(WPE, mode="matrix", bins=0, rows="0:31")
        self.assertEqual(full.shape, (31, 31))
        np.testing.assert_allclose(full[1], cos, rtol=0, atol=1e-12)
        offsets = self.np.cosine(WPE, mode="offset")
        self.assertEqual(offsets.ndim, 2)
        cap = self.np.capture(WPE, "openai-gpt/wpe", k=30)
        raw = request("/v1/capture?a=gpt2-small/wpe&b=openai-gpt/wpe&k=30&format=npy").body
        np.testing.assert_array_equal(cap, np.load(io.BytesIO(raw)))
        ov = self.np.overlap(WPE, "openai-gpt/wpe")
        self.assertEqual(ov.ndim, 2)
        self.assertLessEqual(np.nanmax(np.abs(ov)), 1 + 1e-12)
        self.assertEqual(self.np.get("v1/capture", a=WPE, b="openai-gpt/wpe", k=30)["input"]["k"], 30)

    def test_alignment_and_attention(self):
        al = self.np.alignment(w="gpt2-small/h0.q", r=WPE, k=10, r_rows="1:", r_center="columns")
        self.assertTrue(np.all(np.isfinite(al)))
        at = self.np.attention(model="gpt2-small", layer=0, queries="1:64")
        self.assertEqual(at.shape[0], 12)  # one row per head


class Errors(unittest.TestCase):
    def test_problems_are_typed_and_carry_the_document(self):
        es = embedscope.Client(BASE)
        self.addCleanup(es.close)
        with self.assertRaises(embedscope.BadRequestError) as cm:
            es.pca(WPE, k=0)
        e = cm.exception
        self.assertEqual((e.status, e.param, e.slug), (400, "k", "invalid-parameter"))
        self.assertEqual(e.problem["status"], 400)
        self.assertRegex(e.request_id, r"^[0-9a-f]{32}$")
        with self.assertRaises(embedscope.NotFoundError) as cm:
            es.spectrum("gpt2-small/nope")
        self.assertEqual(cm.exception.problem["type"].rsplit("/", 1)[-1], "not-found")
        with self.assertRaises(embedscope.ConflictError):
            es.upload("gpt2-small/wpe", np.zeros((2, 2)))
        with self.assertRaises(embedscope.NotFoundError):
            es.job("0" * 20)
        with self.assertRaises(ValueError):
            es.pca("no-slash")
        for name in embedscope.__all__[1:]:
            self.assertTrue(issubclass(getattr(embedscope, name), embedscope.EmbedscopeError), name)


class Uploads(unittest.TestCase):
    def test_array_file_generator_and_delete(self):
        es = embedscope.Client(BASE, as_="numpy")
        self.addCleanup(es.close)
        rng = np.random.default_rng(7)
        x = rng.standard_normal((40, 16))
        try:
            doc = es.upload("clienttest/x", x)
            self.assertEqual(doc["shape"], [40, 16])
            np.testing.assert_array_equal(es.rows("clienttest/x"), x)
            s = es.spectrum("clienttest/x", center="none")
            np.testing.assert_allclose(s[:, 0], np.linalg.svd(x, compute_uv=False), rtol=1e-12)
            with tempfile.NamedTemporaryFile(suffix=".npy") as f:
                np.save(f, x[:10].astype(np.float32))
                f.flush()
                doc = es.upload("clienttest/f", f.name)
            self.assertEqual((doc["shape"], doc["dtype"]), ([10, 16], "<f4"))
            doc = es.upload("clienttest/pe", {"generator": "sinusoidal", "n_positions": 32, "d_model": 8})
            self.assertEqual(doc["shape"], [32, 8])
            ids = [r["id"] for r in es.models()]
            self.assertIn("clienttest/pe", ids)
        finally:
            for name in ("x", "f", "pe"):
                try:
                    es.delete("clienttest/" + name)
                except embedscope.NotFoundError:
                    pass
        self.assertNotIn("clienttest/x", [r["id"] for r in es.models()])
        with self.assertRaises(embedscope.NotFoundError):
            es.delete("clienttest/x")

    def test_safetensors_file(self):
        es = embedscope.Client(BASE, as_="numpy")
        self.addCleanup(es.close)
        x = np.arange(12, dtype="<f4").reshape(3, 4)
        header = json.dumps({"w": {"dtype": "F32", "shape": [3, 4], "data_offsets": [0, x.nbytes]}}).encode()
        with tempfile.NamedTemporaryFile(suffix=".safetensors") as f:
            f.write(len(header).to_bytes(8, "little") + header + x.tobytes())
            f.flush()
            try:
                doc = es.upload("clienttest/st", f.name, tensor="w")
                self.assertEqual(doc["shape"], [3, 4])
                np.testing.assert_array_equal(es.rows("clienttest/st"), x.astype(np.float64))
            finally:
                es.delete("clienttest/st")


class Contract(unittest.TestCase):
    def test_the_job_names_the_client_reads_are_the_daemons(self):
        """Every member and state of the job document the client reads, against jobdoc.c's table as
        `--dump-api` exports it (the client cannot read a name the daemon does not write)."""
        job = api_dump()["job"]
        c = client_module
        fields = {f["name"]: f for f in job["fields"]}
        self.assertEqual(c.JOB_LISTING, job["listing"])
        self.assertEqual((fields[c.JOB_ID]["type"], fields[c.JOB_ID]["states"]), ("string", job["states"]))
        self.assertEqual((fields[c.JOB_URL]["type"], fields[c.JOB_URL]["states"]), ("string", job["states"]))
        self.assertEqual((fields[c.JOB_STATE]["enum"], fields[c.JOB_STATE]["states"]), (job["states"], job["states"]))
        self.assertEqual(set(c.JOB_RUNNING) | set(c.JOB_FINISHED), set(job["states"]))
        self.assertEqual(list(c.JOB_FINISHED), job["finished"])
        self.assertEqual((fields[c.JOB_RESULT]["type"], fields[c.JOB_RESULT]["states"]), ("string", ["done"]))
        self.assertEqual((fields[c.JOB_ERROR]["schema"], fields[c.JOB_ERROR]["states"]), ("problem", ["failed"]))
        progress = {f["name"]: f for f in fields[c.JOB_PROGRESS]["members"]}
        self.assertEqual(progress[c.JOB_FRACTION]["type"], "number")
        self.assertEqual(progress[c.JOB_PASS]["type"], "string")
        # and spelled nowhere else in the client (it once read status, fraction and problem at the top)
        with open(os.path.join(CLIENT, "embedscope", "client.py")) as f:
            source = f.read()
        for name in (c.JOB_LISTING, c.JOB_PROGRESS, c.JOB_FRACTION, c.JOB_PASS, c.JOB_RESULT, c.JOB_ERROR):
            self.assertEqual(source.count('"%s"' % name), 1, name)


JSON_TYPES = {"string": str, "number": (int, float), "integer": int, "boolean": bool, "object": dict}


def job_document_problems(doc, fields=None, state=None, path=""):
    """How a job document the daemon sent differs from the dump's job table (empty: it agrees): exactly
    the members present in its state, in the table's order, each of its type (null only where nullable),
    among its values; a problem document where the table says so."""
    job = api_dump()["job"]
    fields = job["fields"] if fields is None else fields
    state = doc.get("state") if state is None else state
    if state not in job["states"]:
        return ["%sstate %r is none of %s" % (path, state, job["states"])]
    want = [f["name"] for f in fields if state in f["states"]]
    if list(doc) != want:
        return ["%s%s: members %s, the table says %s" % (path, state, list(doc), want)]
    problems = []
    for f in fields:
        if f["name"] not in doc:
            continue
        v, where = doc[f["name"]], path + f["name"]
        if v is None:
            if not f["nullable"]:
                problems.append("%s is null" % where)
            continue
        if not isinstance(v, JSON_TYPES[f["type"]]) or (f["type"] != "boolean" and isinstance(v, bool)):
            problems.append("%s = %r is no %s" % (where, v, f["type"]))
        elif "enum" in f and v not in f["enum"]:
            problems.append("%s = %r is none of %s" % (where, v, f["enum"]))
        elif f.get("members"):
            problems += job_document_problems(v, f["members"], state, where + ".")
        elif f.get("schema") == "problem" and not {"type", "title", "status", "detail"} <= set(v):
            problems.append("%s is no problem document: %s" % (where, v))
    return problems


# A matrix whose periodicity takes seconds of one compute thread (a direct periodogram per component).
JOBS_CONFIG = {"limits": {"max_generated_elements": 1 << 26, "request_timeout_s": 5, "sync_seconds": 3600, "job_ttl_s": 600},
               "models": {"b": {"matrices": {"g": {"generator": "gaussian", "rows": 4096, "cols": 768, "seed": 1},
                                             "same": {"view": "g", "rows": [0, 4096]},
                                             "s": {"generator": "gaussian", "rows": 300, "cols": 40, "seed": 2}}}}}
HEAVY = "/v1/models/b/matrices/g/periodicity?k=60&rows=0:4096"


class Jobs(unittest.TestCase):
    """Jobs on a daemon of its own (one compute thread; request_timeout_s 5 for a failed job)."""

    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon(JOBS_CONFIG, args=("--compute-threads", "1"), start_timeout=GENEROUS)
        cls.daemon.wait_ready(GENEROUS)
        cls.base = cls.daemon.base
        cls.states_seen = set()

    def setUp(self):
        settled_metrics(self.base, timeout=GENEROUS)

    def client(self, **kw):
        es = embedscope.Client(self.base, timeout=GENEROUS, **kw)
        self.addCleanup(es.close)
        self.sleeps = []
        es.sleep = lambda s: (self.sleeps.append(s), time.sleep(min(s, 0.05)))
        return es

    def assert_job_documents(self, docs):
        for doc in docs:
            self.assertEqual(job_document_problems(doc), [], doc)
            self.states_seen.add(doc["state"])

    @classmethod
    def tearDownClass(cls):
        cls.daemon.close()
        # the finished states' documents were checked against the dump (queued and running: Transport)
        assert {"done", "failed", "cancelled"} <= cls.states_seen, cls.states_seen

    def test_a_job_is_followed_with_its_progress_to_the_synchronous_answer(self):
        shown = []
        es = self.client(respond_async=True, progress=shown.append, as_="numpy")
        got = es.pca("b/s", k=5)
        sync = request("/v1/models/b/matrices/s/pca?k=5&format=npy", base=self.base,
                       headers={"Prefer": "wait=%d" % GENEROUS})
        self.assertEqual(sync.status, 200)
        self.assertEqual(got.tobytes(), np.load(io.BytesIO(sync.body)).tobytes())
        self.assertIn(shown[0]["state"], ("queued", "running", "done"))  # the 202's body (a fast job may be done)
        self.assertEqual((shown[-1]["state"], shown[-1]["progress"]["fraction"]), ("done", 1.0))
        self.assert_job_documents(shown)
        fractions = [s["progress"]["fraction"] for s in shown]
        self.assertEqual(fractions, sorted(fractions))
        self.assertEqual(shown[-1]["result"], "/v1/models/b/matrices/s/pca?k=5&format=npy")
        # the same through pandas (CSV) and the whole JSON document
        if pd is not None:
            df = es.pca("b/s", k=5, as_="pandas")
            np.testing.assert_array_equal(df.values, got)
        doc = es.get("v1/models/b/matrices/s/pca", k=5)
        self.assertEqual([r["coords"] for r in doc["rows"]], got.tolist())

    def test_jobs_lists_the_running_requests_and_cancel_stops_one(self):
        r = request(HEAVY, base=self.base, headers={"Prefer": "respond-async"})
        self.assertEqual(r.status, 202)
        job_id = r.json()["id"]
        es = self.client()
        listed = es.jobs()
        self.assert_job_documents(listed)
        self.assertIn(job_id, [j["id"] for j in listed])
        running = es.jobs(state=("queued", "running"))
        self.assertEqual([j["id"] for j in running if j["id"] == job_id], [job_id])
        self.assertEqual(es.job(job_id)["url"], HEAVY)
        es.cancel(job_id)
        self.assertEqual(es.job(job_id)["state"], "cancelled")
        self.assert_job_documents([r.json(), es.job(job_id)])
        self.assertNotIn(job_id, [j["id"] for j in es.jobs(state="running")])

    def test_a_job_cancelled_while_waiting_raises(self):
        def cancel(job):
            if job["state"] in ("queued", "running"):
                request("/v1/jobs/" + job["id"], method="DELETE", base=self.base)
        es = self.client(respond_async=True, progress=cancel)
        with self.assertRaises(embedscope.JobCancelledError) as cm:
            es.analysis("periodicity", "b/g", k=60, rows="0:4096")
        self.assertEqual(cm.exception.problem["job"]["state"], "cancelled")
        self.assertEqual(self.sleeps, [1])  # the 202's Retry-After, before the poll that saw it cancelled

    def test_ctrl_c_while_waiting_cancels_the_job(self):
        seen = []

        def interrupt(job):
            seen.append(job)
            raise KeyboardInterrupt
        es = self.client(respond_async=True, progress=interrupt)
        with self.assertRaises(KeyboardInterrupt):
            es.analysis("periodicity", "b/g", k=59, rows="0:4096")
        self.assertEqual(request("/v1/jobs/" + seen[0]["id"], base=self.base).json()["state"], "cancelled")
        keep = self.client(respond_async=True, progress=interrupt, cancel_on_interrupt=False)
        with self.assertRaises(KeyboardInterrupt):
            keep.analysis("periodicity", "b/g", k=58, rows="0:4096")
        self.assertIn(request("/v1/jobs/" + seen[1]["id"], base=self.base).json()["state"], ("queued", "running"))
        request("/v1/jobs/" + seen[1]["id"], method="DELETE", base=self.base)

    def test_a_failed_job_raises_its_problem_typed(self):
        """A job joins the computation of an identical synchronous request, which its deadline
        (request_timeout_s) abandons: the job fails with the daemon's 503 "ask again" problem, which
        the client raises as ServiceUnavailableError carrying that document. The daemon is stopped
        (SIGSTOP) past the deadline once the job has joined, so that the deadline passes during the
        computation whatever the machine's speed; sync_seconds is long, so the synchronous request
        is not turned into a job (which has no deadline) when its window passes during the stop."""
        heavy = HEAVY.replace("k=60", "k=57")
        out = {}
        t = threading.Thread(target=lambda: out.setdefault("sync", request(heavy, base=self.base, timeout=GENEROUS)))
        t.start()
        deadline = time.monotonic() + GENEROUS
        while settled_running(self.base) == 0:
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.01)

        def stop_past_the_deadline(job):
            if job["state"] in ("queued", "running") and not out.get("stopped"):
                out["stopped"] = True
                stop(self.daemon.proc)
                time.sleep(JOBS_CONFIG["limits"]["request_timeout_s"] + 0.5)
                self.daemon.proc.send_signal(signal.SIGCONT)
        es = self.client(respond_async=True, progress=stop_past_the_deadline)
        try:
            with self.assertRaises(embedscope.ServiceUnavailableError) as cm:
                es.get("v1/models/b/matrices/g/periodicity", k=57, rows="0:4096")  # the same request, in JSON
        finally:
            self.daemon.proc.send_signal(signal.SIGCONT)
            t.join()
        self.assertEqual(out["sync"].status, 504)
        e = cm.exception
        self.assertEqual((e.status, e.slug, e.problem["status"]), (503, "server-busy", 503))
        self.assertIn("ask again", e.detail)
        failed = request(urllib.parse.urlsplit(e.url).path, base=self.base).json()
        self.assertEqual((failed["state"], failed["error"]), ("failed", e.problem))
        self.assert_job_documents([failed])


def stop(proc):
    """SIGSTOP proc and wait until every thread of it is stopped (the signal takes effect
    asynchronously: a busy thread may first answer one more request)."""
    proc.send_signal(signal.SIGSTOP)
    deadline = time.monotonic() + GENEROUS
    task = "/proc/%d/task" % proc.pid
    while True:
        states = []
        for tid in os.listdir(task):
            try:
                with open(os.path.join(task, tid, "stat")) as f:
                    states.append(f.read().rsplit(")", 1)[1].split()[0])
            except OSError:  # a thread that ended meanwhile
                pass
        if states and all(st in ("T", "t") for st in states):
            return
        assert time.monotonic() < deadline, "process %d not stopped: %s" % (proc.pid, states)
        time.sleep(0.005)


def settled_running(base):
    """embedscope_compute_jobs_running: computations on a compute thread now."""
    text = request("/metrics", base=base).body.decode()
    return float(text.split("\nembedscope_compute_jobs_running ", 1)[1].split()[0])


class Transport(unittest.TestCase):
    """What no answer looks like: typed, and retried as documented (real daemons, stopped or killed)."""

    def client(self, base, **kw):
        es = embedscope.Client(base, **kw)
        self.addCleanup(es.close)
        self.sleeps = []
        es.sleep = self.sleeps.append
        return es

    def test_a_timeout_and_a_killed_connection_are_typed(self):
        d = Daemon({"models": {"b": {"matrices": {"s": JOBS_CONFIG["models"]["b"]["matrices"]["s"]}}}})
        try:
            es = self.client(d.base, timeout=0.5, retries=2)
            # the answered calls through a client with a generous timeout: a loaded machine can take 0.5 s to
            # answer a running daemon (a clean-clone run timed out here); only the stopped daemon gets 0.5 s
            calm = self.client(d.base, timeout=GENEROUS, retries=2)
            self.assertEqual(calm.get("v1")["service"], "embedscope")
            stop(d.proc)  # accepts connections (the kernel's backlog), answers nothing
            try:
                with self.assertRaises(embedscope.ClientTimeoutError) as cm:
                    es.get("v1")
            finally:
                d.proc.send_signal(signal.SIGCONT)
            e = cm.exception
            self.assertIsInstance(e, embedscope.TimeoutError)  # `except embedscope.TimeoutError` catches both
            self.assertIsInstance(e, embedscope.NetworkError)
            self.assertIsNone(e.status)
            self.assertEqual(self.sleeps, [])  # a timeout is not retried: the daemon may still be computing
            self.assertEqual(calm.get("v1")["service"], "embedscope")
            # a connection the daemon holds when it is killed: cut, then refused on each retry
            slow = self.client(d.base, timeout=GENEROUS, retries=2)
            stop(d.proc)
            out = {}

            def call():
                try:
                    slow.get("v1/models")
                except Exception as exc:  # noqa: BLE001 - the test asserts its type
                    out["error"] = exc
            t = threading.Thread(target=call)
            t.start()
            time.sleep(0.3)  # either way (the request sent or not yet) the client must get a NetworkError
            d.proc.kill()
            d.proc.wait()
            t.join(GENEROUS)
            self.assertFalse(t.is_alive())
            self.assertIsInstance(out.get("error"), embedscope.NetworkError, out)
            self.assertNotIsInstance(out["error"], embedscope.ClientTimeoutError)
            self.assertIsNotNone(out["error"].__cause__)
            self.assertEqual(len(self.sleeps), 2)  # retried twice (a GET can be sent again), then raised
        finally:
            if d.proc.poll() is None:
                d.proc.kill()
                d.proc.wait()
            d.dir.cleanup()

    def test_a_busy_daemon_is_retried_after_its_retry_after(self):
        """One compute thread, a queue of one: a job running and one queued, and the next computing
        request answers 503 server-busy with Retry-After: 1. The client waits that long and asks
        again, at most `retries` times; when the queue frees meanwhile, it gets the answer."""
        d = Daemon(JOBS_CONFIG, args=("--compute-threads", "1", "--queue-limit", "1"), start_timeout=GENEROUS)
        try:
            d.wait_ready(GENEROUS)
            busy = []
            for k in (60, 59):
                r = request(HEAVY.replace("k=60", "k=%d" % k), base=d.base, headers={"Prefer": "respond-async"})
                self.assertEqual(r.status, 202, r.body[:300])
                busy.append(r.headers["Location"])
                deadline = time.monotonic() + GENEROUS
                while settled_running(d.base) == 0:  # the first one running, not queued, before the second
                    self.assertLess(time.monotonic(), deadline)
                    time.sleep(0.01)
            # the job documents of a running job and of one queued behind it, against the dump
            docs = [request(location, base=d.base).json() for location in busy]
            while docs[0]["state"] != "running":
                self.assertLess(time.monotonic(), deadline)
                docs[0] = request(busy[0], base=d.base).json()
            self.assertEqual([doc["state"] for doc in docs], ["running", "queued"])
            for doc in docs:
                self.assertEqual(job_document_problems(doc), [], doc)
            es = self.client(d.base, retries=2, as_="numpy")
            with self.assertRaises(embedscope.ServiceUnavailableError) as cm:
                es.pca("b/s", k=3)
            self.assertEqual((cm.exception.retry_after, cm.exception.slug), (1, "server-busy"))
            self.assertEqual(len(self.sleeps), 2)
            self.assertTrue(all(1 <= s <= 1.1 for s in self.sleeps), self.sleeps)  # Retry-After, +10 % jitter
            # bounded: a Retry-After beyond what is left of max_retry_wait is not waited for
            impatient = self.client(d.base, retries=5, max_retry_wait=0.5)
            with self.assertRaises(embedscope.ServiceUnavailableError):
                impatient.pca("b/s", k=3)
            self.assertEqual(self.sleeps, [])

            def free_the_queue(seconds):
                self.sleeps.append(seconds)
                for location in busy:
                    request(location, method="DELETE", base=d.base)
                settled_metrics(d.base, timeout=GENEROUS)
            self.sleeps = []
            es.sleep = free_the_queue
            got = es.pca("b/s", k=3)
            self.assertEqual(len(self.sleeps), 1)
            want = request("/v1/models/b/matrices/s/pca?k=3&format=npy", base=d.base).body
            self.assertEqual(got.tobytes(), np.load(io.BytesIO(want)).tobytes())

        finally:
            d.close()


    def test_too_many_jobs_is_retried_after_its_retry_after(self):
        """A client holding limits.max_jobs_per_client (1) jobs gets 429 too-many-jobs with Retry-After
        for a new one: the client waits that long (within max_retry_wait) and asks again; when the job it
        held is gone meanwhile (cancelled, expired: job_ttl_s 1), the new one is accepted and followed."""
        config = dict(JOBS_CONFIG, limits=dict(JOBS_CONFIG["limits"], max_jobs_per_client=1, job_ttl_s=1))
        d = Daemon(config, args=("--compute-threads", "1"), start_timeout=GENEROUS)
        try:
            d.wait_ready(GENEROUS)
            held = request(HEAVY, base=d.base, headers={"Prefer": "respond-async"})
            self.assertEqual(held.status, 202, held.body[:300])
            impatient = self.client(d.base, respond_async=True, max_retry_wait=0)
            with self.assertRaises(embedscope.TooManyRequestsError) as cm:
                impatient.pca("b/s", k=3)
            self.assertEqual((cm.exception.slug, self.sleeps), ("too-many-jobs", []))
            self.assertGreaterEqual(cm.exception.retry_after, 1)

            def release(seconds):
                self.sleeps.append(seconds)
                if len(self.sleeps) == 1:  # the 429's wait (later ones: the new job's polls)
                    request(held.headers["Location"], method="DELETE", base=d.base)
                    time.sleep(seconds + 1)  # the cancelled job expires (job_ttl_s 1 after it finished)
                else:
                    time.sleep(min(seconds, 0.05))
            es = self.client(d.base, respond_async=True, as_="numpy", retries=2)
            es.sleep = release
            got = es.pca("b/s", k=3)
            self.assertLessEqual(self.sleeps[0], 1.1 * cm.exception.retry_after)
            want = request("/v1/models/b/matrices/s/pca?k=3&format=npy", base=d.base).body
            self.assertEqual(got.tobytes(), np.load(io.BytesIO(want)).tobytes())
        finally:
            d.close()


@unittest.skipIf(pd is None, "examples/tour.py needs pandas (python3-pandas)")
class Tour(unittest.TestCase):
    def test_examples_tour_runs(self):
        env = dict(os.environ, EMBEDSCOPE_URL=BASE, PYTHONPATH=_target.name)
        p = subprocess.run([PYTHON, os.path.join(ROOT, "examples", "tour.py")], capture_output=True, text=True,
                           timeout=300, env=env, cwd=ROOT)
        self.assertEqual(p.returncode, 0, p.stdout[-2000:] + p.stderr[-2000:])
        self.assertIn("helix", p.stdout)


if __name__ == "__main__":
    unittest.main()
