"""Representations of analysis results (src/http/format.c): for every tabular
endpoint and every one of its tables, NPY parsed with numpy, CSV parsed with
csv and the column JSON (orient=columns, read by pandas) hold exactly the same
float64 values and index; the main tables equal the numbers of the default JSON
document; format / Accept negotiation with q-values, 406, Vary, per-format
ETags, 304 and gzip."""
import csv
import gzip
import io
import unittest

import numpy as np
import pandas as pd

from httpkit import WPE, openapi_document, request

A = "a=gpt2-small/wpe&b=gpt2-small/h0.q&a_rows=0:64&b_rows=0:64"
# (request, tables it produces)
ENDPOINTS = [
    (WPE + "/pca?k=3&rows=1:", ["coords", "variance"]),
    (WPE + "/spectrum?rows=0:100", ["spectrum"]),
    (WPE + "/cosine?row=5&rows=0:50", ["similarity"]),
    (WPE + "/cosine?mode=offset&rows=0:50", ["offsets"]),
    (WPE + "/cosine?mode=matrix&bins=16", ["values"]),
    (WPE + "/vectors?k=2&rows=0:64", ["vectors", "singular_values"]),
    (WPE + "/vectors?k=2&rows=0:64&side=left", ["vectors", "singular_values"]),
    ("/v1/capture?" + A + "&k=5", ["capture"]),
    ("/v1/overlap?" + A + "&bins=8", ["overlap"]),
    (WPE + "/periodicity?rows=1:", ["components"]),
    (WPE + "/outliers", ["scores"]),
    (WPE + "/toeplitz?rows=0:64", ["diagonals"]),
    (WPE + "/averaging?g=4&rows=0:64", ["displacement"]),
    ("/v1/alignment?w=gpt2-small/h0.q&r=gpt2-small/wpe&k=5&bins=4", ["capture", "top_mean", "overlap"]),
    ("/v1/attention?model=gpt2-small&layer=0&queries=0:32", ["heads"]),
    ("/v1/attention/ranking?model=gpt2-small&queries=0:16", ["heads"]),
    ("/v1/attention/pattern?model=gpt2-small&layer=0&head=1&queries=0:32&bins=8", ["values"]),
    ("/v1/rope/relative?matrix=sinusoidal/rope64&seed=2", ["diagonals"]),
]


def get(path, **kw):
    r = request(path, **kw)
    assert r.status == 200, (path, r.status, r.body[:300])
    return r


def with_params(path, params):
    return path + ("&" if "?" in path else "?") + params


class EveryTable(unittest.TestCase):
    def test_npy_csv_and_columns_hold_the_same_numbers(self):
        for path, tables in ENDPOINTS:
            for table in tables:
                with self.subTest(path=path, table=table):
                    self.check_table(path, table)

    def check_table(self, path, table):
        npy = get(with_params(path, "format=npy&table=" + table))
        self.assertEqual(npy.header("Content-Type"), "application/x-npy")
        values = np.load(io.BytesIO(npy.body), allow_pickle=False)
        self.assertEqual(values.dtype, np.dtype("<f8"))
        text = get(with_params(path, "format=csv&table=" + table))
        self.assertTrue(text.header("Content-Type").startswith("text/csv"))
        rows = list(csv.reader(io.StringIO(text.body.decode())))
        header, body = rows[0], rows[1:]
        from_csv = np.array([[float(x) for x in row[1:]] for row in body], dtype=np.float64)
        index = np.array([float(row[0]) for row in body])
        columns = get(with_params(path, "orient=columns&table=" + table)).json()
        self.assertEqual(list(columns), header)  # index column first, then the columns in order
        frame = pd.DataFrame(columns).set_index(header[0])
        self.assertEqual(frame.shape, (len(body), len(header) - 1))
        self.assertEqual(values.shape, (len(body),) if len(header) == 2 else (len(body), len(header) - 1))
        as_2d = values.reshape(len(body), len(header) - 1)
        self.assertTrue(np.array_equal(as_2d, from_csv), "NPY and CSV differ")
        self.assertTrue(np.array_equal(as_2d, frame.to_numpy(dtype=np.float64)), "NPY and column JSON differ")
        self.assertTrue(np.array_equal(index, frame.index.to_numpy(dtype=np.float64)), "indices differ")

    def test_main_tables_equal_the_json_document(self):
        pca = get(WPE + "/pca?k=3&rows=1:").json()
        coords = np.load(io.BytesIO(get(WPE + "/pca?k=3&rows=1:&format=npy").body))
        self.assertTrue(np.array_equal(coords, np.array([r["coords"] for r in pca["rows"]])))
        variance = np.load(io.BytesIO(get(WPE + "/pca?k=3&rows=1:&format=npy&table=variance").body))
        self.assertTrue(np.array_equal(variance[:, 0], pca["explained_variance_ratio"]))
        self.assertTrue(np.array_equal(variance[:, 1], pca["cumulative"]))
        spec = get(WPE + "/spectrum?rows=0:100").json()
        s = np.load(io.BytesIO(get(WPE + "/spectrum?rows=0:100&format=npy").body))
        self.assertTrue(np.array_equal(s[:, 0], spec["singular_values"]))
        row = get(WPE + "/cosine?row=5&rows=0:50").json()
        sim = get(WPE + "/cosine?row=5&rows=0:50&orient=columns").json()
        self.assertEqual((sim["row"], sim["similarity"]), (row["rows"], row["similarity"]))
        grid = get(WPE + "/cosine?mode=matrix&bins=16").json()
        values = np.load(io.BytesIO(get(WPE + "/cosine?mode=matrix&bins=16&format=npy").body))
        self.assertTrue(np.array_equal(values, np.array(grid["values"])))
        heads = get("/v1/attention?model=gpt2-small&layer=0&queries=0:32").json()["heads"]
        table = get("/v1/attention?model=gpt2-small&layer=0&queries=0:32&orient=columns").json()
        self.assertEqual(table["prev"], [h["prev"] for h in heads])


class Negotiation(unittest.TestCase):
    PATH = WPE + "/spectrum?rows=0:100"

    def test_accept_with_q_values_and_the_parameter_winning(self):
        cases = [({}, "application/json"), ({"Accept": "text/csv"}, "text/csv"),
                 ({"Accept": "application/x-npy;q=0.5, text/csv;q=0.9"}, "text/csv"),
                 ({"Accept": "text/*;q=0.2, application/x-npy"}, "application/x-npy"),
                 ({"Accept": "*/*"}, "application/json"),
                 ({"Accept": "application/json;q=0, text/csv;q=0.1"}, "text/csv")]
        for headers, want in cases:
            with self.subTest(headers=headers):
                r = get(self.PATH, headers=headers)
                self.assertTrue(r.header("Content-Type").startswith(want), r.header("Content-Type"))
                self.assertIn("Accept", r.header("Vary"))
        r = get(self.PATH + "&format=json", headers={"Accept": "text/csv"})
        self.assertEqual(r.header("Content-Type"), "application/json")

    def test_unsupported_is_406_listing_the_supported(self):
        r = request(self.PATH, headers={"Accept": "image/png"})
        self.assertEqual(r.status, 406)
        doc = r.json()
        self.assertEqual(doc["type"], "/problems/not-acceptable")
        for media in ("application/json", "text/csv", "application/x-npy"):
            self.assertIn(media, doc["detail"])
        r = request("/v1/compare?matrices=gpt2-small/wpe&analysis=pca&format=csv")
        self.assertEqual((r.status, r.json()["param"]), (406, "format"))
        self.assertNotIn("text/csv", r.json()["detail"])
        self.assertEqual(request(self.PATH + "&format=xml").status, 400)
        self.assertEqual(request(self.PATH + "&format=csv&orient=columns").json()["param"], "orient")
        self.assertEqual(request(self.PATH + "&table=nope").json()["param"], "table")

    def test_etag_304_and_gzip_per_format(self):
        tags = {}
        for fmt in ("json", "csv", "npy"):
            r = get(self.PATH + "&format=" + fmt)
            tags[fmt] = r.header("ETag")
            again = request(self.PATH + "&format=" + fmt, headers={"If-None-Match": tags[fmt]})
            self.assertEqual(again.status, 304)
            zipped = get(self.PATH + "&format=" + fmt, headers={"Accept-Encoding": "gzip"})
            if zipped.header("Content-Encoding") == "gzip":
                self.assertEqual(gzip.decompress(zipped.body), r.body)
        self.assertEqual(len(set(tags.values())), 3)
        by_accept = get(self.PATH, headers={"Accept": "text/csv"})
        self.assertEqual(by_accept.header("ETag"), tags["csv"])

    def test_openapi_lists_the_media_types(self):
        doc = openapi_document()
        content = doc["paths"]["/v1/models/{model}/matrices/{matrix}/pca"]["get"]["responses"]["200"]["content"]
        self.assertEqual(set(content), {"application/json", "text/csv", "application/x-npy"})
        pca = doc["paths"]["/v1/models/{model}/matrices/{matrix}/pca"]["get"]["parameters"]
        table = [p for p in pca if p.get("name") == "table"][0]
        self.assertEqual(table["schema"]["enum"], ["coords", "variance"])


if __name__ == "__main__":
    unittest.main()
