"""Numbers served over HTTP against the numpy goldens of the core
(tests/golden/golden.json, written by tests/golden/make_golden.py): spectra,
explained-variance ratios, PCA coordinates (each component up to its sign),
capture of GPT-2's q/k/v by W_pos, cosine pairs; same selections and centrings
as the golden cases, tolerance the file's (1e-9 relative).

Also that JSON numbers round-trip doubles exactly: every number is written as
the 17-significant-digit text of a double, the same request gives the same
bytes, gzip carries the same bytes, and a value shared by two endpoints is the
same double in both."""
import gzip
import json
import os
import re
import unittest

import numpy as np

from httpkit import ROOT, get_json, query, rel_close, request

with open(os.path.join(ROOT, "tests/golden/golden.json")) as f:
    GOLDEN = json.load(f)
TOL = GOLDEN["tolerance"]
NUMBER = re.compile(rb'(?<=[\[:,])-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?=[\],}])')


def matrix_path(mid):
    model, name = mid.split("/")
    return "/v1/models/%s/matrices/%s" % (model, name)


def jansson_text(value):
    """How jansson writes a double with JSON_REAL_PRECISION(17): printf %.17g, a ".0" added
    when neither '.' nor 'e' appears, no '+' and no leading zeros in the exponent."""
    text = "%.17g" % value
    if "." not in text and "e" not in text:
        text += ".0"
    mantissa, e, exponent = text.partition("e")
    if e:
        sign = "-" if exponent.startswith("-") else ""
        text = mantissa + "e" + sign + exponent.lstrip("+-").lstrip("0")
    return text


class GoldenCase(unittest.TestCase):
    def get(self, path):
        r, doc = get_json(path)
        self.assertEqual(r.status, 200, r.body[:300])
        return doc

    def assert_rel(self, got, want, what):
        """got == want (a number or a list) to the golden tolerance, relative to want."""
        if not isinstance(got, list):
            got, want = [got], [want]
        self.assertEqual(len(got), len(want), what)
        for i, (g, w) in enumerate(zip(got, want)):
            self.assertTrue(rel_close(g, w, TOL), "%s[%d]: got %.17g, numpy %.17g" % (what, i, g, w))



class Comparison(GoldenCase):
    def test_the_comparison_can_fail(self):
        with self.assertRaises(AssertionError):
            self.assert_rel(1.0 + 3 * TOL, 1.0, "x")
        self.assert_rel(1.0 + TOL / 3, 1.0, "x")


class Spectra(GoldenCase):
    def test_spectra(self):
        """Every golden case by the default method (exact) and by method=values (tall and wide
        selections, every centring)."""
        self.assertEqual(len(GOLDEN["spectra"]), 22)
        for case, method in [(c, m) for c in GOLDEN["spectra"] for m in ("auto", "values")]:
            what = "%s rows=%r center=%s method=%s" % (case["matrix"], case["rows"], case["center"], method)
            with self.subTest(what):
                doc = self.get(matrix_path(case["matrix"]) + "/spectrum" +
                               query(rows=case["rows"], center=case["center"], method=method))
                inp = doc["input"]["matrix"]
                self.assertEqual((inp["id"], inp["n_rows"], inp["center"], inp["method"]),
                                 (case["matrix"], case["n"], case["center"], "exact" if method == "auto" else method))
                self.assertEqual(doc["rank"], case["r"])
                s = doc["singular_values"]
                self.assert_rel(s[:len(case["singular_values"])], case["singular_values"], what + " s")
                self.assert_rel(doc["explained_variance_ratio"][:len(case["evr"])], case["evr"], what + " evr")
                self.assert_rel(sum(s), case["sum_singular_values"], what + " sum s")
                self.assert_rel(sum(x * x for x in s), case["total_ss"], what + " sum s^2")
                cf = doc["components_for"]
                self.assertEqual((cf["0.5"], cf["0.9"], cf["0.99"]), (case["n50"], case["n90"], case["n99"]))


class ValuesAgainstNumpy(GoldenCase):
    def test_every_value_of_wpe_equals_numpy_sigma_only(self):
        """spectrum?method=values against numpy.linalg.svd(X, compute_uv=False) itself, all 768 values
        within 1e-13 of s_0 (backward-stable to rounding), for W_pos rows 1: in each centring."""
        x = np.load(os.path.join(ROOT, "data", "gpt2-small", "wpe.npy")).astype(np.float64)[1:]
        centred = {"none": x, "columns": x - x.mean(axis=0), "rows": x - x.mean(axis=1, keepdims=True)}
        for center, block in centred.items():
            with self.subTest(center=center):
                want = np.linalg.svd(block, compute_uv=False)
                doc = self.get(matrix_path("gpt2-small/wpe") + "/spectrum" +
                               query(rows="1:", center=center, method="values"))
                got = np.array(doc["singular_values"])
                self.assertEqual(got.shape, want.shape)
                worst = np.max(np.abs(got - want)) / want[0]
                self.assertLessEqual(worst, 1e-13, "max |s - numpy| / s_0 = %.3g" % worst)


class Pca(GoldenCase):
    def test_pca_coordinates_up_to_sign(self):
        for case in GOLDEN["pca"]:
            what = "%s rows=%r center=%s" % (case["matrix"], case["rows"], case["center"])
            with self.subTest(what):
                doc = self.get(matrix_path(case["matrix"]) + "/pca" +
                               query(rows=case["rows"], center=case["center"], k=case["k"]))
                self.assertEqual(doc["input"]["k"], case["k"])
                by_index = {r["index"]: r["coords"] for r in doc["rows"]}
                for j in range(case["k"]):
                    want = [c[j] for c in case["coords"]]
                    got = [by_index[item][j] for item in case["items"]]
                    pivot = max(range(len(want)), key=lambda i: abs(want[i]))
                    sign = 1.0 if (got[pivot] > 0) == (want[pivot] > 0) else -1.0
                    self.assert_rel([sign * g for g in got], want, "%s component %d" % (what, j))
                spec = self.get(matrix_path(case["matrix"]) + "/spectrum" +
                                query(rows=case["rows"], center=case["center"]))
                self.assert_rel(spec["singular_values"][:case["k"]], case["singular_values"], what + " s")


class Capture(GoldenCase):
    def test_capture_of_qkv_by_wpe(self):
        self.assertEqual(len(GOLDEN["capture"]), 6)
        for case in GOLDEN["capture"]:
            what = "%s by %s k=%d" % (case["b"], case["a"], case["k"])
            with self.subTest(what):
                doc = self.get("/v1/capture" + query(a=case["a"], a_rows=case["a_rows"], a_center=case["a_center"],
                                                     k=case["k"], b=case["b"], b_rows=case["b_rows"],
                                                     b_center=case["b_center"]))
                cap = doc["capture"]
                self.assertEqual(len(cap), case["count"])
                self.assert_rel(cap[:len(case["capture"])], case["capture"], what)
                self.assert_rel(doc["sum"], case["sum"], what + " sum")
                self.assertEqual(doc["baseline"], case["baseline"])
                self.assertEqual(doc["input"]["k"], case["k"])


class Cosine(GoldenCase):
    def test_cosine_pairs(self):
        for case in GOLDEN["cosine"]:
            what = "%s row %d" % (case["matrix"], case["row"])
            with self.subTest(what):
                doc = self.get(matrix_path(case["matrix"]) + "/cosine" + query(row=case["row"]))
                sims = dict(zip(doc["rows"], doc["similarity"]))
                self.assert_rel([sims[i] for i in case["items"]], case["similarity"], what)


class RoundTrip(GoldenCase):
    PATH = "/v1/models/gpt2-small/matrices/wpe/spectrum?rows=1:&center=columns"

    def test_the_text_of_every_number_is_the_exact_double(self):
        body = request(self.PATH).body
        tokens = NUMBER.findall(body)
        self.assertGreater(len(tokens), 3 * 768)
        reals = [t.decode() for t in tokens if re.search(rb"[.eE]", t)]
        self.assertGreater(len(reals), 3 * 768)
        for t in reals:
            self.assertEqual(jansson_text(float(t)), t)
        self.assertTrue(any(len(t.lstrip("-").split("e")[0].replace(".", "").lstrip("0")) == 17 for t in reals),
                        "no number written with 17 significant digits")

    def test_same_request_same_bytes_plain_and_gzip(self):
        first, second = request(self.PATH), request(self.PATH)
        self.assertEqual(first.body, second.body)
        zipped = request(self.PATH, headers={"Accept-Encoding": "gzip"})
        self.assertEqual(zipped.header("Content-Encoding"), "gzip")
        self.assertEqual(gzip.decompress(zipped.body), first.body)
        self.assertEqual(zipped.header("ETag"), first.header("ETag"))

    def test_a_value_is_the_same_double_in_every_endpoint(self):
        spec = self.get(self.PATH)
        vec = self.get("/v1/models/gpt2-small/matrices/wpe/vectors?rows=1:&k=3&center=columns")
        pca = self.get("/v1/models/gpt2-small/matrices/wpe/pca?rows=1:&k=3")
        for j in range(3):
            self.assertEqual(vec["vectors"][j]["singular_value"].hex(), spec["singular_values"][j].hex())
            self.assertEqual(pca["explained_variance_ratio"][j].hex(), spec["explained_variance_ratio"][j].hex())
        case = next(c for c in GOLDEN["spectra"] if c["matrix"] == "gpt2-small/wpe" and c["rows"] == "1:"
                    and c["center"] == "columns")
        self.assert_rel(spec["singular_values"][:20], case["singular_values"], "wpe 1: columns")


if __name__ == "__main__":
    unittest.main()
