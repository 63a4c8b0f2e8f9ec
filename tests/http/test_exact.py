"""The analyses added so that no table cell and no number needs numpy afterwards, against the
numpy goldens of tests/golden/make_golden_analyses.py (golden_analyses.json), in the JSON
document and in every table representation (NPY, CSV, column JSON):

- cosine of centred rows (center=columns; center=rows), modes row, offset and matrix;
- /v1/compare for cosine (side by side, equal to numpy per matrix);
- pca?average=g&basis=original: the averaged rows in the unaveraged rows' PCA basis;
- periodicity?axis=columns: period, phase, amplitude, r2 and the g-test of every column.

Everything to 1e-12 (relative to the largest value of the quantity), except what depends on a
refined frequency (a flat maximum located by golden-section search, in numpy as in the daemon):
fit cycles and periods, phase, amplitude and r2 to 1e-6, as the component periods."""
import csv
import io
import json
import math
import os
import unittest

import numpy as np

from httpkit import ROOT, WPE, request

GOLDEN = json.load(open(os.path.join(ROOT, "tests", "golden", "golden_analyses.json")))
TOL, REFINED = GOLDEN["tolerance"], GOLDEN["refined_tolerance"]


def get(path):
    r = request(path)
    assert r.status == 200, (path, r.status, r.body[:300])
    return r


def npy(path):
    return np.load(io.BytesIO(get(path + "&format=npy").body), allow_pickle=False)


def csv_table(path):
    rows = list(csv.reader(io.StringIO(get(path + "&format=csv").body.decode())))
    return rows[0], rows[1:]


class Case(unittest.TestCase):
    def close(self, got, want, tol=TOL, what=""):
        got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
        self.assertEqual(got.shape, want.shape, what)
        scale = max(float(np.max(np.abs(want))) if want.size else 0.0, 1e-300)
        err = float(np.max(np.abs(got - want))) if want.size else 0.0
        self.assertLessEqual(err, tol * scale, "%s: max error %.3g (scale %.3g)" % (what, err, scale))

    def every_table_form(self, path, column, want, tol=TOL):
        """The named column of the path's main table as NPY, CSV and column JSON, all equal to want."""
        header, body = csv_table(path)
        j = header.index(column)
        values = npy(path)
        as_2d = values.reshape(len(body), len(header) - 1)
        self.close(as_2d[:, j - 1], want, tol, column + " (NPY)")
        self.close([float(r[j]) for r in body], want, tol, column + " (CSV)")
        self.close(get(path + "&orient=columns").json()[column], want, tol, column + " (column JSON)")


class CentredCosine(Case):
    def test_row_mode(self):
        for g in GOLDEN["cosine_row"]:
            path = WPE + "/cosine?rows=%s&row=%d&center=%s" % (g["rows"], g["row"], g["center"])
            with self.subTest(path=path):
                doc = get(path).json()
                self.assertEqual(doc["input"]["matrix"]["center"], g["center"])
                self.close(doc["similarity"], g["similarity"], what="similarity")
                self.every_table_form(path, "similarity", g["similarity"])

    def test_offset_and_matrix_modes(self):
        for g in GOLDEN["cosine_offset"]:
            path = WPE + "/cosine?mode=offset&rows=%s&center=%s" % (g["rows"], g["center"])
            doc = get(path).json()
            self.close(doc["mean"], g["mean"], what="offset means")
            self.assertEqual(doc["pairs"], g["pairs"])
            self.every_table_form(path, "mean", g["mean"])
        for g in GOLDEN["cosine_matrix"]:
            path = WPE + "/cosine?mode=matrix&bins=0&rows=%s&center=%s" % (g["rows"], g["center"])
            self.close(get(path).json()["values"], g["values"], what="matrix")
            self.close(npy(path), g["values"], what="matrix (NPY)")

    def test_uncentred_stays_the_default(self):
        plain, none = get(WPE + "/cosine?rows=0:64&row=5").json(), get(WPE + "/cosine?rows=0:64&row=5&center=none").json()
        self.assertEqual(plain["similarity"], none["similarity"])
        centred = get(WPE + "/cosine?rows=0:64&row=5&center=columns").json()
        self.assertNotEqual(plain["similarity"], centred["similarity"])

    def test_compare_side_by_side(self):
        g = GOLDEN["compare_cosine_offset"]
        path = "/v1/compare?matrices=%s&analysis=cosine&mode=offset&rows=0:64&center=columns" % ",".join(g["matrices"])
        doc = get(path).json()
        for res, want in zip(doc["results"], g["results"]):
            self.close(res["mean"], want["mean"], what="compare mean")
        stacked = npy(path)  # offset-indexed rows, matrix first
        self.assertEqual(stacked.shape, (128, 3))
        self.assertEqual(stacked[:, 0].tolist(), [0.0] * 64 + [1.0] * 64)
        self.close(stacked[:, 1], g["results"][0]["mean"] + g["results"][1]["mean"], what="stacked means")
        # per-matrix centring, ';'-separated
        mixed = get("/v1/compare?matrices=%s&analysis=cosine&row=3&rows=0:64&center=columns;none"
                    % ",".join(g["matrices"])).json()
        self.assertEqual([r["input"]["matrix"]["center"] for r in mixed["results"]], ["columns", "none"])


class CompareCapture(Case):
    def test_each_matrix_against_one_reference(self):
        ref = "a=gpt2-small/wpe&a_rows=1:&a_center=columns&k=10"
        ids = ["gpt2-small/h0.q", "gpt2-small/h0.k", "gpt2-small/h0.v"]
        path = "/v1/compare?analysis=capture&%s&matrices=%s&rows=0:64;;&center=columns" % (ref, ",".join(ids))
        doc = get(path).json()
        self.assertEqual(doc["input"]["matrices"], ids)
        stacked = npy(path)
        at = 0
        for i, (res, b) in enumerate(zip(doc["results"], ids)):
            rows = "&b_rows=0:64" if i == 0 else ""
            alone = get("/v1/capture?%s&b=%s&b_center=columns%s" % (ref, b, rows)).json()
            self.assertEqual((res["input"]["a"]["id"], res["input"]["b"]["id"]), ("gpt2-small/wpe", b))
            self.assertEqual(res["input"]["b"]["rows"], alone["input"]["b"]["rows"])
            self.close(res["capture"], alone["capture"], what="capture of " + b)
            self.assertEqual(res["sum"], alone["sum"])
            n = len(res["capture"])
            self.assertEqual(stacked[at:at + n, 0].tolist(), [float(i)] * n)
            self.close(stacked[at:at + n, 1], res["capture"], what="stacked capture")
            at += n
        self.assertEqual(at, len(stacked))
        for bad, param in (("/v1/compare?analysis=capture&matrices=gpt2-small/h0.q&k=3", "a"),
                           ("/v1/compare?analysis=pca&a=gpt2-small/wpe&matrices=gpt2-small/h0.q", "a"),
                           ("/v1/compare?analysis=capture&a=gpt2-small/wpe&b_rows=1:&matrices=gpt2-small/h0.q", "b_rows")):
            r = request(bad)
            self.assertEqual((r.status, r.json().get("param")), (400, param), bad)


class BasisOriginal(Case):
    def test_averaged_rows_in_the_unaveraged_basis(self):
        for g in GOLDEN["basis_original"]:
            path = WPE + "/pca?rows=%s&average=%d&basis=original&k=%d" % (g["rows"], g["average"], g["k"])
            doc = get(path).json()
            self.assertEqual(doc["input"]["basis"], "original")
            by_row = {r["index"]: r["coords"] for r in doc["rows"]}
            self.close([by_row[p] for p in g["picks"]], g["coords"], TOL * g["max_abs"] / np.max(np.abs(g["coords"])),
                       "coords")
            self.close(doc["explained_variance_ratio"], g["explained_variance_ratio"], what="evr")
            coords = npy(path)
            first = int(g["rows"].rstrip(":"))
            self.close(coords[[p - first for p in g["picks"]]], g["coords"],
                       TOL * g["max_abs"] / np.max(np.abs(g["coords"])), "coords (NPY)")
        # the unaveraged basis is that of pca without averaging: averaging by 1 changes nothing
        plain = npy(WPE + "/pca?rows=1:&k=3")
        one = npy(WPE + "/pca?rows=1:&k=3&average=1&basis=original")
        self.close(one, plain, what="average=1 in the original basis")

    def test_needs_averaged_rows(self):
        for path in (WPE + "/pca?rows=1:&basis=original", WPE + "/pca?rows=1:&average=4&average_mode=groups&basis=original"):
            r = request(path)
            self.assertEqual((r.status, r.json().get("param")), (400, "basis"), path)


class ColumnPeriodicity(Case):
    def test_every_column_against_numpy(self):
        g = GOLDEN["periodicity_columns"]
        path = WPE + "/periodicity?rows=%s&axis=columns" % g["rows"]
        doc = get(path).json()
        self.assertEqual(doc["n"], g["n"])
        self.assertEqual(len(doc["columns"]), 768)
        header, body = csv_table(path)
        self.assertEqual(header, ["column", "peak_bin", "cycles", "period", "phase", "amplitude", "r2", "p_value",
                                  "no_period_reason"])
        table = npy(path)
        for key, want in g["columns"].items():
            j = int(key)
            got = doc["columns"][j]
            with self.subTest(column=j):
                self.assertEqual(got["index"], j)
                self.assertEqual(got["peak_bin"], want["peak_bin"])
                self.assertEqual(got["no_period_reason"], None if want["verdict"] == "found" else want["verdict"])
                self.close(got["peak_share"], want["peak_share"], what="peak share")
                self.close(got["significance"]["g"], want["g"], what="g")
                self.assertLessEqual(abs(got["significance"]["p_value"] - want["p_value"]),
                                     1e-9 * want["p_value"] + 1e-300)
                for name in ("fit_cycles", "fit_period", "amplitude", "r2"):
                    self.close(got[name], want[name], REFINED, name)
                self.assertLessEqual(abs(math.remainder(got["phase"] - want["phase"], 2 * math.pi)), REFINED, "phase")
                # the table holds the same numbers, NaN / empty where the document has null
                row = table[j]
                self.assertEqual(row[0], want["peak_bin"])
                if want["verdict"] == "found":
                    self.assertEqual(row[2], got["period"])
                    self.assertEqual(body[j][8], "")
                else:
                    self.assertTrue(math.isnan(row[2]))
                    self.assertEqual(body[j][3], "")
                    self.assertEqual(body[j][8], want["verdict"])
                self.assertEqual((row[3], row[4], row[5], row[6]),
                                 (got["phase"], got["amplitude"], got["r2"], got["significance"]["p_value"]))

    def test_global_best_fit_in_every_search_range(self):
        # The fit is the best sinusoid within each column's bracket [peak - 1, peak + 1], not a local
        # maximum of it: 7 of W_pos' 597 periodic columns (113, 150, 254, 384, 442, 588, 592) reported a lower
        # side maximum before the bracket was scanned. numpy scans each bracket densely (801 points, lstsq)
        # and refines the best point.
        g = GOLDEN["periodicity_all_columns"]
        doc = get(WPE + "/periodicity?rows=%s&axis=columns" % g["rows"]).json()
        self.assertEqual(sum(c["verdict"] == "found" for c in g["columns"]), 597)
        for got, want in zip(doc["columns"], g["columns"]):
            with self.subTest(column=got["index"]):
                self.assertEqual(got["peak_bin"], want["peak_bin"])
                self.assertEqual(got["no_period_reason"], None if want["verdict"] == "found" else want["verdict"])
                self.close(got["fit_cycles"], want["fit_cycles"], REFINED, "fit_cycles")
                self.close(got["r2"], want["r2"], REFINED, "r2")

    def test_k_is_for_components_and_components_get_phases(self):
        r = request(WPE + "/periodicity?rows=1:&axis=columns&k=4")  # k=3, its documented default, is accepted
        self.assertEqual((r.status, r.json()["param"]), (400, "k"))
        comp = get(WPE + "/periodicity?rows=1:&k=2").json()["components"][0]
        self.assertTrue({"phase", "amplitude", "r2"} <= set(comp))
        self.assertTrue(0 < comp["r2"] <= 1)


if __name__ == "__main__":
    unittest.main()
