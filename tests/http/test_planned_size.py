"""The reply's size known before computing for the analyses whose tables'
shapes follow from the request: cosine offsets (evenly spaced rows), toeplitz,
periodicity (components and columns), capture, alignment, averaging, neighbors, and
/v1/compare of any of them (and of pca). On a
daemon with a tiny max_response_bytes each is a 400 naming the limit at once:
no compute job, no decomposition, no reply computed (the /metrics counters stay
the same); the NPY size in the problem is exact (a daemon without the limit
answers with exactly that many bytes) and the CSV and column-JSON sizes are
bounds of the real bodies."""
import io
import re
import unittest

import numpy as np

from httpkit import Daemon, get_json, request, settled_metrics

LIMIT = 1024  # the smallest the configuration accepts
# 256 positions x 160 dimensions: every table below is over 1024 bytes as NPY.
MODELS = {"m": {"matrices": {"pe": {"generator": "sinusoidal", "n_positions": 256, "d_model": 160}}}}
PE = "/v1/models/m/matrices/pe"
# Each analysis whose reply size is now planned, with the shape of its table.
PLANNED = {
    "cosine offsets": (PE + "/cosine?mode=offset&rows=0:256", (256, 2)),
    "cosine offsets, a step": (PE + "/cosine?mode=offset&rows=10:250:3", (80, 2)),
    "toeplitz": (PE + "/toeplitz?rows=0:200", (399, 2)),
    "toeplitz, a row list": (PE + "/toeplitz?rows=5,9,40", (71, 2)),
    "periodicity components": (PE + "/periodicity?k=30", (30, 5)),
    "periodicity columns": (PE + "/periodicity?axis=columns", (160, 8)),
    "capture": ("/v1/capture?a=m/pe&b=m/pe&k=3", (160,)),  # a column: one dimension in NPY
    "averaging": (PE + "/averaging?g=4", (256,)),
    "neighbors": (PE + "/neighbors?row=7&k=100", (100, 2)),
    "neighbors, fewer candidates than k": (PE + "/neighbors?row=7&k=100&rows=0:80", (79, 2)),
    "neighbors, query outside the selection": (PE + "/neighbors?row=100&k=100&rows=0:80", (80, 2)),
    "alignment": ("/v1/alignment?w=m/pe&r=m/pe&kw=20&kr=30&bins=0&table=overlap", (20, 30)),
    "alignment capture": ("/v1/alignment?w=m/pe&r=m/pe&table=capture", (160,)),
    # /v1/compare stacks every matrix's table with a first column "matrix"
    "compare periodicity": ("/v1/compare?matrices=m/pe,m/pe&analysis=periodicity&k=30&rows=0:256;0:128",
                            (60, 6)),
    "compare cosine offsets": ("/v1/compare?matrices=m/pe,m/pe&analysis=cosine&mode=offset&rows=0:256;0:100",
                               (356, 3)),
    "compare capture": ("/v1/compare?analysis=capture&a=m/pe&k=3&matrices=m/pe,m/pe", (320, 2)),
    "compare pca": ("/v1/compare?matrices=m/pe,m/pe&analysis=pca&k=3", (512, 4)),
}
COUNTERS = ("embedscope_compute_jobs_total", "embedscope_svd_computations_total",
            "embedscope_svd_cache_misses_total", "embedscope_response_cache_misses_total")


def npy_size(shape):
    """Bytes of numpy's own .npy of a float64 array of this shape."""
    buf = io.BytesIO()
    np.save(buf, np.zeros(shape))
    return len(buf.getvalue())


def with_format(path, fmt):
    return path + ("&" if "?" in path else "?") + fmt


class PlannedSizes(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.small = Daemon({"limits": {"max_response_bytes": LIMIT}, "models": MODELS})
        cls.free = Daemon({"models": MODELS})

    @classmethod
    def tearDownClass(cls):
        cls.small.close()
        cls.free.close()

    def refused_at_once(self, path):
        """The problem of a request refused for its size, checking nothing was computed."""
        before = settled_metrics(self.small.base)
        r, doc = get_json(path, base=self.small.base)
        after = settled_metrics(self.small.base)
        self.assertEqual((r.status, doc.get("limit")), (400, "max_response_bytes"), r.body[:400])
        self.assertIn("known before computing", doc["detail"])
        for name in COUNTERS:
            self.assertEqual(after[name], before[name], name)
        return doc

    def test_npy_size_exact_before_computing(self):
        for name, (path, shape) in PLANNED.items():
            with self.subTest(name):
                doc = self.refused_at_once(with_format(path, "format=npy"))
                want = npy_size(shape)
                self.assertIn("would be %d bytes" % want, doc["detail"])
                r = request(with_format(path, "format=npy"), base=self.free.base)
                self.assertEqual(r.status, 200, r.body[:300])
                self.assertEqual(len(r.body), want)
                self.assertEqual(np.load(io.BytesIO(r.body)).shape, shape)

    def test_csv_and_column_json_bounded_before_computing(self):
        for name, (path, _) in PLANNED.items():
            for fmt in ("format=csv", "orient=columns"):
                with self.subTest(name, fmt=fmt):
                    doc = self.refused_at_once(with_format(path, fmt))
                    bound = int(re.search(r"could be up to (\d+) bytes", doc["detail"]).group(1))
                    r = request(with_format(path, fmt), base=self.free.base)
                    self.assertEqual(r.status, 200, r.body[:300])
                    self.assertLessEqual(len(r.body), bound)

    def test_unevenly_spaced_offsets_checked_once_rendered(self):
        # the number of distinct offsets of an arbitrary row list is only known from its pairs
        for path in (PE + "/cosine?mode=offset&rows=0:100,150:250&format=npy",
                     "/v1/compare?matrices=m/pe,m/pe&analysis=cosine&mode=offset&rows=0:256;0:100,150:250"
                     "&format=npy"):
            with self.subTest(path):
                r, doc = get_json(path, base=self.small.base)
                self.assertEqual((r.status, doc.get("limit")), (400, "max_response_bytes"))
                self.assertNotIn("known before computing", doc["detail"])


if __name__ == "__main__":
    unittest.main()
