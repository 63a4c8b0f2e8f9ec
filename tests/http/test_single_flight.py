"""Single flight across daemons sharing one server.cache_dir (replicas on one volume).

A decomposition one daemon is computing is waited for by the others (its lock file in
cache_dir, flock) and read from the file the first one writes, never computed twice:
the same cold request on two daemons at once, and two daemons warming the same list at
a cold start. A waiter whose holder dies (kill -9: the kernel drops the lock) computes
the key itself. /metrics tells them apart: embedscope_svd_computations_total counts
decompositions computed, embedscope_svd_disk_waits_total those waited for and read."""
import json
import os
import re
import shutil
import tempfile
import threading
import time
import unittest

from httpkit import HANG_S, Daemon, metrics, request

# ~1 s to decompose on an idle core: long enough for the second daemon to arrive while the
# first is still computing. The generator's exact singular values are (j+1)^-1.
GAUSSIAN = {"b": {"matrices": {"g": {"generator": "gaussian", "rows": 4096, "cols": 768, "seed": 1}}}}
SPECTRUM = "/v1/models/b/matrices/g/spectrum?center=none"


def wait_log(daemon, pattern, timeout=HANG_S):
    """The first match of the regular expression in daemon's log, waiting for it."""
    deadline = time.monotonic() + timeout
    while True:
        m = re.search(pattern, daemon.log())
        if m:
            return m
        if time.monotonic() > deadline:
            raise AssertionError("no %r in the log:\n%s" % (pattern, daemon.log()[-3000:]))
        time.sleep(0.01)


class Background:
    """One request answered on its own thread; .reply() waits for it."""

    def __init__(self, daemon, path):
        self.result = None
        self.thread = threading.Thread(target=self._run, args=(daemon.base, path))
        self.thread.start()

    def _run(self, base, path):
        try:
            self.result = request(path, base=base, timeout=300)
        except OSError as e:  # a killed daemon closes the connection
            self.result = e

    def reply(self):
        self.thread.join(300)
        return self.result


def counters(daemon):
    m = metrics(daemon.base)
    return {k: m["embedscope_svd_" + k + "_total"] for k in ("computations", "disk_loads", "disk_waits")}


class SingleFlight(unittest.TestCase):
    def setUp(self):
        self.cache = tempfile.mkdtemp(prefix="embedscope-sharedcache-")
        self.daemons = []

    def tearDown(self):
        for d in self.daemons:
            if d.proc.poll() is None:
                d.close()
            else:  # killed by the test
                d.dir.cleanup()
        shutil.rmtree(self.cache, ignore_errors=True)

    def daemon(self, **config):
        d = Daemon(dict({"server": {"cache_dir": self.cache}, "models": GAUSSIAN}, **config))
        self.daemons.append(d)
        return d

    def lock_files(self):
        return [f for f in os.listdir(self.cache) if f.endswith(".lock")]

    def assert_exact_spectrum(self, reply):
        self.assertEqual(reply.status, 200, reply.body[:300])
        s = json.loads(reply.body)["singular_values"]
        self.assertEqual(len(s), 768)
        for j in (0, 99, 767):
            self.assertAlmostEqual(s[j] * (j + 1), 1.0, places=9)

    def test_same_cold_request_on_two_daemons_is_computed_once(self):
        a, b = self.daemon(), self.daemon()
        first = Background(a, SPECTRUM)
        wait_log(a, r"computing b/g@")
        second = Background(b, SPECTRUM)
        holder = wait_log(b, r"waiting for pid (\d+) on \S+ computing b/g@")
        self.assertEqual(int(holder.group(1)), a.proc.pid)
        ra, rb = first.reply(), second.reply()
        self.assert_exact_spectrum(ra)
        self.assertEqual(json.loads(rb.body)["singular_values"], json.loads(ra.body)["singular_values"])
        self.assertEqual(counters(a), {"computations": 1, "disk_loads": 0, "disk_waits": 0})
        self.assertEqual(counters(b), {"computations": 0, "disk_loads": 1, "disk_waits": 1})
        self.assertNotRegex(b.log(), r"info +computing b/g@")
        self.assertEqual(self.lock_files(), [])  # removed by the holder when done
        self.assertEqual(len([f for f in os.listdir(self.cache) if f.endswith(".svd")]), 1)

    def test_waiter_computes_when_the_holder_dies(self):
        a, b = self.daemon(), self.daemon()
        Background(a, SPECTRUM)  # never answered: a is killed
        wait_log(a, r"computing b/g@")
        waiting = Background(b, SPECTRUM)
        wait_log(b, r"waiting for pid %d on \S+ computing b/g@" % a.proc.pid)
        self.assertEqual(len(self.lock_files()), 1)
        a.proc.kill()  # mid-computation: no file written; the kernel releases its lock
        a.proc.wait()
        self.assert_exact_spectrum(waiting.reply())
        self.assertEqual(counters(b), {"computations": 1, "disk_loads": 0, "disk_waits": 0})
        self.assertEqual(self.lock_files(), [])  # the dead holder's file, taken over and removed
        c = self.daemon()  # and the result is on disk for the next one
        self.assert_exact_spectrum(request(SPECTRUM, base=c.base))
        self.assertEqual(counters(c), {"computations": 0, "disk_loads": 1, "disk_waits": 0})

    def test_cold_start_warms_each_entry_once(self):
        """Two daemons started together on an empty cache_dir, warming the same two entries:
        two decompositions computed between them, the other two read from their files."""
        warm = [{"matrix": "b/g", "center": c} for c in ("none", "columns")]
        a, b = self.daemon(warm=warm), self.daemon(warm=warm)
        for d in (a, b):
            d.wait_ready(timeout=300)
        got = [counters(d) for d in (a, b)]
        self.assertEqual(sum(c["computations"] for c in got), 2, got)
        self.assertEqual(sum(c["disk_loads"] for c in got), 2, got)
        self.assertEqual(sum(len(re.findall(r"info +computing b/g@", d.log())) for d in (a, b)), 2)
        self.assertEqual(self.lock_files(), [])


if __name__ == "__main__":
    unittest.main()
