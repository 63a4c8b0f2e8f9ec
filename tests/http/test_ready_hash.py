"""A file entry mapped without a record in server.cache_dir is served before its sha256 is known
(issue 33 §6; docs/operations.md, "Data files: mapped, not copied"): the daemon is ready (/readyz 200) while
the hash is held back, /v1/models says "sha256": null, "sha256_state": "computing", a request meanwhile
answers the same numbers as numpy, and once the hash is released it appears (the tensor bytes' sha256),
its record is in cache_dir and the next start reads it. A file written in place while it is hashed gets
no hash and no record ("failed").

Nothing here depends on timing: the daemon's background hashing waits while the file named by
ES_TEST_HASH_HOLD exists (a test hook of src/store/digest.c), so the test decides when the hash may
finish; waits for the hash to appear are bounded by HANG_S only."""
import hashlib
import json
import os
import tempfile
import time
import unittest

import numpy as np

from httpkit import HANG_S, SYNC, Daemon, request

ROWS, COLS = 300, 20
MATRIX = "/v1/models/big/matrices/x"


def provenance(base):
    models = request("/v1/models", base=base).json()["models"]
    return [x["provenance"] for m in models for x in m["matrices"] if x["id"] == "big/x"][0]


def settled_provenance(base):
    """The provenance once the hash is no longer computing (bounded by HANG_S: a guard, not a check of speed)."""
    deadline = time.monotonic() + HANG_S
    while time.monotonic() < deadline:
        p = provenance(base)
        if p["sha256_state"] != "computing":
            return p
        time.sleep(0.05)
    raise AssertionError("the sha256 was still computing after %d s" % HANG_S)


class HashAfterReady(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="embedscope-readyhash-")
        self.path = os.path.join(self.tmp.name, "x.npy")
        self.x = np.random.default_rng(33).standard_normal((ROWS, COLS))
        np.save(self.path, self.x)
        self.written = time.time()
        self.cache = os.path.join(self.tmp.name, "cache")
        self.hold = os.path.join(self.tmp.name, "hold")
        open(self.hold, "w").close()
        self.daemons = []

    def tearDown(self):
        for d in self.daemons:
            d.close()
        self.tmp.cleanup()

    def start(self):
        # one HTTP thread: a repeated request meets the thread's target memo, which a hash settled since must miss
        config = {"data_dir": self.tmp.name, "server": {"cache_dir": self.cache, "threads": 1},
                  "models": {"big": {"matrices": {"x": {"file": "x.npy"}}}}}
        d = Daemon(config, env={"ES_TEST_HASH_HOLD": self.hold})
        self.daemons.append(d)
        return d

    def tensor_sha(self):
        with open(self.path, "rb") as f:
            data = f.read()
        return hashlib.sha256(data[len(data) - ROWS * COLS * 8:]).hexdigest(), hashlib.sha256(data).hexdigest()

    def records(self):
        return [n for n in os.listdir(self.cache) if n.endswith(".tensor")] if os.path.isdir(self.cache) else []

    def release_settled(self):
        """Let the hash finish, once the file's status is old enough for its stamp to be recorded
        (ES_TC_SETTLE_NS, 2 s; a record is refused before)."""
        time.sleep(max(0.0, self.written + 2.5 - time.time()))
        os.unlink(self.hold)

    def spectrum(self, base):
        r = request(MATRIX + "/spectrum", base=base, headers=SYNC)
        self.assertEqual(r.status, 200, r.body[:500])
        return r.json()

    def test_ready_before_the_hash_and_correct_meanwhile(self):
        d = self.start()
        d.wait_ready()
        self.assertTrue(os.path.exists(self.hold))  # ready while the hash cannot have finished
        p = provenance(d.base)
        self.assertIsNone(p["sha256"])
        self.assertIsNone(p["file_sha256"])
        self.assertEqual(p["sha256_state"], "computing")
        self.assertEqual(self.records(), [])
        doc = self.spectrum(d.base)
        self.assertIsNone(doc["input"]["matrix"]["sha256"])
        centred = self.x - self.x.mean(axis=0)
        want = np.linalg.svd(centred, compute_uv=False)
        np.testing.assert_allclose(doc["singular_values"], want, rtol=1e-12)
        self.release_settled()
        p = settled_provenance(d.base)
        tensor_sha, file_sha = self.tensor_sha()
        self.assertEqual(p["sha256_state"], "known")
        self.assertEqual(p["sha256"], tensor_sha)
        self.assertEqual(p["file_sha256"], file_sha)
        self.assertEqual(len(self.records()), 1)
        again = self.spectrum(d.base)
        self.assertEqual(again["input"]["matrix"]["sha256"], tensor_sha)
        self.assertEqual(again["singular_values"], doc["singular_values"])
        d.close()
        self.daemons.remove(d)
        # the next start reads the record: the hash is known at once, though the hook would hold it
        open(self.hold, "w").close()
        d2 = self.start()
        d2.wait_ready()
        p = provenance(d2.base)
        self.assertEqual((p["sha256_state"], p["sha256"]), ("known", tensor_sha))
        self.assertIn("sha256 from its record in cache_dir", d2.log())

    def test_changed_while_hashed_gets_no_hash(self):
        d = self.start()
        d.wait_ready()
        st = os.stat(self.path)
        with open(self.path, "r+b") as f:  # in place: the same size, other bytes, a later modification time
            f.seek(-8, os.SEEK_END)
            f.write(np.float64(100.25).tobytes())
        os.utime(self.path, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
        self.release_settled()
        p = settled_provenance(d.base)
        self.assertEqual(p["sha256_state"], "failed")
        self.assertIsNone(p["sha256"])
        self.assertIn("changed while its sha256 was computed", p["sha256_error"])
        self.assertEqual(self.records(), [])
        self.assertIn("sha256 not known", d.log())


class HashAfterCalibration(unittest.TestCase):
    """A daemon that calibrates its cost model (the default, --cost-rates calibrate) starts the files'
    background sha256s only once the calibration is done: on a 16-core host the hashing beside it made the
    calibration, which /readyz waits for, take 5.0 s instead of 1.0 (bench/results/2026-11-28-xeon16-http.md),
    and would bias the rates it measures. No hold hook: unheld, this file's hash takes milliseconds and its
    log line came before the calibration's."""

    def test_hash_logged_after_the_calibration(self):
        with tempfile.TemporaryDirectory(prefix="embedscope-readyhash-") as tmp:
            np.save(os.path.join(tmp, "x.npy"), np.random.default_rng(34).standard_normal((ROWS, COLS)))
            config = {"data_dir": tmp, "models": {"big": {"matrices": {"x": {"file": "x.npy"}}}}}
            d = Daemon(config, cost_rates=None)
            try:
                d.wait_ready()
                p = settled_provenance(d.base)
                self.assertEqual(p["sha256_state"], "known")
                log = d.log()
            finally:
                d.close()
            calibrated, hashed = log.find("cost model calibrated in"), log.find("sha256 of 1 tensor")
            self.assertGreaterEqual(calibrated, 0, log)
            self.assertGreater(hashed, calibrated, log)


if __name__ == "__main__":
    unittest.main()
