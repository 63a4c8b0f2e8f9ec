"""Any replica answers any job (issue 28 §4): two daemons sharing one cache_dir, as two replicas behind a
proxy share their volume. A job asked on one is polled alternately on both: the polls agree (its state
never goes back, never a 404) and end in the same 303; its result is served by both (from the reply file
in cache_dir/jobs); the other replica's DELETE of a finished job forgets it for both (the replica that ran
it stops answering its 303 and lets its reply go), of a running job cancels it where it runs; a job whose
daemon was killed reads "failed" with a reason, never 404; after a SIGTERM the finished results stay served
by a restarted daemon."""
import os
import re
import signal
import tempfile
import time
import unittest

from httpkit import Daemon, exchange

GENEROUS = 300
ASYNC = {"Prefer": "respond-async"}
ORDER = {"queued": 0, "running": 1, "done": 2}


def metric(daemon, name):
    text = exchange("/metrics", base=daemon.base).body.decode()
    return float(re.search(r"(?m)^%s (\S+)" % name, text).group(1))


# The matrix: a sinusoidal table of the size the jobs need, whose values cost nothing to make; a seeded
# Gaussian of that size (an exact spectrum: two QRs and a product on one BLAS thread) took 1-3 CPU s at
# every daemon start.
def config(cache):
    return {"server": {"cache_dir": cache, "shutdown_grace_s": 1},
            "limits": {"max_generated_elements": 1 << 24, "request_timeout_s": GENEROUS},
            "models": {"b": {"matrices": {"g": {"generator": "sinusoidal", "n_positions": 16384, "d_model": 256}}}}}


class Replicas(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cache = tempfile.TemporaryDirectory(prefix="embedscope-replicas-")
        cls.a = Daemon(config(cls.cache.name), args=("--compute-threads", "1"), start_timeout=GENEROUS)
        cls.b = Daemon(config(cls.cache.name), args=("--compute-threads", "1"), start_timeout=GENEROUS)
        for d in (cls.a, cls.b):
            d.wait_ready(timeout=GENEROUS)

    @classmethod
    def tearDownClass(cls):
        for d in (cls.a, cls.b):
            if d.proc.poll() is None:
                d.close()
        cls.cache.cleanup()

    def poll(self, daemon, location):
        return exchange(location, base=daemon.base, timeout=GENEROUS)

    def test_polls_alternating_between_replicas_agree_and_both_serve_the_result(self):
        path = "/v1/models/b/matrices/g/spectrum?rows=3:"
        r = exchange(path, headers=ASYNC, base=self.a.base)
        self.assertEqual(r.status, 202, r.body[:300])
        location, seen, deadline = r.headers["Location"], [], time.monotonic() + GENEROUS
        while True:
            for d in (self.a, self.b) * 10:  # 20 polls, alternating
                p = self.poll(d, location)
                self.assertIn(p.status, (200, 303), p.body[:300])
                state = p.json()["state"]
                self.assertIn(state, ORDER, p.body[:500])
                seen.append(ORDER[state])
                self.assertEqual(seen, sorted(seen), "the replicas disagree: %s" % seen)  # never goes back
                if p.status == 303:
                    self.assertEqual(p.headers["Location"], path)
            if seen[-1] == ORDER["done"] and seen[-2] == ORDER["done"]:
                break
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.05)
        first = exchange(path, base=self.a.base)
        second = exchange(path, base=self.b.base)  # never computed there: the reply file
        self.assertEqual((first.status, second.status), (200, 200))
        self.assertEqual(first.body, second.body)
        # the other replica's DELETE forgets it for both
        self.assertEqual(exchange(location, method="DELETE", base=self.b.base).status, 204)
        self.assertEqual(self.poll(self.b, location).status, 404)

    def test_a_finished_job_deleted_on_one_replica_is_gone_on_both(self):
        # the replica that ran it keeps it in memory: it must see the record the other removed is gone (it
        # answered 303 and listed it until job_ttl_s)
        path = "/v1/models/b/matrices/g/spectrum?rows=11:"
        r = exchange(path, headers=ASYNC, base=self.a.base)
        self.assertEqual(r.status, 202, r.body[:300])
        location, deadline = r.headers["Location"], time.monotonic() + GENEROUS
        job = location.rsplit("/", 1)[1]
        while self.poll(self.a, location).status != 303:
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.05)
        on_disk = metric(self.a, "embedscope_job_reply_disk_bytes")
        self.assertEqual(exchange(location, method="DELETE", base=self.b.base).status, 204)
        for d in (self.a, self.b, self.a):
            self.assertEqual(self.poll(d, location).status, 404)
            self.assertNotIn(job, [j["id"] for j in exchange("/v1/jobs", base=d.base).json()["requests"]])
        # the replica that ran it let its reply go (memory and file)
        self.assertLess(metric(self.a, "embedscope_job_reply_disk_bytes"), on_disk)
        self.assertEqual(exchange(location, method="DELETE", base=self.a.base).status, 404)
        self.assertEqual(exchange(path, base=self.a.base).status, 200)  # the result URL answers like any request

    def test_another_replica_lists_and_cancels_a_running_job(self):
        # a job that runs for many seconds (every column's periodogram, n^2 each), so the DELETE finds it running:
        # a spectrum that finished first (a quiet machine) was forgotten by the other replica only, and its own
        # kept answering 303 (in CI at load 2)
        r = exchange("/v1/models/b/matrices/g/periodicity?axis=columns&rows=5:", headers=ASYNC, base=self.a.base)
        self.assertEqual(r.status, 202, r.body[:300])
        location = r.headers["Location"]
        job = location.rsplit("/", 1)[1]
        listed = exchange("/v1/jobs", base=self.b.base).json()["requests"]
        self.assertIn(job, [j["id"] for j in listed])
        self.assertEqual(exchange(location, method="DELETE", base=self.b.base).status, 204)
        deadline = time.monotonic() + GENEROUS
        while True:  # the replica computing it stops it (or it had finished: then it was forgotten)
            p = self.poll(self.a, location)
            if p.status == 404 or p.json()["state"] == "cancelled":
                break
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.05)

    def test_a_job_whose_daemon_died_reads_failed_and_sigterm_keeps_finished_results(self):
        with tempfile.TemporaryDirectory(prefix="embedscope-replicas-") as cache:
            c = Daemon(config(cache), args=("--compute-threads", "1"), start_timeout=GENEROUS)
            d = Daemon(config(cache), args=("--compute-threads", "1"), start_timeout=GENEROUS)
            try:
                for x in (c, d):
                    x.wait_ready(timeout=GENEROUS)
                done_path = "/v1/models/b/matrices/g/spectrum?rows=8:"
                r = exchange(done_path, headers=ASYNC, base=c.base)
                done_location, deadline = r.headers["Location"], time.monotonic() + GENEROUS
                while self.poll(c, done_location).status != 303:
                    self.assertLess(time.monotonic(), deadline)
                    time.sleep(0.05)
                r = exchange("/v1/models/b/matrices/g/spectrum?rows=9:", headers=ASYNC, base=c.base)
                location = r.headers["Location"]
                c.proc.send_signal(signal.SIGKILL)
                c.proc.wait()
                p = self.poll(d, location)
                self.assertEqual(p.status, 200, p.body[:300])
                doc = p.json()
                if doc["state"] != "done":  # killed before it finished
                    self.assertEqual(doc["state"], "failed", p.body[:500])
                    self.assertIn("interrupted", doc["error"]["detail"])
                # the finished one is still served, by the replica left
                p = self.poll(d, done_location)
                self.assertEqual(p.status, 303, p.body[:300])
                self.assertEqual(exchange(done_path, base=d.base).status, 200)
                # a SIGTERM with a job running (shutdown_grace_s 1), then a restart: the finished result stays
                # until its TTL, the running job either finished in the grace period or reads failed
                r = exchange("/v1/models/b/matrices/g/spectrum?rows=10:", headers=ASYNC, base=d.base)
                running = r.headers["Location"]
                self.assertEqual(d.stop(), 0)
                e = Daemon(config(cache), args=("--compute-threads", "1"), start_timeout=GENEROUS)
                try:
                    e.wait_ready(timeout=GENEROUS)
                    self.assertEqual(self.poll(e, done_location).status, 303)
                    p = self.poll(e, running)
                    self.assertIn(p.status, (200, 303), p.body[:300])
                    if p.status == 200:
                        self.assertEqual(p.json()["state"], "failed", p.body[:500])
                        self.assertIn("error", p.json())
                finally:
                    e.close()
            finally:
                for x in (c, d):
                    if x.proc.poll() is None:
                        x.proc.kill()
                        x.proc.wait()
                    x.dir.cleanup()


if __name__ == "__main__":
    unittest.main()
