"""Every parameter's documented default, sent explicitly, gives the answer of leaving it out (issue 28 §2).
Swagger UI's "Try it out" at /docs sends every parameter with its default from openapi.yaml, which is made
from `embedscope --dump-api`; the daemon used to refuse its own defaults of conditional parameters
(`average_order` without `average`, `bins` of cosine without mode=matrix, compare's parameters of another
analysis). A conditional parameter given its default is accepted and ignored; any other value still names
the rule. Its own daemon (the shipped configuration, one OpenBLAS thread: one_blas_thread_config), so that the
two answers, computed apart, are compared to the bit."""
import json
import os
import time
import unittest
import urllib.parse

from httpkit import DATA, ROOT, SYNC, Daemon, ProblemAssertions, api_dump, example_path, metrics, request


def spelled(value):
    """A default as Swagger UI writes it in a query (numbers as JSON writes them)."""
    return value if isinstance(value, str) else json.dumps(value)


def without_input(body):
    doc = json.loads(body)
    doc.pop("input", None)  # the echo of what was sent
    return doc


def one_blas_thread_config(blas_threads=1):
    """The shipped configuration (the examples' matrices) without its warm list, with one OpenBLAS thread per
    computation and a generated matrix for a long computation beside. OpenBLAS 0.3.21's thread count is the
    process's, and its dgemm and dgeqrf round differently with 1 and 2 threads (measured: dgemm 10 x 96 x
    768, dgeqrf 768 x 64): under blas_threads "auto" a computation gets cores / computations running, so the
    last bits of an answer depend on what runs beside it (docs/operations.md, "BLAS kernels and threads"). A fixed count
    of one makes every answer bit-identical, which these tests compare."""
    with open(os.path.join(ROOT, "config", "embedscope.json")) as f:
        config = json.load(f)
    config.pop("warm", None)
    config["data_dir"] = DATA
    config["server"] = dict(config["server"], blas_threads=blas_threads)
    config["models"]["b"] = {"matrices": {"g": {"generator": "gaussian", "rows": 4096, "cols": 768, "seed": 1}}}
    return config


def spelt_out(a):
    """An analysis' example query, plain and with every documented default not given spelt out."""
    query = a["examples"]["query"]
    given = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
    defaults = {p["name"]: spelled(p["default"]) for p in a["params"] if "default" in p and p["name"] not in given}
    return query, query + "&" + urllib.parse.urlencode(defaults), defaults


class DocumentedDefaults(ProblemAssertions):
    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon(one_blas_thread_config(), blas_threads=None)
        cls.base = cls.daemon.base

    @classmethod
    def tearDownClass(cls):
        cls.daemon.close()

    def test_every_default_spelled_out_answers_as_its_absence(self):
        for a in api_dump()["analyses"]:
            query, full, defaults = spelt_out(a)
            self.assertTrue(defaults, a["name"])
            with self.subTest(analysis=a["name"], query=full):
                plain = request(example_path(a["route"], query), base=self.base, headers=SYNC)
                spelt = request(example_path(a["route"], full), base=self.base, headers=SYNC)
                self.assertEqual(plain.status, 200, plain.body[:300])
                self.assertEqual(spelt.status, 200, spelt.body[:300])
                # computed apart (another representation, another key), with the same numbers to the bit
                self.assertEqual(without_input(spelt.body), without_input(plain.body))

    def test_the_same_numbers_cold_and_beside_another_computation(self):
        """alignment's example computed cold, then again (spelt out: another key) while a long job runs
        beside it: the same bits. Under blas_threads "auto" the second ran with half the OpenBLAS threads
        and differed in the last bits (...598355 against ...598357 in a clean-clone run)."""
        a = next(a for a in api_dump()["analyses"] if a["name"] == "alignment")
        query, full, _ = spelt_out(a)
        cold = request(example_path(a["route"], query), base=self.base, headers=SYNC)
        self.assertEqual(cold.status, 200, cold.body[:300])
        job = request("/v1/models/b/matrices/g/periodicity?k=60&rows=0:4096", base=self.base,
                      headers={"Prefer": "respond-async"})
        self.assertEqual(job.status, 202, job.body[:300])
        try:
            deadline = time.monotonic() + 600
            while metrics(self.base)["embedscope_compute_jobs_running"] == 0:
                self.assertLess(time.monotonic(), deadline)
                time.sleep(0.01)
            beside = request(example_path(a["route"], full), base=self.base, headers=SYNC)
            running = metrics(self.base)["embedscope_compute_jobs_running"]
        finally:
            request(job.headers["Location"], method="DELETE", base=self.base)
        self.assertEqual(beside.status, 200, beside.body[:300])
        self.assertGreaterEqual(running, 1)  # the job was still running: it was computed beside it
        self.assertEqual(without_input(beside.body), without_input(cold.body))

    def test_a_conditional_parameter_other_than_its_default_is_still_refused(self):
        pca = "/v1/models/gpt2-small/matrices/wpe/pca?rows=0:64&"
        self.assert_problem(pca + "average_order=average_then_select", 400, param="average_order")
        self.assert_problem(pca + "average_mode=groups", 400, param="average_mode")
        cosine = "/v1/models/gpt2-small/matrices/wpe/cosine?rows=0:64&row=1&"
        self.assert_problem(cosine + "bins=32", 400, param="bins")
        compare = "/v1/compare?matrices=gpt2-small/wpe,openai-gpt/wpe&analysis=spectrum&rows=0:64&"
        self.assert_problem(compare + "basis=original", 400, param="basis")


if __name__ == "__main__":
    unittest.main()
