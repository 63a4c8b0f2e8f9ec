"""The OpenBLAS kernels and threads the daemon reports and chooses (docs/operations.md, "BLAS kernels
and threads"): /v1's "blas", the embedscope_blas_info metric and the start-up log; the restart with
OPENBLAS_CORETYPE when the library picked generic kernels on a CPU with AVX2 or AVX-512 (simulated
here with the test hook ES_TEST_FAKE_CORENAME), the fallback when the self-test fails after it
(ES_TEST_BLAS_SELF_TEST_FAIL), a user's OPENBLAS_CORETYPE that always wins; the "auto" thread
budget under taskset.

Run by tests/http/run.sh against the embedded default (EMBEDSCOPE_URL); the other cases start
their own small daemons."""
import os
import re
import time
import unittest

from httpkit import Daemon, get_json, metrics, request

SMALL_MODEL = {"m": {"matrices": {"pe": {"generator": "sinusoidal", "n_positions": 16, "d_model": 8}}}}
GAUSSIAN = {"m": {"matrices": {"g": {"generator": "gaussian", "rows": 2048, "cols": 256, "seed": 3}}}}
RESTART = "restarting with OPENBLAS_CORETYPE="
SPECTRUM = "/v1/models/m/matrices/g/spectrum?method=exact"
# top-k's passes (Gram matrix, X V, U^T X) in fixed parts: the same bits on one core or all
TOPK = "/v1/models/m/matrices/g/pca?k=3&method=topk"
# 8192 x 64: two chunks of the parallel TSQR, whose result does not depend on the thread count
TALL = {"m": {"matrices": {"g": {"generator": "gaussian", "rows": 8192, "cols": 64, "seed": 5}}}}


def blas_of(base=None):
    r, doc = get_json("/v1", base=base) if base else get_json("/v1")
    assert r.status == 200, r.body
    return doc["blas"]


def wait_idle(base, seconds=120):
    """Until the daemon computes nothing: "auto" gives a computation every core only when it runs alone."""
    deadline = time.monotonic() + seconds
    while True:
        m = metrics(base)
        if m["embedscope_compute_jobs_running"] == 0 and m["embedscope_compute_queue_depth"] == 0:
            return
        assert time.monotonic() < deadline, "the compute pool stayed busy"
        time.sleep(0.05)


def start(env, models=SMALL_MODEL, prefix=()):
    """A small daemon with env added; (its /v1 "blas", its log, its process id) once it listens."""
    daemon = Daemon({"models": models}, env=env, prefix=prefix)
    try:
        return blas_of(daemon.base), daemon.log(), daemon.proc.pid
    finally:
        daemon.close()


class Report(unittest.TestCase):
    """What a daemon with the shipped thread policy ("auto": no server.blas_threads, no --blas-threads) says
    about its kernels and threads. A daemon of its own: the runner's shared daemons compute with one
    OpenBLAS thread (--blas-threads 1, httpkit.TEST_BLAS_THREADS)."""

    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon({"models": SMALL_MODEL}, blas_threads=None)

    @classmethod
    def tearDownClass(cls):
        cls.daemon.close()

    def test_v1_names_the_kernels(self):
        b = blas_of(self.daemon.base)
        self.assertRegex(b["version"], r"^\d+\.\d+\.\d+")
        self.assertTrue(b["config"].startswith("OpenBLAS " + b["version"]), b["config"])
        self.assertIn(b["parallel"], ("sequential", "pthreads", "openmp"))
        self.assertTrue(b["core"])
        self.assertIn(b["kernels"], ("baseline", "avx", "avx2", "avx512"))
        self.assertIn(b["cpu"]["isa"], ("baseline", "avx", "avx2", "avx512"))
        self.assertEqual(b["self_test"]["passed"], True)
        self.assertLess(b["self_test"]["max_error"], 1e-12)
        self.assertEqual(b["threads"]["policy"], "auto")
        self.assertEqual(b["threads"]["cores"], len(os.sched_getaffinity(0)))
        if b["cpu"]["isa"] in ("avx2", "avx512") and b["coretype_source"] != "user":
            self.assertIn(b["kernels"], ("avx2", "avx512"), "generic kernels on a CPU with " + b["cpu"]["isa"])
            self.assertNotIn("warning", b)

    def test_info_metric_matches_v1(self):
        b = blas_of(self.daemon.base)
        text = request("/metrics", base=self.daemon.base).body.decode()
        labels = ('version="%s",core="%s",library_core="%s",kernels="%s",coretype_source="%s",cpu_isa="%s",'
                  'parallel="%s",self_test="passed"' % (b["version"], b["core"], b.get("library_core", ""),
                                                        b["kernels"], b["coretype_source"], b["cpu"]["isa"],
                                                        b["parallel"]))
        self.assertIn("embedscope_blas_info{%s} 1\n" % labels, text)
        m = metrics(self.daemon.base)
        self.assertGreaterEqual(m["embedscope_blas_threads"], 1)
        self.assertLessEqual(m["embedscope_blas_threads"], m["embedscope_blas_threads_budget"])


class Kernel(unittest.TestCase):
    """The restart with better kernels, its self-test fallback, the user's choice."""

    @classmethod
    def setUpClass(cls):
        cls.isa = blas_of()["cpu"]["isa"]
        cls.best = {"avx512": "SkylakeX", "avx2": "Haswell"}.get(cls.isa)

    def test_generic_pick_is_replaced(self):
        if not self.best:
            self.skipTest("this CPU has no AVX2: the generic kernels are kept")
        b, log, _ = start({"ES_TEST_FAKE_CORENAME": "Prescott"})
        self.assertEqual((b["core"], b["library_core"], b["coretype_source"]), (self.best, "Prescott", "embedscope"))
        self.assertTrue(b["self_test"]["passed"])
        self.assertNotIn("warning", b)
        self.assertEqual(log.count(RESTART), 1, log)
        self.assertIn("picked its Prescott kernels on a CPU with %s: %s%s" % (self.isa, RESTART, self.best), log)
        self.assertEqual(log.count("embedscope 0."), 2, "one start, one restart")

    def test_failed_self_test_falls_back_to_the_library(self):
        if not self.best:
            self.skipTest("this CPU has no AVX2: nothing is forced")
        b, log, _ = start({"ES_TEST_FAKE_CORENAME": "Prescott", "ES_TEST_BLAS_SELF_TEST_FAIL": "1"})
        self.assertEqual(b["coretype_source"], "library")
        self.assertFalse(b["self_test"]["passed"])
        self.assertEqual(b["warning"], "the BLAS self-test failed with OPENBLAS_CORETYPE=%s; running OpenBLAS's own "
                                       "choice %s" % (self.best, b["core"]))
        self.assertEqual(log.count(RESTART), 1, log)  # once forward, once back: no loop
        self.assertIn("the BLAS self-test failed with OPENBLAS_CORETYPE=%s" % self.best, log)
        self.assertIn("restarting with OpenBLAS's own choice", log)
        self.assertEqual(log.count("embedscope 0."), 3, "start, forced restart, fallback restart")

    def test_user_coretype_wins(self):
        b, log, _ = start({"OPENBLAS_CORETYPE": "Prescott", "ES_TEST_FAKE_CORENAME": "Prescott"})
        self.assertEqual((b["core"], b["kernels"], b["coretype_source"]), ("Prescott", "baseline", "user"))
        self.assertNotIn(RESTART, log)
        self.assertTrue(b["self_test"]["passed"])  # the generic kernels are slow, not wrong
        if self.best:
            self.assertEqual(b["warning"], "OpenBLAS runs its Prescott (baseline) kernels on a CPU with %s because "
                                           "OPENBLAS_CORETYPE says so" % self.isa)
            self.assertIn("warn  " + b["warning"], log)

    def test_library_choice_kept(self):
        b, log, _ = start({})
        self.assertNotIn(RESTART, log)
        self.assertIn(b["coretype_source"], ("library", "user"))
        self.assertRegex(log, r"OpenBLAS \S+ \(\w+\), core %s \(" % re.escape(b["core"]))


class Threads(unittest.TestCase):
    """blas_threads "auto": the budget is the cores the daemon may use; a computation never runs
    with more BLAS threads than that."""

    def test_one_core_under_taskset(self):
        cpu = str(min(os.sched_getaffinity(0)))
        daemon = Daemon({"models": GAUSSIAN}, prefix=("taskset", "-c", cpu), blas_threads=None)
        try:
            self.assertEqual(blas_of(daemon.base)["threads"], {"policy": "auto", "cores": 1})
            r = request(SPECTRUM, base=daemon.base)
            self.assertEqual(r.status, 200, r.body)
            self.assertEqual(r.json()["input"]["matrix"]["blas"], {"core": blas_of(daemon.base)["core"], "threads": 1})
            m = metrics(daemon.base)
            self.assertEqual((m["embedscope_blas_threads_budget"], m["embedscope_blas_threads"]), (1, 1))
        finally:
            daemon.close()

    def test_answers_say_what_they_ran_on_and_keep_their_etag(self):
        """The same request on a daemon with every core and on one with one core: each answer names
        the core and its threads (a lone computation gets every core), the ETag is the same (the thread
        count is in neither the ETag nor a cache key) and so is every number (the parallel TSQR and
        top-k's passes do not depend on the thread count); only input.matrix.blas.threads may differ."""
        cores = len(os.sched_getaffinity(0))
        replies = {}
        for prefix in ((), ("taskset", "-c", str(min(os.sched_getaffinity(0))))):
            daemon = Daemon({"models": TALL}, prefix=prefix, blas_threads=None)
            try:
                for path in (SPECTRUM, TOPK):  # one after the other: each computation alone
                    wait_idle(daemon.base)  # the warm list, or the last request's job still closing
                    r = request(path, base=daemon.base)
                    self.assertEqual(r.status, 200, r.body)
                    replies.setdefault(path, []).append((r, blas_of(daemon.base)["core"]))
            finally:
                daemon.close()
        for path, ((full, core_full), (one, core_one)) in replies.items():
            with self.subTest(path=path):
                docs = [full.json(), one.json()]
                self.assertEqual([d["input"]["matrix"]["blas"] for d in docs],
                                 [{"core": core_full, "threads": cores}, {"core": core_one, "threads": 1}])
                self.assertEqual(full.header("ETag"), one.header("ETag"))
                for d in docs:
                    del d["input"]["matrix"]["blas"]
                    d["input"].pop("cost", None)  # each daemon's own calibration at its start
                if path == SPECTRUM:
                    self.assertEqual(docs[0], docs[1])
                else:  # top-k: its passes are the same bits, its small k x k steps OpenBLAS's (rounding)
                    self.assert_topk_close(*docs)

    def assert_topk_close(self, a, b):
        for d in (a, b):
            self.assertTrue(d["input"]["matrix"].pop("certificate")["sigma_bound"] < 1e-10)
            self.assertLess(d["input"]["matrix"].pop("orthogonality_error"), 1e-13)
        evr = [x - y for x, y in zip(a["explained_variance_ratio"], b["explained_variance_ratio"])]
        self.assertLess(max(map(abs, evr)), 1e-13)
        coords = [abs(x - y) for ra, rb in zip(a["rows"], b["rows"]) for x, y in zip(ra["coords"], rb["coords"])]
        scale = max(abs(x) for r in a["rows"] for x in r["coords"])
        self.assertLess(max(coords), 1e-10 * scale)  # vectors move by eps s_0 / gap
        for d in (a, b):
            del d["explained_variance_ratio"], d["cumulative"], d["rows"]
        self.assertEqual(a, b)

    def test_fixed_count(self):
        daemon = Daemon({"server": {"blas_threads": 1}, "models": SMALL_MODEL})
        try:
            self.assertEqual(blas_of(daemon.base)["threads"], {"policy": "fixed", "per_computation": 1})
        finally:
            daemon.close()

    def test_command_line_overrides_the_configuration(self):
        """--blas-threads (the runner's shared daemons: 1) wins over server.blas_threads, both ways."""
        for config, arg, want in ((None, "1", {"policy": "fixed", "per_computation": 1}),
                                  (1, "auto", {"policy": "auto", "cores": len(os.sched_getaffinity(0))})):
            with self.subTest(config=config, arg=arg):
                server = {"blas_threads": config} if config else {}
                daemon = Daemon({"server": server, "models": SMALL_MODEL}, args=("--blas-threads", arg), blas_threads=None)
                try:
                    self.assertEqual(blas_of(daemon.base)["threads"], want)
                    self.assertIn("x blas threads %s" % ("1" if arg == "1" else "auto"), daemon.log())
                finally:
                    daemon.close()


if __name__ == "__main__":
    unittest.main()
