"""First smoke tests of the daemon over real HTTP (stdlib only).

Run by tests/http/run.sh, which starts the daemon on the embedded default and
passes its base URL in EMBEDSCOPE_URL.
"""
import gzip
import json
import os
import unittest
import urllib.error
import urllib.request

BASE = os.environ.get("EMBEDSCOPE_URL", "http://127.0.0.1:8080")
WPE = "/v1/models/gpt2-small/matrices/wpe"


def fetch(path, method="GET", headers=None, data=None):
    """(status, headers, body bytes) of one request; HTTP errors are returned, not raised."""
    req = urllib.request.Request(BASE + path, method=method, headers=headers or {}, data=data)
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def get_json(path, **kw):
    status, headers, body = fetch(path, **kw)
    return status, headers, json.loads(body) if body else None


class Models(unittest.TestCase):
    def test_lists_the_embedded_default(self):
        status, headers, doc = get_json("/v1/models")
        self.assertEqual(status, 200)
        self.assertEqual(headers["Content-Type"], "application/json")
        models = {m["name"]: m for m in doc["models"]}
        for name in ("gpt2-small", "openai-gpt", "sinusoidal"):
            self.assertIn(name, models)
        wpe = {m["name"]: m for m in models["gpt2-small"]["matrices"]}["wpe"]
        self.assertEqual(wpe["shape"], [1024, 768])
        self.assertEqual(wpe["model_axis"], "columns")
        self.assertEqual(wpe["provenance"]["file_sha256"],
                         "1094c21cb3b5cc6db2be773a6a6a21566206c2669fca889d3b1883ae77e9b3d1")

    def test_matrix_row_norms_are_consistent(self):
        status, _, doc = get_json(WPE)
        self.assertEqual(status, 200)
        norms = doc["row_norms"]
        self.assertLessEqual(norms["min"], norms["median"])
        self.assertLessEqual(norms["median"], norms["max"])
        self.assertTrue(0 <= norms["argmin"] < 1024 and 0 <= norms["argmax"] < 1024)


class Pca(unittest.TestCase):
    def test_gpt2_helix(self):
        status, headers, doc = get_json(WPE + "/pca?k=3&rows=1:")
        self.assertEqual(status, 200)
        self.assertEqual(headers["Content-Type"], "application/json")
        self.assertTrue(headers["ETag"].startswith('W/"'))
        inp = doc["input"]
        self.assertEqual(inp["k"], 3)
        self.assertEqual(inp["matrix"]["id"], "gpt2-small/wpe")
        self.assertEqual(inp["matrix"]["rows"], "1:1024")
        self.assertEqual(inp["matrix"]["n_rows"], 1023)
        self.assertEqual(inp["matrix"]["center"], "columns")
        self.assertLess(inp["matrix"]["reconstruction_error"], 1e-12)
        self.assertEqual(len(doc["rows"]), 1023)
        self.assertEqual([r["index"] for r in doc["rows"][:2]], [1, 2])
        self.assertTrue(all(len(r["coords"]) == 3 for r in doc["rows"]))
        evr = doc["explained_variance_ratio"]
        self.assertEqual(len(evr), 3)
        self.assertTrue(0.5 < sum(evr) < 1)
        self.assertAlmostEqual(doc["cumulative"][2], sum(evr), places=12)

    def test_default_skips_nothing(self):
        _, _, doc = get_json(WPE + "/pca")
        self.assertEqual(doc["input"]["matrix"]["rows"], "0:1024")
        self.assertEqual(len(doc["rows"]), 1024)

    def test_etag_revalidates_and_gzip(self):
        status, headers, _ = fetch(WPE + "/pca?k=3&rows=1:")
        status, _, body = fetch(WPE + "/pca?rows=1:1024&k=3", headers={"If-None-Match": headers["ETag"]})
        self.assertEqual((status, body), (304, b""))
        status, headers, body = fetch(WPE + "/pca?k=3&rows=1:", headers={"Accept-Encoding": "gzip"})
        self.assertEqual(headers["Content-Encoding"], "gzip")
        self.assertEqual(len(json.loads(gzip.decompress(body))["rows"]), 1023)


class Errors(unittest.TestCase):
    def assert_problem(self, path, status, param=None, method="GET", **kw):
        got, headers, body = fetch(path, method=method, **kw)
        self.assertEqual(got, status, body)
        self.assertEqual(headers["Content-Type"], "application/problem+json")
        doc = json.loads(body)
        for key in ("type", "title", "status", "detail", "instance"):
            self.assertIn(key, doc)
        self.assertEqual(doc["status"], status)
        if param:
            self.assertEqual(doc.get("param", doc.get("limit")), param)
        return headers, doc

    def test_bad_parameter_is_400(self):
        _, doc = self.assert_problem(WPE + "/pca?k=abc", 400, "k")
        self.assertEqual(doc["type"], "/problems/invalid-parameter")

    def test_unknown_parameter_is_400(self):
        self.assert_problem(WPE + "/pca?kk=3", 400, "kk")

    def test_limit_is_named(self):
        _, doc = self.assert_problem(WPE + "/pca?k=100000", 400, "max_k")
        self.assertEqual(doc["limit"], "max_k")

    def test_unknown_matrix_is_404(self):
        self.assert_problem("/v1/models/gpt2-small/matrices/nope/pca", 404, "matrix")

    def test_incompatible_is_422(self):
        self.assert_problem("/v1/capture?a=gpt2-small/wpe&b=sinusoidal/rope64", 422, "b")

    def test_wrong_method_is_405_with_allow(self):
        headers, _ = self.assert_problem("/v1/models", 405, method="DELETE")
        self.assertEqual(headers["Allow"], "GET, HEAD, OPTIONS")


if __name__ == "__main__":
    unittest.main()
