"""A kept job reply shared by the jobs of different owners (identical requests share one file,
cache_dir/jobs/KEY.reply) stays while any of their jobs is acknowledged: one owner's DELETE (or its job's
expiry) never takes another owner's result. Two replicas on one cache_dir, each with one compute thread held by
a third client's long job so that both owners' jobs are queued (never answered from the other's file), and
limits.max_job_bytes 1 so that every reply is kept on disk only; then a restart, after which the job records
are all that count the file's holders."""
import glob
import os
import re
import tempfile
import time
import unittest

from httpkit import Daemon, exchange

GENEROUS = 300
ASYNC = {"Prefer": "respond-async"}
PATH = "/v1/models/b/matrices/g/spectrum?rows=13:"
BLOCKER = "/v1/models/b/matrices/g/periodicity?axis=columns&rows=5:"  # runs for many seconds: cancelled below
THIRD = "127.0.0.3"


def owner(name):
    return {"Authorization": "Bearer " + name}


def metric(daemon, name):
    text = exchange("/metrics", base=daemon.base).body.decode()
    return float(re.search(r"(?m)^%s (\S+)" % name, text).group(1))


# The matrix: a sinusoidal table of the size the jobs need, whose values cost nothing to make; a seeded
# Gaussian of that size (an exact spectrum: two QRs and a product on one BLAS thread) took 1-3 CPU s at
# every daemon start.
def config(cache):
    return {"server": {"cache_dir": cache, "shutdown_grace_s": 1},
            "limits": {"max_generated_elements": 1 << 24, "request_timeout_s": GENEROUS, "max_job_bytes": 1},
            "models": {"b": {"matrices": {"g": {"generator": "sinusoidal", "n_positions": 16384, "d_model": 512}}}}}


class SharedReplyFile(unittest.TestCase):
    def start(self, cache):
        d = Daemon(config(cache), args=("--compute-threads", "1"), start_timeout=GENEROUS)
        d.wait_ready(timeout=GENEROUS)
        self.daemons.append(d)
        return d

    def setUp(self):
        self.cache = tempfile.TemporaryDirectory(prefix="embedscope-shared-reply-")
        self.daemons = []

    def tearDown(self):
        for d in self.daemons:
            if d.proc.poll() is None:
                d.close()
        self.cache.cleanup()

    def ask(self, daemon, who):
        r = exchange(PATH, headers=dict(ASYNC, **owner(who)), base=daemon.base, timeout=GENEROUS)
        self.assertEqual(r.status, 202, r.body[:300])  # queued behind the blocker: its own job, not a file's reply
        return r.headers["Location"]

    def wait_done(self, daemon, location, who):
        deadline = time.monotonic() + GENEROUS
        while True:
            r = exchange(location, headers=owner(who), base=daemon.base, timeout=GENEROUS)
            self.assertIn(r.status, (200, 303), r.body[:300])
            if r.status == 303:
                self.assertEqual(r.headers["Location"], PATH)
                return
            self.assertIn(r.json()["state"], ("queued", "running"), r.body[:500])
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.05)

    def result_from_file(self, daemon, who):
        """The result an owner's 303 leads to, read from the kept reply file (not computed again)."""
        before = metric(daemon, "embedscope_job_reply_disk_reads_total")
        r = exchange(PATH, headers=owner(who), base=daemon.base, timeout=GENEROUS)
        self.assertEqual(r.status, 200, r.body[:300])
        self.assertEqual(metric(daemon, "embedscope_job_reply_disk_reads_total"), before + 1,
                         "the kept reply file was gone: the result was computed again")
        return r.body

    def test_one_owners_delete_leaves_the_others_reply_before_and_after_a_restart(self):
        a, b = self.start(self.cache.name), self.start(self.cache.name)
        blockers = [(d, exchange(BLOCKER, headers=ASYNC, base=d.base, source=THIRD)) for d in (a, b)]
        for d, r in blockers:
            self.assertEqual(r.status, 202, r.body[:300])
        alice, bob, carol = self.ask(a, "alice"), self.ask(b, "bob"), self.ask(b, "carol")
        self.assertNotEqual(bob, carol)
        for d, r in blockers:
            self.assertEqual(exchange(r.headers["Location"], method="DELETE", base=d.base, source=THIRD).status, 204)
        self.wait_done(a, alice, "alice")
        self.wait_done(b, bob, "bob")
        self.wait_done(b, carol, "carol")
        self.assertEqual(len(glob.glob(os.path.join(self.cache.name, "jobs", "*.reply"))), 1)  # one shared file
        # alice's DELETE on the replica that ran her job: bob's result (the other replica's job) stays
        self.assertEqual(exchange(alice, method="DELETE", headers=owner("alice"), base=a.base).status, 204)
        self.assertEqual(exchange(alice, headers=owner("alice"), base=a.base).status, 404)
        body = self.result_from_file(b, "bob")
        # a restart of both: the records count the file's holders; bob's DELETE leaves carol's result
        for d in (a, b):
            self.assertEqual(d.stop(), 0)
        c = self.start(self.cache.name)
        self.assertEqual(exchange(bob, headers=owner("bob"), base=c.base).status, 303)
        self.assertEqual(exchange(bob, method="DELETE", headers=owner("bob"), base=c.base).status, 204)
        self.assertEqual(exchange(bob, headers=owner("bob"), base=c.base).status, 404)
        self.assertEqual(exchange(carol, headers=owner("carol"), base=c.base).status, 303)
        self.assertEqual(self.result_from_file(c, "carol"), body)
        # the last holder's DELETE lets the file go
        self.assertEqual(exchange(carol, method="DELETE", headers=owner("carol"), base=c.base).status, 204)
        self.assertEqual(glob.glob(os.path.join(self.cache.name, "jobs", "*.reply")), [])


if __name__ == "__main__":
    unittest.main()
