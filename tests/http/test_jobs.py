"""Long requests as jobs (issue 20): Prefer: respond-async (or a prediction past limits.sync_seconds)
answers 202 with Location: /v1/jobs/{id}; the job shows its progress, ends in a 303 to its result's URL,
shares one computation among identical requests, stops when cancelled, expires, and a client holds a
bounded number.

The matrix is a 16384 x 768 Gaussian in `make test`; EMBEDSCOPE_JOBS_SHAPE=16384x2048 (`make jobs-real`)
runs the same tests on the issue's 16384 x 2048, whose generation and two exact spectra take minutes of
CPU on the shared 2-core test machine (the figures are printed at the end: the daemon's CPU seconds)."""
import os
import re
import time
import unittest

from httpkit import Daemon, request

GENEROUS = 300
N, D = (int(x) for x in os.environ.get("EMBEDSCOPE_JOBS_SHAPE", "16384x768").split("x"))
CONFIG = {"limits": {"max_generated_elements": 1 << 26, "max_jobs_per_client": 4, "job_ttl_s": 3,
                     "request_timeout_s": GENEROUS},  # the synchronous answer of the real size, under load
          "models": {"b": {"matrices": {
              "g": {"generator": "gaussian", "rows": N, "cols": D, "seed": 3},
              "same": {"view": "g", "rows": [0, N]}}}}}  # the same data under another identity
ASYNC = {"Prefer": "respond-async"}


def cpu_seconds(pid):
    """User + system CPU seconds of a process so far (Linux /proc)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def metric(base, name):
    text = request("/metrics", base=base).body.decode()
    return float(re.search(r"(?m)^%s (\S+)" % name, text).group(1))


def running_jobs(base):
    return metric(base, "embedscope_compute_jobs_running")


class Jobs(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        t0 = time.monotonic()
        cls.daemon = Daemon(CONFIG, args=("--compute-threads", "1"), start_timeout=GENEROUS)
        cls.base = cls.daemon.base
        cls.daemon.wait_ready(timeout=GENEROUS)
        cls.ready = (time.monotonic() - t0, cpu_seconds(cls.daemon.proc.pid))

    @classmethod
    def tearDownClass(cls):
        cpu = cpu_seconds(cls.daemon.proc.pid)
        print("  %dx%d: ready in %.1f s (%.1f CPU s, the generator), the tests' computations %.1f CPU s"
              % (N, D, cls.ready[0], cls.ready[1], cpu - cls.ready[1]))
        cls.daemon.close()

    def job(self, location):
        r = request(location, base=self.base)
        self.assertIn(r.status, (200, 303), r.body[:300])
        self.assertEqual(r.headers.get("Cache-Control"), "no-store")
        return r

    def wait_idle(self):
        deadline = time.monotonic() + GENEROUS
        while running_jobs(self.base) > 0:
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.05)

    def test_job_progress_and_its_result_equals_the_synchronous_answer(self):
        self.wait_idle()
        path = "/v1/models/b/matrices/g/spectrum"
        r = request(path, base=self.base, headers=ASYNC)
        self.assertEqual(r.status, 202, r.body[:300])
        self.assertEqual(r.headers.get("Preference-Applied"), "respond-async")  # RFC 7240
        location = r.headers["Location"]
        self.assertRegex(location, r"^/v1/jobs/[0-9a-f]{32}$")
        doc = r.json()
        self.assertEqual((doc["url"], doc["state"] in ("queued", "running")), (path, True))
        self.assertGreater(doc["predicted_s"], 0)
        seen, fractions, lapack, deadline = [], [], [], time.monotonic() + GENEROUS
        while True:
            self.assertLess(time.monotonic(), deadline)
            r = self.job(location)
            if r.status == 303:
                break
            p = r.json()["progress"]
            fractions.append(p["fraction"])
            self.assertTrue(0 <= p["pass_fraction"] <= 1, p)
            self.assertEqual(p["estimated"], p["pass"] == "lapack", p)
            if p["pass"] == "tsqr":
                seen.append(p["blocks_done"])
            if p["pass"] == "lapack":  # dgebrd + dbdsdc of R: estimated from its time, held below its share
                self.assertLessEqual(p["pass_fraction"], 0.9, p)
                lapack.append(p["fraction"])
            time.sleep(0.02)
        self.assertGreaterEqual(len(set(seen)), 2, "the TSQR's progress was never seen advancing: %s" % seen)
        print("  the LAPACK pass polled %d times: fraction %s" % (len(lapack), lapack[:1] + lapack[-1:]))
        self.assertTrue(lapack, "the LAPACK pass was never seen")
        if len(lapack) >= 3:  # polled a few times: its estimate moved
            self.assertGreaterEqual(len(set(lapack)), 2, lapack)
        self.assertEqual(seen, sorted(seen))
        # one fraction across the passes (scan, then tsqr, weighted by their predicted shares): it never goes
        # back when a pass ends and the next starts at 0 blocks, and it stays below 1 until the job is done
        self.assertEqual(fractions, sorted(fractions), "the overall fraction went back: %s" % fractions)
        self.assertGreaterEqual(len(set(fractions)), 3, fractions)
        self.assertTrue(0 <= fractions[0] and fractions[-1] < 1, fractions)
        self.assertEqual(r.headers["Location"], path)
        self.assertEqual((r.json()["state"], r.json()["progress"]["fraction"]), ("done", 1.0))
        got = request(path, base=self.base)  # the job's reply, kept for limits.job_ttl_s
        self.assertEqual(got.status, 200)
        sync = request("/v1/models/b/matrices/same/spectrum", base=self.base, headers={"Prefer": "wait=%d" % GENEROUS},
                       timeout=GENEROUS)
        self.assertEqual(sync.status, 200, sync.body[:300])
        self.assertEqual(sync.headers.get("Preference-Applied"), "wait=%d" % GENEROUS)
        self.assertNotIn("Preference-Applied", request("/v1/models/b/matrices/g/spectrum", base=self.base).headers)
        self.assertEqual(got.json()["singular_values"], sync.json()["singular_values"])

    def test_identical_requests_share_one_job(self):
        self.wait_idle()
        path = "/v1/models/b/matrices/g/pca?k=4&method=exact&rows=3:"
        first = request(path, base=self.base, headers=ASYNC)
        second = request(path, base=self.base, headers=ASYNC)
        self.assertEqual((first.status, second.status), (202, 202))
        self.assertEqual(first.headers["Location"], second.headers["Location"])
        request(first.headers["Location"], method="DELETE", base=self.base)

    def test_cancel_stops_the_computation(self):
        self.wait_idle()
        r = request("/v1/models/b/matrices/g/spectrum?rows=1:", base=self.base, headers=ASYNC)
        self.assertEqual(r.status, 202)
        location, deadline = r.headers["Location"], time.monotonic() + GENEROUS
        while self.job(location).json()["progress"]["pass"] != "tsqr":
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.02)
        self.assertEqual(running_jobs(self.base), 1)
        cached = metric(self.base, "embedscope_svd_cache_entries")
        computed = metric(self.base, "embedscope_svd_computations_total")
        failed = metric(self.base, "embedscope_svd_computations_failed_total")
        t0 = time.monotonic()
        self.assertEqual(request(location, method="DELETE", base=self.base).status, 204)
        while running_jobs(self.base) > 0:
            time.sleep(0.02)
        idle = time.monotonic() - t0
        print("  compute pool idle %.2f s after the cancel" % idle)  # a measurement, not a bound (load)
        self.assertEqual(self.job(location).json()["state"], "cancelled")
        # stopped, not run to its end (then its decomposition would be cached and counted): what shows the
        # cancel took, however long a loaded machine took to get there
        self.assertEqual(metric(self.base, "embedscope_svd_cache_entries"), cached)
        # and a decomposition cut short is not counted as one computed
        self.assertEqual(metric(self.base, "embedscope_svd_computations_total"), computed)
        self.assertEqual(metric(self.base, "embedscope_svd_computations_failed_total"), failed + 1)
        # a stop the client asked for is logged at info, not as an error
        lines = [l for l in self.daemon.log().splitlines() if "spectrum" in l and "cancelled" in l]
        self.assertTrue(any(re.search(r"\binfo\b.*its job was cancelled", l) for l in lines), lines)
        self.assertFalse([l for l in lines if re.search(r"\berror\b", l)], lines)

    def test_a_client_holds_a_bounded_number_of_jobs_which_expire(self):
        self.wait_idle()
        time.sleep(CONFIG["limits"]["job_ttl_s"] + 0.5)  # the other tests' jobs expire
        statuses = []
        for i in range(5):
            r = request("/v1/models/b/matrices/g/outliers?rows=%d:" % (100 + i), base=self.base, headers=ASYNC)
            statuses.append(r.status)
            last = r
        listing = request("/v1/jobs", base=self.base).json()["requests"]
        self.assertEqual(statuses[:4], [202] * 4)
        self.assertEqual(len(listing), 4)
        # only queued and running jobs hold a slot: if the four still ran after the fifth was asked, it was refused
        if all(j["state"] in ("queued", "running") for j in listing):
            self.assertEqual(statuses[4], 429)
            self.assertEqual(last.headers["Content-Type"], "application/problem+json")
            self.assertEqual((last.json()["type"], last.json()["status"]), ("/problems/too-many-jobs", 429))
            self.assertEqual(last.json()["limit"], "max_jobs_per_client")
            self.assertGreaterEqual(int(last.headers["Retry-After"]), 1)  # when the first is predicted to finish
            self.assertNotIn("Preference-Applied", last.headers)
        deadline = time.monotonic() + GENEROUS
        location = "/v1/jobs/" + listing[-1]["id"]
        while self.job(location).status != 303:
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.05)
        time.sleep(CONFIG["limits"]["job_ttl_s"] + 0.5)
        self.assertEqual(request(location, base=self.base).status, 404)  # expired
        r = request("/v1/models/b/matrices/g/outliers?rows=200:", base=self.base, headers=ASYNC)
        self.assertEqual(r.status, 202)  # finished ones no longer count


if __name__ == "__main__":
    unittest.main()
