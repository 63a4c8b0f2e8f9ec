"""Representations of analysis results (src/api/format.c): for every tabular
endpoint and every one of its tables, NPY parsed with numpy, CSV parsed with
csv and the column JSON (orient=columns, read by pandas) hold exactly the same
float64 values and index; the main tables equal the numbers of the default JSON
document; format / Accept negotiation with q-values, 406, Vary, per-format
ETags, 304 and gzip. Full resolution (bins=0, up to max_cells) against numpy,
the rows endpoint against the .npy file, and max_response_bytes per format.

A request's formats share one computation while its result is kept (OneComputationEveryFormat), but
a JSON document after a table reply, or a result evicted, is computed again, and under blas_threads
"auto" a computation's OpenBLAS thread count follows the load (another test's
job still running halves it), which can change a sum's last bit; comparing
formats bit for bit needs the same bits every time, so these tests run against
their own daemon on the embedded default with a fixed blas_threads (1)."""
import csv
import gzip
import io
import json
import unittest
import urllib.parse

import numpy as np
import pandas as pd

import os

from httpkit import DATA, WPE, Daemon, analysis_examples, api_dump, example_path, openapi_document, request, settled_metrics

LAYERS = "/v1/alignment/layers?model=gpt2-small&r=gpt2-small/wpe&k=10&r_rows=1:&r_center=columns"
CMP = "/v1/compare?matrices=gpt2-small/wpe,openai-gpt/wpe,sinusoidal/pe"
# (request, tables it produces), from each descriptor's table examples (--dump-api); a route's
# {model}/{matrix} is gpt2-small/wpe.
ENDPOINTS = [(example_path(route, t["query"]), t["tables"]) for route, ex in analysis_examples().items()
             for t in ex["tables"]]


FIXED_THREADS = None  # the daemon of this module: the shipped models, blas_threads 1


def setUpModule():
    global FIXED_THREADS
    with open(os.path.join(os.path.dirname(DATA), "config", "embedscope.json")) as f:
        shipped = json.load(f)
    # the shipped models the examples ask for, without the generated baselines and the warm list
    # (5.5 CPU s of a start to ready, 9 under ASan+UBSan): a decomposition is made when a request needs it
    config = {"data_dir": DATA, "server": dict(shipped["server"], blas_threads=1), "limits": shipped["limits"],
              "models": {m: shipped["models"][m] for m in ("gpt2-small", "openai-gpt", "sinusoidal")}}
    FIXED_THREADS = Daemon(config)
    FIXED_THREADS.wait_ready()


def tearDownModule():
    FIXED_THREADS.close()


def get(path, **kw):
    kw.setdefault("base", FIXED_THREADS.base)
    r = request(path, **kw)
    assert r.status == 200, (path, r.status, r.body[:300])
    return r


def with_params(path, params):
    return path + ("&" if "?" in path else "?") + params


class EveryTable(unittest.TestCase):
    def test_every_table_of_every_analysis_has_a_request(self):
        # ENDPOINTS is built from the descriptors' examples: a table (--dump-api) no example
        # produces fails here until its descriptor has one
        covered = {(urllib.parse.urlsplit(path).path.rsplit("/", 1)[-1], t) for path, tables in ENDPOINTS
                   for t in tables}
        for a in api_dump()["analyses"]:
            if a["name"] == "compare":  # its tables are those of the comparable analyses
                continue
            for table in a["tables"]:
                with self.subTest(analysis=a["name"], table=table):
                    self.assertIn((a["route"].rsplit("/", 1)[-1], table), covered)

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
        index = np.array([float(row[0]) for row in body])
        columns = get(with_params(path, "orient=columns&table=" + table)).json()
        self.assertEqual(list(columns), header)  # index column first, then the columns in order
        self.assertEqual(values.shape, (len(body),) if len(header) == 2 else (len(body), len(header) - 1))
        as_2d = values.reshape(len(body), len(header) - 1)
        for j, name in enumerate(header[1:]):
            cells, in_json = [row[j + 1] for row in body], columns[name]
            missing = np.array([v is None for v in in_json])
            # a missing cell is missing everywhere: null, an empty field, NaN
            self.assertTrue(np.array_equal(missing, np.isnan(as_2d[:, j])), (name, "NPY and column JSON"))
            self.assertEqual([c == "" for c in cells], missing.tolist(), (name, "CSV and column JSON"))
            if any(isinstance(v, str) for v in in_json):  # a label column: names in CSV and JSON, codes in NPY
                self.assertEqual(cells, [v or "" for v in in_json], name)
                continue
            from_csv = np.array([float(c) if c else np.nan for c in cells])
            from_json = np.array([np.nan if v is None else v for v in in_json], dtype=np.float64)
            self.assertTrue(np.array_equal(as_2d[:, j], from_csv, equal_nan=True), (name, "NPY and CSV differ"))
            self.assertTrue(np.array_equal(as_2d[:, j], from_json, equal_nan=True), (name, "NPY and JSON differ"))
        self.assertTrue(np.array_equal(index, np.array(columns[header[0]], dtype=np.float64)), "indices differ")

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

    def test_layers_and_compare_tables_equal_the_json_document(self):
        for path in (LAYERS, LAYERS + "&w_head=7&w_center=columns"):
            doc = get(path).json()
            table = npy(path + "&format=npy")  # one row per layer; reshaped (layers, m, 4): per m a q, k, v, o table
            m = [t["m"] for t in doc["layers"][0]["q"]["top_mean"]]
            self.assertEqual(table.shape, (len(doc["layers"]), 4 * len(m)))
            want = [[[layer[w]["top_mean"][j]["mean"] for w in "qkvo"] for j in range(len(m))] for layer in doc["layers"]]
            self.assertTrue(np.array_equal(table.reshape(len(doc["layers"]), len(m), 4), np.array(want)))
            cols = get(path + "&orient=columns").json()
            self.assertEqual(cols["layer"], [layer["layer"] for layer in doc["layers"]])
            self.assertEqual(list(cols)[1:5], ["top1_q", "top1_k", "top1_v", "top1_o"])
        path = CMP + "&analysis=pca&k=2&rows=0:40;1:30;5:9"
        results = get(path).json()["results"]
        coords = npy(path + "&format=npy")  # matrix, pc1, pc2: the matrices' tables stacked
        want = [[i] + r["coords"] for i, res in enumerate(results) for r in res["rows"]]
        self.assertTrue(np.array_equal(coords, np.array(want, dtype=np.float64)))
        cols = get(path + "&orient=columns").json()
        self.assertEqual(cols["row"], [r["index"] for res in results for r in res["rows"]])
        cols = get(path + "&orient=columns&table=variance").json()
        self.assertEqual(list(cols), ["component", "matrix", "explained_variance_ratio", "cumulative"])
        self.assertEqual(cols["cumulative"], [c for res in results for c in res["cumulative"]])
        spectra = get(CMP + "&analysis=spectrum&rows=0:64&format=csv").body.decode().splitlines()
        self.assertEqual(spectra[0], "component,matrix,singular_value,explained_variance_ratio,cumulative")
        self.assertEqual(len(spectra), 1 + 3 * 64)


def npy_of(path):
    return np.load(io.BytesIO(get(path).body), allow_pickle=False)


def csv_of(path):
    rows = list(csv.reader(io.StringIO(get(path).body.decode())))
    return rows[0], np.array([[float(c) for c in row[1:]] for row in rows[1:]])


class OneComputationEveryFormat(unittest.TestCase):
    """A request's other representations (CSV, NPY, column JSON, another table) are rendered from the
    result its first one computed (kept in the response cache), not computed again; whatever changes
    the result (a parameter, the rows, the centring, the matrix) is computed apart."""
    PCA = "/v1/models/openai-gpt/matrices/wpe/pca?k=5&rows=3:300"

    def counters(self):
        m = settled_metrics(FIXED_THREADS.base)
        return m["embedscope_response_cache_misses_total"], m["embedscope_response_cache_rendered_total"]

    def test_other_formats_and_tables_are_rendered_from_the_first_computation(self):
        doc = get(self.PCA).json()
        misses, rendered = self.counters()
        coords = npy_of(self.PCA + "&format=npy")
        header, from_csv = csv_of(self.PCA + "&format=csv")
        columns = get(self.PCA + "&orient=columns").json()
        variance = npy_of(self.PCA + "&format=npy&table=variance")
        self.assertEqual(self.counters(), (misses + 4, rendered + 4))  # four replies, none computed
        want = np.array([r["coords"] for r in doc["rows"]])
        self.assertTrue(np.array_equal(coords, want))
        self.assertEqual(header, ["row"] + ["pc%d" % j for j in range(1, 6)])
        self.assertTrue(np.array_equal(from_csv, want))
        self.assertEqual(columns["row"], [r["index"] for r in doc["rows"]])
        self.assertTrue(np.array_equal(variance[:, 0], doc["explained_variance_ratio"]))

    def test_what_changes_the_result_is_computed_apart(self):
        get(self.PCA)  # its tables kept
        for params in ("k=4&rows=3:300", "k=5&rows=3:299", "k=5&rows=3:300&center=none"):
            path = self.PCA.split("?")[0] + "?" + params
            for other in (path, path.replace("openai-gpt", "gpt2-small")):
                with self.subTest(path=other):
                    misses, rendered = self.counters()
                    header, table = csv_of(other + "&format=csv")  # first: computed, its own result
                    self.assertEqual(self.counters(), (misses + 1, rendered))
                    doc = get(other).json()
                    self.assertEqual(len(header), int(params[2]) + 1)
                    self.assertTrue(np.array_equal(table, np.array([r["coords"] for r in doc["rows"]])))

    def test_a_table_first_leaves_the_document_to_its_own_computation(self):
        path = self.PCA.replace("k=5", "k=2")
        coords = npy_of(path + "&format=npy")  # a table reply: its JSON document was never built
        misses, rendered = self.counters()
        doc = get(path).json()
        self.assertEqual(self.counters(), (misses + 1, rendered))  # computed
        self.assertTrue(np.array_equal(coords, np.array([r["coords"] for r in doc["rows"]])))
        self.assertEqual(csv_of(path + "&format=csv")[0], ["row", "pc1", "pc2"])
        self.assertEqual(self.counters(), (misses + 2, rendered + 1))


class MissingCells(unittest.TestCase):
    """A component without a period: null in the document, NaN in NPY, an empty field in CSV, null in the
    column JSON, never 0; the reason in the column no_period_reason. pandas reads each as NaN."""

    def check(self, path, docs):
        want = [(c["period"], c["cycles"], c["no_period_reason"]) for doc in docs for c in doc["components"]]
        self.assertIn(None, [w[0] for w in want], "the case needs a component without a period")
        period = np.array([np.nan if w[0] is None else w[0] for w in want])
        cycles = np.array([np.nan if w[1] is None else w[1] for w in want])
        reasons = [w[2] for w in want]
        from_csv = pd.read_csv(io.BytesIO(get(path + "&format=csv").body), float_precision="round_trip")
        from_json = pd.DataFrame(get(path + "&orient=columns").json())
        for frame in (from_csv, from_json):
            self.assertTrue(np.array_equal(frame["period"].to_numpy(dtype=np.float64), period, equal_nan=True))
            self.assertTrue(np.array_equal(frame["cycles"].to_numpy(dtype=np.float64), cycles, equal_nan=True))
            self.assertEqual([None if pd.isna(r) else r for r in frame["no_period_reason"]], reasons)
        table = npy(path + "&format=npy")
        self.assertTrue(np.array_equal(table[:, list(from_csv.columns[1:]).index("period")], period, equal_nan=True))
        self.assertFalse(np.any(table[:, list(from_csv.columns[1:]).index("period")] == 0))

    def test_periodicity(self):
        path = WPE + "/periodicity?rows=1:&k=4"
        self.check(path, [get(path).json()])

    def test_periodicity_compared(self):
        path = CMP + "&analysis=periodicity&rows=1:&k=4"
        self.check(path, get(path).json()["results"])


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
        r = request("/v1/compare?matrices=gpt2-small/wpe&analysis=spectrum&table=coords")  # pca's table
        self.assertEqual((r.status, r.json()["param"]), (400, "table"))
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


def npy(path, **kw):
    return np.load(io.BytesIO(get(path, **kw).body), allow_pickle=False)


class FullResolution(unittest.TestCase):
    def test_cosine_1024_by_1024_equals_numpy(self):
        x = np.load(os.path.join(DATA, "gpt2-small", "wpe.npy")).astype(np.float64)
        unit = x / np.linalg.norm(x, axis=1, keepdims=True)
        want = unit @ unit.T
        got = npy(WPE + "/cosine?mode=matrix&bins=0&format=npy")
        self.assertEqual(got.shape, (1024, 1024))
        self.assertLess(np.max(np.abs(got - want)), 1e-13)
        doc = get(WPE + "/cosine?mode=matrix&bins=0&rows=0:8").json()
        self.assertEqual((doc["input"]["bins"], doc["row_edges"]), (0, list(range(9))))

    def test_overlap_and_attention_pattern_unbinned(self):
        grid = npy("/v1/overlap?a=gpt2-small/wpe&b=gpt2-small/h0.q&ka=20&kb=30&bins=0&format=npy")
        self.assertEqual(grid.shape, (20, 30))
        pattern = npy("/v1/attention/pattern?model=gpt2-small&layer=0&head=3&queries=0:50&bins=0&format=npy")
        self.assertEqual(pattern.shape, (50, 50))
        self.assertTrue(np.allclose(pattern.sum(axis=1), 1, atol=1e-12))  # each query's weights sum to 1
        self.assertTrue(np.all(np.triu(pattern, 1) == 0))                 # causal

    def test_rows_are_the_matrix_in_float64(self):
        x = np.load(os.path.join(DATA, "gpt2-small", "wpe.npy")).astype(np.float64)
        self.assertTrue(np.array_equal(npy(WPE + "/rows?rows=10:20&format=npy"), x[10:20]))
        doc = get(WPE + "/rows?rows=3:8:4").json()
        self.assertEqual(doc["rows"], [3, 7])
        self.assertEqual(doc["values"], x[[3, 7]].tolist())
        cols = get(WPE + "/rows?rows=::256&orient=columns").json()
        self.assertEqual((cols["row"], len(cols)), ([0, 256, 512, 768], 769))


class SmallLimits(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        layer = {"h0.ln_1.weight": {"file": "gpt2-small/h0_ln_1_weight.npy", "model_axis": "columns"},
                 "h0.ln_1.bias": {"file": "gpt2-small/h0_ln_1_bias.npy", "model_axis": "columns"},
                 "h0.c_attn": {"file": "gpt2-small/h0_c_attn.npy", "model_axis": "rows"},
                 "h0.c_attn.bias": {"file": "gpt2-small/h0_c_attn_bias.npy", "model_axis": "columns"}}
        cls.daemon = Daemon({"limits": {"max_cells": 2500, "max_response_bytes": 30000},
                             "models": {"m": {"n_heads": 12, "matrices": {
                                 "wpe": {"file": "gpt2-small/wpe.npy", "model_axis": "columns"}, **layer}}}})
        cls.base = cls.daemon.base

    @classmethod
    def tearDownClass(cls):
        cls.daemon.close()

    def test_max_cells(self):
        self.assertEqual(get("/v1/models/m/matrices/wpe/cosine?mode=matrix&bins=0&rows=0:50&format=npy",
                             base=self.base).status, 200)
        r = request("/v1/models/m/matrices/wpe/cosine?mode=matrix&bins=0&rows=0:51&format=npy", base=self.base)
        self.assertEqual((r.status, r.json().get("limit")), (400, "max_cells"))

    def compute_jobs(self):
        return settled_metrics(self.base)["embedscope_compute_jobs_total"]

    def test_max_cells_is_refused_at_the_gate(self):
        # over the limit: a 400 naming max_cells from the HTTP thread, before any compute job is queued
        over = ["/v1/models/m/matrices/wpe/cosine?mode=matrix&bins=0&rows=0:51",
                "/v1/overlap?a=m/wpe&b=m/wpe&ka=50&kb=51&bins=0",
                "/v1/attention/pattern?model=m&layer=0&head=0&queries=10:60&bins=0"]
        before = self.compute_jobs()
        for path in over:
            with self.subTest(path=path):
                r = request(path, base=self.base)
                doc = r.json()
                self.assertEqual((r.status, doc.get("limit")), (400, "max_cells"), doc)
                self.assertIn("bins=0", doc["detail"])
        ok = "/v1/attention/pattern?model=m&layer=0&head=0&queries=10:50&bins=0&format=npy"  # 40 x 50 cells
        self.assertEqual(npy(ok, base=self.base).shape, (40, 50))
        self.assertEqual(self.compute_jobs(), before + 1, "an over-limit request ran in the compute pool")

    def test_table_the_mode_does_not_produce_is_refused_at_the_gate(self):
        # cosine's tables depend on mode: naming another mode's table is a 400 naming table, never a job
        cosine = "/v1/models/m/matrices/wpe/cosine?rows=0:%d&" % 37
        wrong = [("row=3&table=offsets", "similarity"), ("mode=offset&table=values", "offsets"),
                 ("mode=matrix&bins=4&table=similarity&format=csv", "values")]
        before = self.compute_jobs()
        for params, produced in wrong:
            with self.subTest(params=params):
                r = request(cosine + params, base=self.base)
                doc = r.json()
                self.assertEqual((r.status, doc.get("param")), (400, "table"), doc)
                self.assertIn(produced, doc["detail"])
        self.assertEqual(self.compute_jobs(), before, "a request for a table its mode lacks ran in the compute pool")
        self.assertEqual(npy(cosine + "mode=offset&table=offsets&format=npy", base=self.base).shape, (37, 2))

    def test_max_response_bytes_names_the_format_that_fits(self):
        r = request("/v1/models/m/matrices/wpe/cosine?mode=matrix&bins=0&rows=0:40", base=self.base)
        doc = r.json()
        self.assertEqual((r.status, doc["limit"]), (400, "max_response_bytes"))
        self.assertIn("format=npy", doc["detail"])
        self.assertEqual(get("/v1/models/m/matrices/wpe/cosine?mode=matrix&bins=0&rows=0:40&format=npy",
                             base=self.base).status, 200)


if __name__ == "__main__":
    unittest.main()
