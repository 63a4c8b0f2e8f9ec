"""The exact nearest-neighbours endpoint against numpy (tests/golden/golden_neighbors.json,
written by tests/golden/make_golden_neighbors.py): the same rows in the same order and
their scores to the golden tolerance, in the full space and the PCA space, by cosine and
euclidean; the CSV and NPY tables equal the JSON; bad parameters are 400s naming them."""
import csv
import io
import json
import os
import unittest

import numpy as np

from httpkit import ROOT, ProblemAssertions, get_json, query, rel_close, request

with open(os.path.join(ROOT, "tests/golden/golden_neighbors.json")) as f:
    GOLDEN = json.load(f)
TOL = GOLDEN["tolerance"]
WPE = "/v1/models/gpt2-small/matrices/wpe/neighbors"


def path_of(case):
    model, name = case["matrix"].split("/")
    params = {"rows": case["rows"], "row": case["row"], "k": case["k"], "metric": case["metric"],
              "space": case["space"]}
    if case["components"]:
        params["components"] = case["components"]
    return "/v1/models/%s/matrices/%s/neighbors%s" % (model, name, query(**params))


class Neighbors(ProblemAssertions):
    def matches(self, doc, case):
        return doc["rows"] == case["want_rows"] and all(
            rel_close(g, w, TOL) for g, w in zip(doc["scores"], case["want_scores"]))

    def test_every_golden_case(self):
        for case in GOLDEN["cases"]:
            with self.subTest(path=path_of(case)):
                r, doc = get_json(path_of(case))
                self.assertEqual(r.status, 200, r.body[:300])
                self.assertEqual(doc["rows"], case["want_rows"])
                self.assertEqual(len(doc["scores"]), case["k"])
                for g, w in zip(doc["scores"], case["want_scores"]):
                    self.assertTrue(rel_close(g, w, TOL), "got %.17g, numpy %.17g" % (g, w))
                self.assertEqual(doc["score"], "cosine similarity" if case["metric"] == "cosine" else "euclidean distance")
                self.assertNotIn(case["row"], doc["rows"])

    def test_the_comparison_can_fail(self):
        case = dict(GOLDEN["cases"][0])
        doc = get_json(path_of(case))[1]
        swapped = dict(case, want_rows=case["want_rows"][1::-1] + case["want_rows"][2:])
        self.assertFalse(self.matches(doc, swapped))
        nudged = dict(case, want_scores=[case["want_scores"][0] * (1 + 1e-6)] + case["want_scores"][1:])
        self.assertFalse(self.matches(doc, nudged))

    def test_tables_equal_the_json(self):
        path = path_of(GOLDEN["cases"][2])
        doc = get_json(path)[1]
        text = request(path + "&format=csv").body.decode()
        rows = list(csv.reader(io.StringIO(text)))
        self.assertEqual(rows[0], ["rank", "row", "score"])
        self.assertEqual([int(r[0]) for r in rows[1:]], list(range(1, len(doc["rows"]) + 1)))
        self.assertEqual([int(r[1]) for r in rows[1:]], doc["rows"])
        self.assertEqual([float(r[2]) for r in rows[1:]], doc["scores"])
        table = np.load(io.BytesIO(request(path + "&format=npy").body))
        self.assertEqual(table.shape, (len(doc["rows"]), 2))
        self.assertEqual(table[:, 0].astype(int).tolist(), doc["rows"])
        self.assertEqual(table[:, 1].tolist(), doc["scores"])

    def test_k_beyond_the_candidates_gives_them_all(self):
        r, doc = get_json(WPE + query(rows="0:5", row=2, k=50))
        self.assertEqual(r.status, 200, r.body[:300])
        self.assertEqual(sorted(doc["rows"]), [0, 1, 3, 4])

    def test_errors(self):
        self.assert_problem(WPE, 400, param="row")
        self.assert_problem(WPE + "?row=1024", 400, param="row")
        self.assert_problem(WPE + "?row=1&k=0", 400, param="k")
        self.assert_problem(WPE + "?row=1&k=1001", 400, param="k")
        self.assert_problem(WPE + "?row=1&metric=manhattan", 400, param="metric")
        self.assert_problem(WPE + "?row=1&space=umap", 400, param="space")
        self.assert_problem(WPE + "?row=1&components=4", 400, param="components")  # space=pca only (3, its default, is accepted)
        self.assert_problem(WPE + "?row=0&rows=1:&space=pca", 400, param="row")
        self.assert_problem(WPE + "?row=1&space=pca&components=769", 400)
        self.assert_problem(WPE + "?row=1&table=values", 400, param="table")


if __name__ == "__main__":
    unittest.main()
