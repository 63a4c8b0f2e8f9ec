"""The reply's size known before computing for every analysis: the table
entries (cosine offsets over any rows, toeplitz, periodicity, capture, alignment,
averaging, neighbors...), /v1/compare of any of them (and of pca), and the
hand-written ones (alignment per layer, attention per head, ranking and pattern,
rope/relative). On a daemon with a tiny max_response_bytes each is a 400 naming
the limit at once: no compute job, no decomposition, no reply computed (the
/metrics counters stay the same); the NPY size in the problem is exact (a daemon
without the limit answers with exactly that many bytes) and the CSV and
column-JSON sizes are bounds of the real bodies, and so is the JSON document's (issue 29 §4)."""
import io
import re
import unittest

import numpy as np

from httpkit import Daemon, get_json, request, settled_metrics

LIMIT = 1024  # the smallest the configuration accepts
# 256 positions x 160 dimensions: every table below is over 1024 bytes as NPY.
# Model w: 12 layers of q, k, v, o read by alignment/layers (20 x 160 each, rank 20: the
# top-m means for m = 1, 5, 10, 20; h3.v of rank 12 has only three, so every layer gets three).
# Model g: GPT-2's wpe and its layer 0 attention twice, as layers 0 and 1 (48 heads asked, 16 dimensions each).
LAYERS = {"h%d.%s" % (i, w): {"generator": "gaussian", "rows": 12 if (i, w) == (3, "v") else 20, "cols": 160,
                              "seed": 4 * i + j}
          for i in range(12) for j, w in enumerate("qkvo")}
ATTENTION = {"wpe": {"file": "gpt2-small/wpe.npy", "model_axis": "columns"},
             "h0.ln_1.weight": {"file": "gpt2-small/h0_ln_1_weight.npy", "model_axis": "columns"},
             "h0.ln_1.bias": {"file": "gpt2-small/h0_ln_1_bias.npy", "model_axis": "columns"},
             "h0.c_attn": {"file": "gpt2-small/h0_c_attn.npy", "model_axis": "rows"},
             "h0.c_attn.bias": {"file": "gpt2-small/h0_c_attn_bias.npy", "model_axis": "columns"}}
# a second layer h1 with h0's weights, so that the ranking's rows are heads x layers, not heads
ATTENTION.update({"h1" + name[2:]: entry for name, entry in ATTENTION.items() if name.startswith("h0.")})
MODELS = {"m": {"matrices": {"pe": {"generator": "sinusoidal", "n_positions": 256, "d_model": 160},
                             "rope": {"generator": "rope", "n_positions": 256, "d_model": 64}}},
          "w": {"matrices": LAYERS}, "g": {"n_heads": 12, "matrices": ATTENTION}}
PE = "/v1/models/m/matrices/pe"


def offsets(rows):
    """How many distinct differences |i - j| (0 included) the rows have."""
    return len({abs(a - b) for a in rows for b in rows})


SPARSE = [1, 2, 3, 5, 40, 41, 97, 200, 255]
# Each analysis whose reply size is now planned, with the shape of its table.
PLANNED = {
    "cosine offsets": (PE + "/cosine?mode=offset&rows=0:256", (256, 2)),
    "cosine offsets, a step": (PE + "/cosine?mode=offset&rows=10:250:3", (80, 2)),
    "cosine offsets, two slices": (PE + "/cosine?mode=offset&rows=0:100,150:250", (250, 2)),
    "cosine offsets, a row list": (PE + "/cosine?mode=offset&rows=" + ",".join(map(str, SPARSE)) + ",0:60:7",
                                   (offsets(SPARSE + list(range(0, 60, 7))), 2)),
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
    "compare cosine offsets, two slices": ("/v1/compare?matrices=m/pe,m/pe&analysis=cosine&mode=offset"
                                           "&rows=0:256;0:100,150:250", (506, 3)),
    "compare capture": ("/v1/compare?analysis=capture&a=m/pe&k=3&matrices=m/pe,m/pe", (320, 2)),
    "compare pca": ("/v1/compare?matrices=m/pe,m/pe&analysis=pca&k=3", (512, 4)),
    # the hand-written analyses: 12 layers x (3 top-m means x q, k, v, o)
    "alignment per layer": ("/v1/alignment/layers?model=w&r=m/pe&k=10", (12, 12)),
    "attention": ("/v1/attention?model=g&layer=0&queries=0:32&n_heads=48", (48, 4)),
    "attention ranking": ("/v1/attention/ranking?model=g&queries=0:16&n_heads=48", (96, 5)),  # 48 heads x 2 layers
    "attention pattern": ("/v1/attention/pattern?model=g&layer=0&head=1&queries=0:32&bins=0", (32, 32)),
    "attention pattern, binned": ("/v1/attention/pattern?model=g&layer=0&head=1&queries=10:30&bins=25", (20, 25)),
    "rope relative": ("/v1/rope/relative?matrix=m/rope&seed=1", (511, 2)),
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

    def test_json_document_bounded_before_computing(self):
        # the nested JSON document's tables are bounded (25 bytes a number, the row index included) and
        # refused on that bound like CSV, before any work; the real documents stay within it
        for name, (path, _) in PLANNED.items():
            with self.subTest(name):
                doc = self.refused_at_once(path)
                bound = int(re.search(r"could be up to (\d+) bytes", doc["detail"]).group(1))
                r = request(path, base=self.free.base)
                self.assertEqual(r.status, 200, r.body[:300])
                self.assertLessEqual(len(r.body), bound)


if __name__ == "__main__":
    unittest.main()
