"""One client cannot take the daemon from the others (issue 29 §1, §2, §4).

- A lane for light work: with two compute threads, one is kept for requests predicted within
  limits.light_seconds, so a light request is answered while heavy jobs hold the other thread and more
  wait (an ordering check: the heavy jobs are still running and queued when its answer arrives).
- Nothing heavy on an HTTP thread: the distinct cosine offsets of a 4,000,000-row selection are bounded
  from the indices in O(rows) instead of counted (quadratic): the requests are refused at once (their
  JSON could not fit max_response_bytes) and /healthz and /v1/models answer meanwhile.
- Every pass stops at its deadline or cancel: after a 504 (request_timeout_s) or a DELETE of its job,
  the compute thread is free again long before the pass would have ended (periodicity per column, the
  left singular vectors and their rendering).
- The JSON document's size is bounded before computing: cosine?mode=matrix&bins=0 of 2048 rows is
  refused at once, nothing computed.

Bounds are generous (GENEROUS seconds) and each heavy pass is sized to take many times longer than them
on this machine, so a daemon that let the pass run on fails while a loaded machine does not."""
import threading
import time
import unittest

from httpkit import Daemon, metrics, request, settled_metrics

GENEROUS = 120  # seconds a request may take to be answered on a loaded machine
FREED = 10  # seconds: far below what each heavy pass below takes, far above a checkpoint's interval
ASYNC = {"Prefer": "respond-async"}
SYNC = {"Prefer": "wait=600"}  # synchronous, so that its deadline (request_timeout_s, max_wait_s) answers it
# periodicity per column of 4096 positions x 768 dimensions: ~12 s of one core here (O(n^2) a column)
PE = {"generator": "sinusoidal", "n_positions": 4096, "d_model": 768}
PERIODICITY = "/v1/models/m/matrices/pe/periodicity?axis=columns"


def job_state(base, location):
    r = request(location, base=base)
    return r.json()["state"] if r.status == 200 else "done"  # a finished job answers 303 to its result


def wait_for(predicate, what, timeout=GENEROUS):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("%s: not within %d s" % (what, timeout))
        time.sleep(0.05)


class LightLane(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon({"models": {"m": {"matrices": {"pe": PE}}}}, args=("--compute-threads", "2"))
        cls.base = cls.daemon.base
        cls.daemon.wait_ready()

    @classmethod
    def tearDownClass(cls):
        cls.daemon.close()

    def test_a_light_request_passes_heavy_work_that_holds_the_other_thread(self):
        m0 = metrics(self.base)
        self.assertEqual((m0["embedscope_compute_threads"], m0["embedscope_compute_light_threads"]), (2, 1))
        first = request(PERIODICITY, base=self.base, headers=ASYNC)
        self.assertEqual(first.status, 202, first.body[:300])
        wait_for(lambda: metrics(self.base)["embedscope_compute_heavy_jobs_running"] == 1, "the heavy job runs")
        second = request(PERIODICITY + "&rows=0:4000", base=self.base, headers=ASYNC)
        self.assertEqual(second.status, 202, second.body[:300])
        jobs = [first.headers["Location"], second.headers["Location"]]
        try:
            # a new row each time: never cached
            for row in (17, 18):
                light = request("/v1/models/m/matrices/pe/neighbors?k=2&row=%d" % row, base=self.base, headers=SYNC)
                self.assertEqual(light.status, 200, light.body[:300])
                states = [job_state(self.base, j) for j in jobs]
                # the light request did not wait for a heavy job: one still runs, the other still waits
                self.assertEqual(states, ["running", "queued"], "light answered after heavy work ended")
            # the pool counts a light job once its task has returned, which can be after its client read
            # the reply: wait (bounded) for both, then the same snapshot says one heavy job still runs
            light = m0["embedscope_compute_light_jobs_total"]

            def both_counted():
                m = metrics(self.base)
                return m if m["embedscope_compute_light_jobs_total"] - light >= 2 else None
            m1 = wait_for(both_counted, "both light requests counted as light jobs", timeout=10)
            self.assertEqual(m1["embedscope_compute_light_jobs_total"] - light, 2)
            self.assertEqual(m1["embedscope_compute_heavy_jobs_running"], 1)  # never both threads
        finally:
            for j in jobs:
                request(j, method="DELETE", base=self.base)
        settled_metrics(self.base, timeout=GENEROUS)


    def test_full_cosine_matrix_as_json_refused_before_computing(self):
        # 2048 x 2048 numbers: the nested JSON's bound (25 bytes a number) is over the default 32 MiB
        m0 = settled_metrics(self.base, timeout=GENEROUS)
        r = request("/v1/models/m/matrices/pe/cosine?mode=matrix&bins=0&rows=0:2048", base=self.base, timeout=GENEROUS)
        self.assertEqual(r.status, 400, r.body[:300])
        doc = r.json()
        self.assertEqual(doc["limit"], "max_response_bytes")
        self.assertIn("known before computing", doc["detail"])
        m1 = settled_metrics(self.base, timeout=GENEROUS)
        for name in ("embedscope_compute_jobs_total", "embedscope_response_cache_misses_total"):
            self.assertEqual(m1[name], m0[name], name)


class CheapGate(unittest.TestCase):
    """The offsets of 4,000,000 rows: bounded at the gate (O(rows)), refused at once."""

    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon({"models": {"u": {"matrices": {
            "big": {"generator": "gaussian", "rows": 4000000, "cols": 2, "seed": 1}}}}}, start_timeout=120)
        cls.base = cls.daemon.base
        cls.daemon.wait_ready()

    @classmethod
    def tearDownClass(cls):
        cls.daemon.close()

    def test_offset_requests_answered_at_once_and_healthz_meanwhile(self):
        m0 = settled_metrics(self.base)
        path = "/v1/models/u/matrices/big/cosine?mode=offset&rows=0:2000000:2,2000001:4000000:3"
        replies, health, done = [None, None], [], threading.Event()

        def ask(i):
            replies[i] = request(path, base=self.base, timeout=GENEROUS)

        def poll():
            while not done.is_set():
                for path in ("/healthz", "/v1/models"):
                    t0 = time.monotonic()
                    r = request(path, base=self.base, timeout=GENEROUS)
                    health.append((r.status, time.monotonic() - t0))
                time.sleep(0.02)

        poller = threading.Thread(target=poll)
        poller.start()
        askers = [threading.Thread(target=ask, args=(i,)) for i in range(2)]
        for t in askers:
            t.start()
        for t in askers:
            t.join()
        done.set()
        poller.join()
        for r in replies:  # a 400 naming the limit: the JSON of up to 4,000,000 offsets cannot fit
            self.assertEqual(r.status, 400, r.body[:300])
            doc = r.json()
            self.assertEqual(doc["limit"], "max_response_bytes")
            self.assertIn("known before computing", doc["detail"])
            self.assertIn("could be up to", doc["detail"])
        self.assertTrue(health and all(status == 200 for status, _ in health), health)
        print("  /healthz and /v1/models meanwhile: %d answers, slowest %.3f s" % (len(health), max(s for _, s in health)))
        m1 = settled_metrics(self.base)
        self.assertEqual(m1["embedscope_compute_jobs_total"], m0["embedscope_compute_jobs_total"])  # no work queued


class PassesStop(unittest.TestCase):
    """After a 504 or a DELETE, the one compute thread is free again within FREED seconds; each pass
    below takes several times longer than that on this machine when nothing stops it (periodicity per
    column of 8192 positions x 768: about a minute of one core). The rendering's safe points are
    checked by tests/api/test_compute.c (a cancelled task's JSON grid stops at its first row): a
    rendering long enough to tell apart here would take gigabytes."""

    @classmethod
    def setUpClass(cls):
        # max_wait_s 2: the deadline stays 2 s for a request that asks to wait 600 (a window that keeps it
        # synchronous: not predicted past it, never a job)
        cls.daemon = Daemon({"limits": {"request_timeout_s": 2, "max_wait_s": 2, "max_response_bytes": 1 << 30},
                             "models": {"m": {"matrices": {
                                 "pe": {"generator": "sinusoidal", "n_positions": 8192, "d_model": 768},
                                 "tall": {"generator": "sinusoidal", "n_positions": 60000, "d_model": 512}}}}},
                            args=("--compute-threads", "1"), start_timeout=120)
        cls.base = cls.daemon.base
        cls.daemon.wait_ready()

    @classmethod
    def tearDownClass(cls):
        cls.daemon.close()

    def free_again(self):
        wait_for(lambda: metrics(self.base)["embedscope_compute_jobs_running"] == 0, "the compute thread is free",
                 timeout=FREED)

    def timed_out(self, path):
        r = request(path, base=self.base, headers=SYNC, timeout=GENEROUS)
        self.assertEqual(r.status, 504, r.body[:300])
        self.free_again()

    def cancelled(self, path):
        r = request(path, base=self.base, headers=ASYNC)
        self.assertEqual(r.status, 202, r.body[:300])
        location = r.headers["Location"]
        wait_for(lambda: job_state(self.base, location) == "running", "the job runs")
        time.sleep(0.5)  # well inside its pass
        self.assertEqual(request(location, method="DELETE", base=self.base).status, 204)
        self.free_again()

    def test_periodicity_per_column_after_a_504(self):
        self.timed_out(PERIODICITY)

    def test_periodicity_per_column_after_a_delete(self):
        self.cancelled(PERIODICITY + "&rows=1:8192")

    def test_left_vectors_after_a_504(self):
        # the decomposition and 64 left vectors first (k=1), then all 512 for k=100: the projections
        # X V and U^T X of 60000 x 512 (a minute of one core), then 6 M numbers rendered
        vectors = "/v1/models/m/matrices/tall/vectors?side=left&method=exact&k="
        first = request(vectors + "1", base=self.base, headers=ASYNC)
        self.assertEqual(first.status, 202, first.body[:300])
        wait_for(lambda: job_state(self.base, first.headers["Location"]) == "done", "the decomposition",
                 timeout=600)
        self.timed_out(vectors + "100")


if __name__ == "__main__":
    unittest.main()
