"""Jobs belong to their client (issue 28 §3): a job id is a capability of 128 random bits; GET /v1/jobs lists
only the caller's jobs; another client (another address, or the same address with another bearer token) gets
404 for a poll or a DELETE of them; finished and cancelled jobs do not count toward max_jobs_per_client, and a
DELETE of a finished job forgets it. A Location of any length is exact (no fixed-size buffer).

127.0.0.2 is a second client: Linux routes all of 127.0.0.0/8 to the loopback, so a connection from it to the
daemon's 127.0.0.1 is another address for the daemon."""
import time
import unittest

from httpkit import Daemon, exchange, request
from nginxkit import Nginx

GENEROUS = 300
# nginx (deploy/nginx.conf) runs on 127.0.0.1: the daemon takes its forwarded client addresses.
# The matrix: a sinusoidal table of the size the jobs need, whose values cost nothing to make; a seeded
# Gaussian of that size (an exact spectrum: two QRs and a product on one BLAS thread) took 1-3 CPU s at
# every daemon start.
CONFIG = {"server": {"trusted_proxies": ["127.0.0.1"]}, "limits": {"max_generated_elements": 1 << 24, "request_timeout_s": GENEROUS},  # max_jobs_per_client: 16
          "models": {"b": {"matrices": {"g": {"generator": "sinusoidal", "n_positions": 16384, "d_model": 512}}}}}
ASYNC = {"Prefer": "respond-async"}
OTHER = "127.0.0.2"
THIRD = "127.0.0.3"  # its job holds the one compute thread, so that the tests' own jobs stay queued


class JobOwners(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon(CONFIG, args=("--compute-threads", "1"), start_timeout=GENEROUS)
        cls.base = cls.daemon.base
        cls.daemon.wait_ready(timeout=GENEROUS)

    @classmethod
    def tearDownClass(cls):
        cls.daemon.close()

    def get(self, path, method="GET", headers=None, source=None):
        return exchange(path, method=method, headers=headers, base=self.base, source=source, timeout=GENEROUS)

    def listed(self, headers=None, source=None):
        r = self.get("/v1/jobs", headers=headers, source=source)
        self.assertEqual(r.status, 200, r.body[:300])
        return [j["id"] for j in r.json()["requests"]]

    def assertCancelledOrForgotten(self, poll):
        """A job after its owner's DELETE: cancelled, or forgotten (404) if it had finished."""
        if poll.status != 404:
            self.assertEqual((poll.status, poll.json()["state"]), (200, "cancelled"), poll.body[:300])

    def wait_done(self, location, headers=None):
        deadline = time.monotonic() + GENEROUS
        while True:
            r = self.get(location, headers=headers)
            self.assertIn(r.status, (200, 303), r.body[:300])
            if r.status == 303 or r.json()["state"] in ("failed", "cancelled"):
                return r
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.05)

    def test_another_client_neither_sees_polls_nor_cancels_a_job(self):
        r = self.get("/v1/models/b/matrices/g/spectrum?rows=7:", headers=ASYNC)
        self.assertEqual(r.status, 202, r.body[:300])
        location = r.headers["Location"]
        self.assertRegex(location, r"^/v1/jobs/[0-9a-f]{32}$")  # 128 random bits
        job = location.rsplit("/", 1)[1]
        self.assertIn(job, self.listed())
        for who in ({"source": OTHER}, {"headers": {"Authorization": "Bearer x"}},
                    {"source": OTHER, "headers": {"Authorization": "Bearer x"}}):
            self.assertNotIn(job, self.listed(**who), who)
            self.assertEqual(self.get(location, **who).status, 404, who)
            self.assertEqual(self.get(location, method="DELETE", **who).status, 404, who)
        # still there for its owner, not cancelled, and it ends with its result
        self.assertEqual(self.wait_done(location).status, 303)
        # the owner's DELETE of a finished job forgets it
        self.assertEqual(self.get(location, method="DELETE").status, 204)
        self.assertEqual(self.get(location).status, 404)
        self.assertNotIn(job, self.listed())

    @unittest.skipUnless(Nginx.available(), "nginx is not installed")
    def test_through_nginx_a_wrong_bearer_token_cancels_nothing(self):
        with Nginx(self.base) as proxy:
            def via(path, method="GET", headers=None, source=None):
                return exchange(path, method=method, headers=headers, base=proxy.base, source=source,
                                timeout=GENEROUS)
            blocker = self.block("0:16002")
            r = via("/v1/models/b/matrices/g/spectrum?rows=13:", headers=ASYNC)
            self.assertEqual(r.status, 202, r.body[:300])
            location = r.headers["Location"]
            for who in ({"source": OTHER, "headers": {"Authorization": "Bearer x"}},
                        {"headers": {"Authorization": "Bearer x"}}, {"source": OTHER}):
                self.assertIn(via(location, method="DELETE", **who).status, (401, 404), who)
                self.assertEqual(via(location, **who).status, 404, who)
                listing = via("/v1/jobs", **who)
                self.assertNotIn(location.rsplit("/", 1)[1], [j["id"] for j in listing.json()["requests"]])
            self.assertIn(via(location).json()["state"], ("queued", "running", "done"))
            # its owner cancels it through the proxy, with no token, as it asked for it
            self.assertEqual(via(location, method="DELETE").status, 204)
            self.assertCancelledOrForgotten(via(location))
            self.get(blocker, method="DELETE", source=THIRD)

    def test_a_bearer_token_owns_its_jobs(self):
        mine = {"Authorization": "Bearer my-token"}
        r = self.get("/v1/models/b/matrices/g/spectrum?rows=9:", headers=dict(ASYNC, **mine))
        self.assertEqual(r.status, 202, r.body[:300])
        location = r.headers["Location"]
        job = location.rsplit("/", 1)[1]
        self.assertIn(job, self.listed(headers=mine))
        self.assertNotIn(job, self.listed())  # the address alone is another owner
        self.assertEqual(self.get(location).status, 404)
        self.assertEqual(self.get(location, method="DELETE").status, 404)
        self.assertEqual(self.get(location, method="DELETE", headers=mine).status, 204)
        self.assertCancelledOrForgotten(self.get(location, headers=mine))

    def block(self, rows):
        """A job of a third client ahead of the test's own in the one compute thread's queue."""
        r = self.get("/v1/models/b/matrices/g/spectrum?rows=%s" % rows, headers=ASYNC, source=THIRD)
        self.assertEqual(r.status, 202, r.body[:300])
        return r.headers["Location"]

    def test_the_same_request_of_two_clients_makes_two_jobs(self):
        blocker = self.block("0:16000")
        path = "/v1/models/b/matrices/g/spectrum?rows=11:"
        first = self.get(path, headers=ASYNC)
        second = self.get(path, headers=ASYNC, source=OTHER)
        self.assertEqual((first.status, second.status), (202, 202), second.body[:300])
        self.assertNotEqual(first.headers["Location"], second.headers["Location"])
        # the first client's cancel does not fail the second client's job (it waits for the same computation)
        self.get(first.headers["Location"], method="DELETE")
        deadline = time.monotonic() + GENEROUS
        while True:
            r = self.get(second.headers["Location"], source=OTHER)
            self.assertIn(r.status, (200, 303), r.body[:300])
            if r.status == 303:
                break
            self.assertIn(r.json()["state"], ("queued", "running"), r.body[:500])
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.05)
        self.assertEqual(r.headers["Location"], path)
        self.get(blocker, method="DELETE", source=THIRD)

    def test_cancelled_and_finished_jobs_do_not_count_toward_the_cap(self):
        blocker = self.block("0:16001")
        locations = []
        for i in range(16):  # limits.max_jobs_per_client's default
            r = self.get("/v1/models/b/matrices/g/spectrum?rows=%d:" % (100 + i), headers=ASYNC)
            self.assertEqual(r.status, 202, r.body[:300])
            locations.append(r.headers["Location"])
        over = self.get("/v1/models/b/matrices/g/spectrum?rows=99:", headers=ASYNC)
        states = [self.get(location).json()["state"] for location in locations]
        if all(state in ("queued", "running") for state in states):  # all 16 live when it was asked: over the cap
            self.assertEqual(over.status, 429, over.body[:300])
            # the advice is what frees a slot: a job finishing or cancelled
            self.assertIn("cancelled", over.json()["detail"])
            self.assertGreaterEqual(int(over.headers["Retry-After"]), 1)
        else:
            print("  (a job finished before the 17th request: its 429 not checked)")
        for location in locations:
            self.assertEqual(self.get(location, method="DELETE").status, 204)
        statuses = [self.get("/v1/models/b/matrices/g/spectrum?rows=%d:" % (200 + i), headers=ASYNC).status
                    for i in range(16)]
        self.assertEqual(statuses, [202] * 16)
        for job in self.listed():
            self.get("/v1/jobs/" + job, method="DELETE")
        self.get(blocker, method="DELETE", source=THIRD)

    def test_a_long_url_has_its_exact_location_and_result(self):
        rows = ",".join(str(i) for i in range(0, 1600, 2))
        path = "/v1/models/b/matrices/g/outliers?rows=" + rows
        self.assertGreater(len(path), 3000)
        r = self.get(path, headers=ASYNC)
        self.assertEqual(r.status, 202, r.body[:300])
        done = self.wait_done(r.headers["Location"])
        self.assertEqual(done.status, 303, done.body[:300])
        self.assertEqual(done.headers["Location"], path)  # not cut at 1023 characters
        self.assertEqual(done.json()["result"], path)
        got = self.get(done.headers["Location"])
        self.assertEqual(got.status, 200, got.body[:300])
        sync = request(path, base=self.base, headers={"Prefer": "wait=%d" % GENEROUS}, timeout=GENEROUS)
        self.assertEqual(sync.status, 200, sync.body[:300])
        self.assertEqual(got.body, sync.body)


if __name__ == "__main__":
    unittest.main()
