"""Long requests as jobs (issue 20): Prefer: respond-async (or a prediction past limits.sync_seconds)
answers 202 with Location: /v1/jobs/{id}; the job shows its progress, ends in a 303 to its result's URL,
shares one computation among identical requests, stops when cancelled, expires, and a client holds a
bounded number. A 16384 x 768 Gaussian (the issue's 16384 x 2048 takes minutes to generate on the
shared 2-core test machine; the path is the same)."""
import re
import time
import unittest

from httpkit import Daemon, request

GENEROUS = 300
N, D = 16384, 768
CONFIG = {"limits": {"max_generated_elements": 1 << 26, "max_jobs_per_client": 4, "job_ttl_s": 3},
          "models": {"b": {"matrices": {
              "g": {"generator": "gaussian", "rows": N, "cols": D, "seed": 3},
              "same": {"view": "g", "rows": [0, N]}}}}}  # the same data under another identity
ASYNC = {"Prefer": "respond-async"}


def running_jobs(base):
    text = request("/metrics", base=base).body.decode()
    return float(re.search(r"(?m)^embedscope_compute_jobs_running (\S+)", text).group(1))


class Jobs(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon(CONFIG, args=("--compute-threads", "1"))
        cls.base = cls.daemon.base
        cls.daemon.wait_ready()

    @classmethod
    def tearDownClass(cls):
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
        self.assertRegex(location, r"^/v1/jobs/[0-9a-f]{20}$")
        doc = r.json()
        self.assertEqual((doc["url"], doc["state"] in ("queued", "running")), (path, True))
        self.assertGreater(doc["predicted_s"], 0)
        seen, fractions, deadline = [], [], time.monotonic() + GENEROUS
        while True:
            self.assertLess(time.monotonic(), deadline)
            r = self.job(location)
            if r.status == 303:
                break
            p = r.json()["progress"]
            fractions.append(p["fraction"])
            self.assertTrue(0 <= p["pass_fraction"] <= 1, p)
            if p["pass"] == "tsqr":
                seen.append(p["blocks_done"])
            time.sleep(0.02)
        self.assertGreaterEqual(len(set(seen)), 2, "the TSQR's progress was never seen advancing: %s" % seen)
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
        t0 = time.monotonic()
        self.assertEqual(request(location, method="DELETE", base=self.base).status, 204)
        while running_jobs(self.base) > 0:
            time.sleep(0.02)
        idle = time.monotonic() - t0
        print("  compute pool idle %.2f s after the cancel" % idle)
        self.assertLess(idle, 1.0)
        self.assertEqual(self.job(location).json()["state"], "cancelled")

    def test_a_client_holds_a_bounded_number_of_jobs_which_expire(self):
        self.wait_idle()
        time.sleep(CONFIG["limits"]["job_ttl_s"] + 0.5)  # the other tests' jobs expire
        statuses = []
        for i in range(5):
            r = request("/v1/models/b/matrices/g/outliers?rows=%d:" % (100 + i), base=self.base, headers=ASYNC)
            statuses.append(r.status)
            last = r
        self.assertEqual(statuses, [202] * 4 + [429])
        self.assertEqual(last.headers["Content-Type"], "application/problem+json")
        self.assertEqual((last.json()["type"], last.json()["status"]), ("/problems/too-many-jobs", 429))
        self.assertEqual(last.json()["limit"], "max_jobs_per_client")
        # no job has finished yet (or one just did): the first slot frees within limits.job_ttl_s
        self.assertIn(int(last.headers["Retry-After"]), range(1, CONFIG["limits"]["job_ttl_s"] + 1))
        self.assertNotIn("Preference-Applied", last.headers)
        location = None
        deadline = time.monotonic() + GENEROUS
        listing = request("/v1/jobs", base=self.base).json()["requests"]
        self.assertEqual(len(listing), 4)
        location = "/v1/jobs/" + listing[0]["id"]
        while self.job(location).status != 303:
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.05)
        time.sleep(CONFIG["limits"]["job_ttl_s"] + 0.5)
        self.assertEqual(request(location, base=self.base).status, 404)  # expired
        r = request("/v1/models/b/matrices/g/outliers?rows=200:", base=self.base, headers=ASYNC)
        self.assertEqual(r.status, 202)  # the expired ones no longer count


if __name__ == "__main__":
    unittest.main()
