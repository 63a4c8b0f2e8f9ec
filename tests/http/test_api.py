"""Every endpoint of API v1 (issue 3) and every documented parameter with its
default: status, Content-Type, caching headers, body fields and shapes, the
echo of what a result was computed from (ids, sha256, rows, centring, k,
solver), and values checked against independent references (the .npy bytes
read with the standard library, closed forms of the sinusoidal encoding,
identities between endpoints).

Run by tests/http/run.sh against the embedded default (EMBEDSCOPE_URL)."""
import math
import os
import re
import unittest

from httpkit import DATA, ROOT, WPE, Daemon, api_dump, get_json, load_npy, metrics, query, rel_close, request, settled_metrics, sha256

Q = "/v1/models/gpt2-small/matrices/h0.q"
PE = "/v1/models/sinusoidal/matrices/pe"
TINY = 1e-12
ISSUE3_PATHS = ("/v1/models", "/v1/models/{model}/matrices/{matrix}", "/v1/models/{model}/matrices/{matrix}/pca",
                "/v1/models/{model}/matrices/{matrix}/spectrum", "/v1/models/{model}/matrices/{matrix}/cosine",
                "/v1/models/{model}/matrices/{matrix}/vectors", "/v1/capture", "/v1/overlap", "/healthz",
                "/readyz", "/openapi.yaml")
PROBLEM_SLUGS = tuple(p["slug"] for p in api_dump()["problems"])  # every problem type (--dump-api)


def wpe_data():
    """(shape, float32 values, sha256 of the tensor bytes, sha256 of the file) of GPT-2's W_pos."""
    shape, values, raw = load_npy("gpt2-small/wpe.npy")
    with open(os.path.join(DATA, "gpt2-small/wpe.npy"), "rb") as f:
        file_sha = sha256(f.read())
    return shape, values, sha256(raw), file_sha


def pe_cosine(delta, d=768, base=10000.0):
    """Cosine similarity of two sinusoidal encodings delta positions apart: (2/d) sum_i cos(w_i delta)."""
    return 2.0 / d * math.fsum(math.cos(base ** (-2.0 * i / d) * delta) for i in range(d // 2))


def norms_summary(norms):
    """min, max, mean, median, argmin, argmax of a list of norms (exact sums)."""
    s = sorted(norms)
    n = len(s)
    median = s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2
    return {"min": min(norms), "max": max(norms), "mean": math.fsum(norms) / n, "median": median,
            "argmin": norms.index(min(norms)), "argmax": norms.index(max(norms))}


class ApiCase(unittest.TestCase):
    def analysis(self, path):
        """GET an analysis: 200 JSON with the immutable caching headers; returns the document."""
        r, doc = get_json(path)
        self.assertEqual(r.status, 200, r.body[:300])
        self.assertEqual(r.header("Content-Type"), "application/json")
        self.assertRegex(r.header("ETag"), r'^W/"[0-9a-f]{32}"$')
        self.assertEqual(r.header("Cache-Control"), "public, max-age=86400")
        self.assertRegex(r.header("X-Request-Id"), r"^[0-9a-f]+$")
        self.assertIn("Accept-Encoding", r.header("Vary"))
        self.assertIn("input", doc)
        return doc

    def assert_input(self, inp, mid, rows, n_rows, center, d=768, svd=True):
        """The echo of one matrix selection."""
        self.assertEqual(inp["id"], mid)
        self.assertRegex(inp["sha256"], "^[0-9a-f]{64}$")
        self.assertEqual(inp["rows"], rows)
        self.assertEqual(inp["n_rows"], n_rows)
        self.assertEqual(inp["d"], d)
        self.assertEqual(inp["center"], center)
        if svd:
            self.assertIn(inp["solver"], ("dgesdd", "dgesvd"))
            self.assertEqual(sorted(inp["blas"]), ["core", "threads"])  # what it ran on (test_blas: the values)
            self.assertGreaterEqual(inp["blas"]["threads"], 1)
            self.assertLess(inp["reconstruction_error"], 1e-12)
            self.assertLess(inp["orthogonality_error"], 1e-12)
            self.assertGreaterEqual(inp["reconstruction_error"], 0)
        else:
            for key in ("solver", "blas", "reconstruction_error", "orthogonality_error"):
                self.assertNotIn(key, inp)


class Service(ApiCase):
    def test_healthz(self):
        r, doc = get_json("/healthz")
        self.assertEqual((r.status, doc), (200, {"status": "ok"}))
        self.assertEqual(r.header("Content-Type"), "application/json")
        self.assertEqual(r.header("Cache-Control"), "no-store")

    def test_readyz_after_warming(self):
        r, doc = get_json("/readyz")
        self.assertEqual((r.status, doc), (200, {"status": "ready"}))
        self.assertEqual(r.header("Content-Type"), "application/json")

    def test_openapi_is_the_repository_document(self):
        r = request("/openapi.yaml")
        self.assertEqual(r.status, 200)
        self.assertEqual(r.header("Content-Type"), "application/yaml")
        self.assertRegex(r.header("ETag"), r'^W/"[0-9a-f]{32}"$')
        with open(os.path.join(ROOT, "openapi.yaml"), "rb") as f:
            self.assertEqual(r.body, f.read(), "served document differs from openapi.yaml (stale build?)")
        text = r.body.decode()
        self.assertTrue(text.startswith("openapi: 3.1"))
        for path in ISSUE3_PATHS:
            self.assertIn("\n  %s:\n" % path, text)

    def test_metrics_exposition(self):
        before = metrics()
        self.assertEqual(request("/healthz").status, 200)
        r = request("/metrics")
        self.assertEqual(r.status, 200)
        self.assertEqual(r.header("Content-Type"), "text/plain; version=0.0.4; charset=utf-8")
        text = r.body.decode()
        self.assertIn("# TYPE embedscope_http_requests_total counter", text)
        self.assertIn('embedscope_http_request_duration_seconds_bucket{le="+Inf"}', text)
        after = metrics()
        self.assertEqual(after["embedscope_ready"], 1)
        _, models = get_json("/v1/models")
        self.assertEqual(after["embedscope_matrices"], sum(len(m["matrices"]) for m in models["models"]))
        self.assertGreaterEqual(after["embedscope_http_request_duration_seconds_count"],
                                before["embedscope_http_request_duration_seconds_count"] + 2)
        self.assertGreaterEqual(after["embedscope_svd_computations_total"], 1)  # the warm list
        self.assertEqual(after["embedscope_svd_computations_total"], after["embedscope_svd_cache_misses_total"])
        self.assertEqual(after["embedscope_svd_cache_max_bytes"], 512 * 2 ** 20)
        # decompositions of minutes (a Llama-sized matrix on a small machine) land in a finite bucket
        bounds = [float(le) for le in re.findall(r'(?m)^embedscope_svd_duration_seconds_bucket\{le="([^"+]+)"\}', text)]
        self.assertEqual(bounds, sorted(bounds))
        self.assertGreaterEqual(bounds[-1], 3600)

    def test_problem_type_documents(self):
        for slug in PROBLEM_SLUGS:
            r = request("/problems/" + slug)
            self.assertEqual(r.status, 200, slug)
            self.assertEqual(r.header("Content-Type"), "text/plain; charset=utf-8")
            self.assertGreater(len(r.body), 20)
        self.assertIn(b"max_k", request("/problems/limit-exceeded").body)

    def test_request_id_of_an_untrusted_client_is_replaced(self):
        # adopted from trusted proxies only: test_observability.RequestIds
        r = request("/healthz", headers={"X-Request-Id": "nb-42.run:7"})
        self.assertRegex(r.header("X-Request-Id"), "^[0-9a-f]{32}$")
        r = request("/healthz", headers={"X-Request-Id": "bad id with spaces"})
        self.assertRegex(r.header("X-Request-Id"), "^[0-9a-f]{32}$")


class Models(ApiCase):
    @classmethod
    def setUpClass(cls):
        r, cls.doc = get_json("/v1/models")
        cls.reply = r
        cls.matrices = {m["id"]: m for model in cls.doc["models"] for m in model["matrices"]}

    def test_listing_headers(self):
        self.assertEqual(self.reply.status, 200)
        self.assertEqual(self.reply.header("Content-Type"), "application/json")
        self.assertEqual(self.reply.header("Cache-Control"), "no-cache")
        self.assertRegex(self.reply.header("ETag"), r'^W/"[0-9a-f]{32}"$')
        self.assertEqual(self.doc["config"], "embedded default")

    def test_required_ids_and_shapes(self):
        want = {"gpt2-small/wpe": ([1024, 768], "columns", 1024), "gpt2-small/h0.q": ([768, 768], "rows", 768),
                "gpt2-small/h0.k": ([768, 768], "rows", 768), "gpt2-small/h0.v": ([768, 768], "rows", 768),
                "gpt2-small/h0.o": ([768, 768], "columns", 768), "openai-gpt/wpe": ([512, 768], "columns", 512),
                "sinusoidal/pe": ([1024, 768], "columns", 1024)}
        for mid, (shape, axis, items) in want.items():
            m = self.matrices[mid]
            self.assertEqual((m["shape"], m["model_axis"], m["items"], m["d"]), (shape, axis, items, 768), mid)
            self.assertEqual(m["id"], mid)
            self.assertEqual(m["name"], mid.split("/")[1])
            if m["provenance"]["view"] is None:
                self.assertEqual(m["provenance"]["shape"], shape)

    def test_every_matrix_is_well_described(self):
        for model in self.doc["models"]:
            self.assertTrue(model["matrices"], model["name"])
            for m in model["matrices"]:
                self.assertEqual(m["id"], model["name"] + "/" + m["name"])
                rows, cols = m["shape"]
                self.assertEqual((m["items"], m["d"]), (rows, cols) if m["model_axis"] == "columns" else (cols, rows))
                self.assertRegex(m["provenance"]["sha256"], "^[0-9a-f]{64}$")
                for key in ("source", "tensor", "dtype", "file_sha256", "generator", "view"):
                    self.assertIn(key, m["provenance"])

    def test_provenance_of_wpe_matches_the_file(self):
        shape, _, data_sha, file_sha = wpe_data()
        p = self.matrices["gpt2-small/wpe"]["provenance"]
        self.assertEqual(list(shape), p["shape"])
        self.assertEqual(p["sha256"], data_sha)
        self.assertEqual(p["file_sha256"], file_sha)
        self.assertEqual((p["dtype"], p["tensor"], p["generator"], p["view"]), ("<f4", None, None, None))
        self.assertTrue(p["source"].endswith("gpt2-small/wpe.npy"))

    def test_views_share_their_parent_storage(self):
        q, k, v = (self.matrices["gpt2-small/h0." + b] for b in "qkv")
        _, _, raw = load_npy("gpt2-small/h0_c_attn.npy")
        for m, cols in ((q, "0:768"), (k, "768:1536"), (v, "1536:2304")):
            self.assertEqual(m["provenance"]["sha256"], sha256(raw))
            self.assertIn("columns " + cols, m["provenance"]["view"])

    def test_generated_encoding_provenance(self):
        p = self.matrices["sinusoidal/pe"]["provenance"]
        self.assertEqual(p["source"], "generator:sinusoidal")
        self.assertEqual(p["generator"], {"base": 10000.0, "d_model": 768, "n_positions": 1024})
        self.assertIsNone(p["file_sha256"])

    def test_etag_revalidates(self):
        r = request("/v1/models", headers={"If-None-Match": self.reply.header("ETag")})
        self.assertEqual((r.status, r.body), (304, b""))

    def test_one_model_with_its_matrices_and_state(self):
        """GET /v1/models/{model}: the model as the listing has it, and the state of the decompositions the
        warm list plans for its matrices (the shared daemon is ready: all cached)."""
        for listed in self.doc["models"]:
            r, model = get_json("/v1/models/" + listed["name"])
            self.assertEqual(r.status, 200)
            self.assertEqual(r.header("Cache-Control"), "no-cache")
            self.assertEqual({k: v for k, v in model.items() if k not in ("state", "warm")}, listed)
            self.assertEqual(model["state"], "ready")
            self.assertEqual(model["warm"]["warmed"], model["warm"]["planned"])
            self.assertLessEqual(model["warm"]["cached"], model["warm"]["planned"])
            again = request("/v1/models/" + listed["name"], headers={"If-None-Match": r.header("ETag")})
            self.assertEqual(again.status, 304)
        # the embedded default warms gpt2-small's matrices (config/embedscope.json)
        self.assertGreater(get_json("/v1/models/gpt2-small")[1]["warm"]["planned"], 0)
        r, doc = get_json("/v1/models/nope")
        self.assertEqual((r.status, doc["type"], doc["param"]), (404, "/problems/not-found", "model"))


class ModelStateAfterEviction(unittest.TestCase):
    def test_an_evicted_warm_entry_leaves_the_model_ready(self):
        """Two warmed decompositions that an 8 MiB cache cannot hold together: once warming is done the
        model stays "ready" (warmed = planned) while one of them is no longer cached; a request for the
        evicted one recomputes it. (Before: "warming" for good on a busy daemon's evictions.)"""
        models = {"m": {"matrices": {"g": {"generator": "gaussian", "rows": 2048, "cols": 512, "seed": 3}}}}
        warm = [{"matrix": "m/g", "center": "columns"}, {"matrix": "m/g", "rows": "0:1024", "center": "columns"}]
        d = Daemon({"models": models, "warm": warm, "server": {"cache_mb": 8}})
        try:
            d.wait_ready()
            r, model = get_json("/v1/models/m", base=d.base)
            self.assertEqual(r.status, 200)
            self.assertEqual((model["state"], model["warm"]["planned"], model["warm"]["warmed"]), ("ready", 2, 2))
            self.assertEqual(model["warm"]["cached"], 1, "8 MiB hold one of the two (6.8 MB each, in parts)")
            evicted = metrics(d.base)["embedscope_svd_cache_evictions_total"]
            self.assertGreaterEqual(evicted, 1)
            r = request("/v1/models/m/matrices/g/spectrum?rows=0:1024", base=d.base)
            self.assertEqual(r.status, 200, r.body[:300])
            self.assertEqual(get_json("/v1/models/m", base=d.base)[1]["state"], "ready")
        finally:
            d.close()


class Matrix(ApiCase):
    def test_wpe_row_norms_against_the_file(self):
        shape, values, data_sha, _ = wpe_data()
        n, d = shape
        norms = [math.sqrt(math.fsum(x * x for x in values[i * d:(i + 1) * d])) for i in range(n)]
        r, doc = get_json(WPE)
        self.assertEqual(r.status, 200)
        self.assertEqual(r.header("Content-Type"), "application/json")
        self.assertEqual((doc["model"], doc["name"], doc["id"]), ("gpt2-small", "wpe", "gpt2-small/wpe"))
        self.assertEqual(doc["provenance"]["sha256"], data_sha)
        want = norms_summary(norms)
        got = doc["row_norms"]
        self.assertEqual((got["argmin"], got["argmax"]), (want["argmin"], want["argmax"]))
        for key in ("min", "max", "mean", "median"):
            self.assertTrue(rel_close(got[key], want[key], TINY), (key, got[key], want[key]))

    def test_view_row_norms_are_over_model_orientation_items(self):
        """h0.q's items are the 768 columns 0:768 of c_attn (Conv1D [d_model, out])."""
        (rows, cols), values, _ = load_npy("gpt2-small/h0_c_attn.npy")
        norms = [math.sqrt(math.fsum(x * x for x in values[j:rows * cols:cols])) for j in range(768)]
        _, doc = get_json(Q)
        want, got = norms_summary(norms), doc["row_norms"]
        self.assertEqual((got["argmin"], got["argmax"]), (want["argmin"], want["argmax"]))
        for key in ("min", "max", "mean", "median"):
            self.assertTrue(rel_close(got[key], want[key], TINY), (key, got[key], want[key]))

    def test_mean_norm_lies_between_min_and_max(self):
        """Every row of the sinusoidal encoding has norm sqrt(d/2); the mean must not exceed the max
        (a naive double sum / n used to come out above it)."""
        _, doc = get_json(PE)
        n = doc["row_norms"]
        self.assertLessEqual(n["min"], n["mean"])
        self.assertLessEqual(n["mean"], n["max"])


class Pca(ApiCase):
    def test_defaults_skip_nothing(self):
        doc = self.analysis(WPE + "/pca")
        self.assertEqual(doc["input"]["k"], 3)
        self.assert_input(doc["input"]["matrix"], "gpt2-small/wpe", "0:1024", 1024, "columns")
        self.assertEqual([r["index"] for r in doc["rows"]], list(range(1024)))
        self.assertEqual(len(doc["explained_variance_ratio"]), 3)

    def test_helix_against_the_spectrum(self):
        """rows=1:&k=3: coordinates are centred (zero mean), their squared norms are s_j^2 of the
        spectrum of the same selection, ratios and cumulative agree with it."""
        doc = self.analysis(WPE + "/pca?k=3&rows=1:")
        spec = self.analysis(WPE + "/spectrum?rows=1:")
        inp = doc["input"]["matrix"]
        self.assert_input(inp, "gpt2-small/wpe", "1:1024", 1023, "columns")
        self.assertEqual(inp["sha256"], wpe_data()[2])
        self.assertIsNone(inp["view"])
        self.assertEqual([r["index"] for r in doc["rows"]], list(range(1, 1024)))
        s = spec["singular_values"]
        for j in range(3):
            col = [r["coords"][j] for r in doc["rows"]]
            self.assertLess(abs(math.fsum(col)), 1e-9 * s[j])
            self.assertTrue(rel_close(math.fsum(c * c for c in col), s[j] ** 2, 1e-12))
        self.assertEqual(doc["explained_variance_ratio"], spec["explained_variance_ratio"][:3])
        self.assertEqual(doc["cumulative"], spec["cumulative"][:3])
        cum = 0.0
        for j, ratio in enumerate(doc["explained_variance_ratio"]):
            cum += ratio
            self.assertAlmostEqual(doc["cumulative"][j], cum, places=14)

    def test_centrings_are_echoed_and_differ(self):
        coords = {}
        for center in ("none", "columns", "rows"):
            doc = self.analysis(WPE + "/pca?rows=0:40&k=2&center=" + center)
            self.assert_input(doc["input"]["matrix"], "gpt2-small/wpe", "0:40", 40, center)
            coords[center] = doc["rows"][0]["coords"]
        self.assertNotEqual(coords["none"], coords["columns"])
        self.assertNotEqual(coords["columns"], coords["rows"])

    def test_k_up_to_the_rank_bound(self):
        doc = self.analysis(WPE + "/pca?rows=0:20&k=20&center=none")
        self.assertEqual(doc["input"]["k"], 20)
        self.assertEqual(len(doc["explained_variance_ratio"]), 20)
        self.assertTrue(all(len(r["coords"]) == 20 for r in doc["rows"]))
        self.assertAlmostEqual(doc["cumulative"][-1], 1.0, places=13)
        doc = self.analysis(WPE + "/pca?rows=0:20&k=1&center=none")
        self.assertEqual([len(r["coords"]) for r in doc["rows"]], [1] * 20)

    def test_selections_are_canonical(self):
        cases = [("rows=1:", "1:1024", 1023, [1, 2]), ("rows=-3:", "1021:1024", 3, [1021, 1022]),
                 ("rows=5:9&exclude=", "5:9", 4, [5, 6]), ("rows=1:1024:2", "1:1024:2", 512, [1, 3]),
                 ("rows=0:1024", "0:1024", 1024, [0, 1]), ("rows=0:10&exclude=3,4,5", "0:3,6:10", 7, [0, 1]),
                 ("rows=0:10&exclude=5,3,3", "0:3,4,6:10", 8, [0, 1]), ("rows=::-1", "1023::-1", 1024, [1023, 1022]),
                 ("rows=1%3A", "1:1024", 1023, [1, 2]), ("rows=1,2,3,5", "1:4,5", 4, [1, 2]),
                 ("rows=0:10,100:110", "0:10,100:110", 20, [0, 1]), ("rows=-1,0:3", "1023,0:3", 4, [1023, 0]),
                 ("rows=0:10,100:110&exclude=9,100", "0:9,101:110", 18, [0, 1])]
        for text, canonical, n, first in cases:
            doc = self.analysis(WPE + "/pca?k=1&" + text)
            self.assertEqual(doc["input"]["matrix"]["rows"], canonical, text)
            self.assertEqual(doc["input"]["matrix"]["n_rows"], n, text)
            self.assertEqual([r["index"] for r in doc["rows"][:2]], first, text)
            self.assertEqual(len(doc["rows"]), n, text)

    def test_selections_are_never_clamped_or_merged(self):
        pair = "/v1/capture?a=gpt2-small/wpe&b=gpt2-small/h0.q&k=3"
        refused = [(WPE + "/pca?k=1&rows=1:1025", "rows", "the stop 1025 is out of range"),
                   (WPE + "/pca?k=1&rows=1024", "rows", "out of range"),
                   (WPE + "/cosine?mode=offset&rows=-1025:", "rows", "the start -1025 is out of range"),
                   (WPE + "/pca?k=1&rows=0:10,5:15", "rows", "row 5 is selected twice"),
                   (WPE + "/pca?k=1&rows=1,,2", "rows", "empty part"),
                   (pair + "&a_rows=0:64,60:70", "a_rows", "row 60 is selected twice"),
                   (pair + "&b_rows=0:769", "b_rows", "the stop 769 is out of range")]
        for path, param, says in refused:
            with self.subTest(path=path):
                r = request(path)
                doc = r.json()
                self.assertEqual((r.status, doc.get("param")), (400, param), doc)
                self.assertIn(says, doc["detail"])
        # unions in a pair analysis: each matrix's canonical selection is echoed, and numbers follow it
        doc = self.analysis(pair + "&a_rows=0:32,100:132&b_rows=1,2,3,700:760")
        self.assertEqual(doc["input"]["a"]["rows"], "0:32,100:132")
        self.assertEqual(doc["input"]["b"]["rows"], "1:4,700:760")
        self.assertEqual(doc["input"]["a"]["n_rows"], 64)

    def test_single_row_index(self):
        doc = self.analysis(WPE + "/pca?rows=5&k=1&center=none")
        self.assertEqual((doc["input"]["matrix"]["rows"], [r["index"] for r in doc["rows"]]), ("5", [5]))
        self.assertAlmostEqual(doc["explained_variance_ratio"][0], 1.0, places=14)

    def test_equivalent_spellings_share_the_etag(self):
        a = request(WPE + "/pca?rows=1:&k=3").header("ETag")
        b = request(WPE + "/pca?k=3&rows=1:1024&center=columns").header("ETag")
        c = request(WPE + "/pca?k=2&rows=1:").header("ETag")
        self.assertEqual(a, b)
        self.assertNotEqual(a, c)


class Method(ApiCase):
    """method=exact|topk|auto on pca and vectors: the echo, the certificate, agreement with the exact answer
    within it, the fallback on a degenerate spectrum, and the documented auto rule."""

    def test_topk_agrees_with_exact_within_its_certificate(self):
        top = self.analysis(WPE + "/pca?k=3&rows=1:&method=topk")
        exact = self.analysis(WPE + "/pca?k=3&rows=1:&method=exact")
        spec = self.analysis(WPE + "/spectrum?rows=1:")
        t, e = top["input"]["matrix"], exact["input"]["matrix"]
        self.assertEqual((t["method"], e["method"]), ("topk", "exact"))
        self.assertNotIn("reconstruction_error", t)
        self.assertIn("reconstruction_error", e)
        cert = t["certificate"]
        self.assertEqual(cert["k_computed"], 16)
        self.assertEqual(cert["tolerance"], 1e-10)
        self.assertLessEqual(cert["sigma_bound"], 1e-10)
        self.assertLessEqual(cert["vector_bound"], 1e-10)
        self.assertGreater(cert["min_gap"], 0)
        s0 = spec["singular_values"][0]
        for a, b in zip(top["explained_variance_ratio"], exact["explained_variance_ratio"]):
            self.assertAlmostEqual(a, b, delta=1e-12)
        worst = max(abs(a - b) for ra, rb in zip(top["rows"], exact["rows"]) for a, b in zip(ra["coords"], rb["coords"]))
        self.assertLessEqual(worst, 2 * (cert["vector_bound"] + 1e-12) * s0)

    def test_auto_is_exact_on_a_small_matrix(self):
        doc = self.analysis(WPE + "/vectors?k=3")
        self.assertEqual(doc["input"]["matrix"]["method"], "exact")
        self.assertNotIn("method_note", doc["input"]["matrix"])

    def test_left_vectors_from_topk(self):
        top = self.analysis(WPE + "/vectors?k=2&side=left&method=topk")
        exact = self.analysis(WPE + "/vectors?k=2&side=left&method=exact")
        bound = top["input"]["matrix"]["certificate"]["vector_bound"]
        for vt, ve in zip(top["vectors"], exact["vectors"]):
            self.assertLessEqual(max(abs(a - b) for a, b in zip(vt["values"], ve["values"])), 2 * bound + 1e-12)

    def test_degenerate_spectrum_falls_back_to_exact(self):
        doc = self.analysis("/v1/models/baselines/matrices/isotropic/pca?k=3&center=none&method=topk")
        inp = doc["input"]["matrix"]
        self.assertEqual(inp["method"], "exact")
        self.assertIn("certificate missed the tolerance", inp["method_note"])
        self.assertIn("reconstruction_error", inp)

    def test_method_is_validated_and_keyed(self):
        r, doc = get_json(WPE + "/pca?method=fast")
        self.assertEqual((r.status, doc["param"]), (400, "method"))
        r, doc = get_json(WPE + "/spectrum?method=topk")
        self.assertEqual((r.status, doc["param"]), (400, "method"))
        a, _ = get_json(WPE + "/pca?k=3&method=topk")
        b, _ = get_json(WPE + "/pca?k=3&method=exact")
        self.assertNotEqual(a.header("ETag"), b.header("ETag"))


class ValuesOnly(ApiCase):
    """method=values: the spectrum from the singular values alone (echoed, no vector errors), equal to
    the exact one; refused by name before anything is queued where vectors are needed."""

    def test_values_spectrum_equals_the_exact_one(self):
        for path in (WPE + "/spectrum?rows=1:", WPE + "/spectrum?rows=:100&center=rows", Q + "/spectrum?center=none"):
            with self.subTest(path=path):
                values, exact = self.analysis(path + "&method=values"), self.analysis(path)
                inp = values["input"]["matrix"]
                self.assertEqual((inp["method"], inp["solver"]), ("values", "dgesdd"))
                for absent in ("reconstruction_error", "orthogonality_error", "certificate", "method_note"):
                    self.assertNotIn(absent, inp)
                self.assertEqual(exact["input"]["matrix"]["method"], "exact")
                self.assertIn("orthogonality_error", exact["input"]["matrix"])
                self.assertEqual((values["rank"], values["components_for"]), (exact["rank"], exact["components_for"]))
                s0 = exact["singular_values"][0]
                for key in ("singular_values", "explained_variance_ratio", "cumulative"):
                    scale = s0 if key == "singular_values" else 1.0
                    worst = max(abs(a - b) for a, b in zip(values[key], exact[key]))
                    self.assertLessEqual(worst, 1e-13 * scale, key)

    def compute_jobs(self):
        return settled_metrics()["embedscope_compute_jobs_total"]

    def test_values_is_refused_where_vectors_are_needed(self):
        refused = [(WPE + "/pca?rows=3:77&method=values", "pca"), (WPE + "/vectors?rows=3:77&method=values", "vectors"),
                   ("/v1/compare?matrices=gpt2-small/wpe&analysis=pca&rows=3:77&method=values", "pca")]
        before = self.compute_jobs()
        for path, name in refused:
            with self.subTest(path=path):
                r, doc = get_json(path)
                self.assertEqual((r.status, r.header("Content-Type"), doc["param"]),
                                 (400, "application/problem+json", "method"))
                self.assertIn("method=values gives singular values only; %s needs singular vectors" % name,
                              doc["detail"])
        self.assertEqual(self.compute_jobs(), before, "a refused method=values request ran in the compute pool")
        for path in (WPE + "/periodicity?method=values", "/v1/capture?a=gpt2-small/wpe&b=gpt2-small/h0.q&method=values"):
            with self.subTest(path=path):  # analyses without a method parameter: an unknown parameter
                r, doc = get_json(path)
                self.assertEqual((r.status, doc["param"]), (400, "method"))


class Jobs(ApiCase):
    def test_a_running_decomposition_is_listed(self):
        """GET /v1/jobs lists a decomposition while it runs (a 4096 x 768 one takes far longer than the
        polling interval), with its key, method, size and elapsed time, and no longer once it is done."""
        import threading
        import time
        path = "/v1/models/baselines/matrices/gaussian/spectrum?rows=0:4095&center=rows"
        r, doc = get_json("/v1/jobs")
        self.assertEqual(r.status, 200)
        self.assertEqual(r.header("Cache-Control"), "no-store")
        self.assertIsInstance(doc["jobs"], list)
        done = []
        worker = threading.Thread(target=lambda: done.append(get_json(path)[0].status))
        t0 = time.monotonic()
        worker.start()
        seen = None
        while worker.is_alive() and seen is None:
            jobs = get_json("/v1/jobs")[1]["jobs"]
            seen = next((j for j in jobs if "|0:4095|rows|exact" in j["key"]), None)
            time.sleep(0.005)
        worker.join()
        took = time.monotonic() - t0
        self.assertEqual(done, [200])
        self.assertIsNotNone(seen, "never listed during a %.3f s computation" % took)
        self.assertEqual((seen["method"], seen["n_rows"], seen["d"], seen["k"], seen["fraction"]),
                         ("exact", 4095, 768, None, None))
        self.assertGreaterEqual(seen["elapsed_s"], 0)
        self.assertRegex(seen["started"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
        blas = get_json("/v1")[1]["blas"]
        self.assertEqual(seen["blas"]["core"], blas["core"])
        self.assertGreaterEqual(seen["blas"]["threads"], 1)
        # at most the policy's bound: the cores under "auto", the fixed count per computation otherwise
        self.assertLessEqual(seen["blas"]["threads"], blas["threads"].get("cores") or blas["threads"]["per_computation"])
        self.assertFalse([j for j in get_json("/v1/jobs")[1]["jobs"] if j["key"] == seen["key"]])
        self.assertIn("embedscope_svd_jobs_running", metrics())


class Spectrum(ApiCase):
    def test_defaults_and_shapes(self):
        doc = self.analysis(WPE + "/spectrum")
        self.assert_input(doc["input"]["matrix"], "gpt2-small/wpe", "0:1024", 1024, "columns")
        self.assertEqual(doc["rank"], 768)
        s, evr, cum = doc["singular_values"], doc["explained_variance_ratio"], doc["cumulative"]
        self.assertEqual((len(s), len(evr), len(cum)), (768, 768, 768))
        self.assertEqual(s, sorted(s, reverse=True))
        self.assertGreaterEqual(s[-1], 0)
        total = math.fsum(x * x for x in s)
        for j in (0, 1, 100, 767):
            self.assertTrue(rel_close(evr[j], s[j] ** 2 / total, 1e-12) or evr[j] < 1e-25)
        self.assertAlmostEqual(cum[-1], 1.0, places=13)
        for threshold, key in ((0.5, "0.5"), (0.9, "0.9"), (0.99, "0.99")):
            m = doc["components_for"][key]
            self.assertGreaterEqual(cum[m - 1], threshold - 1e-12, key)
            if m > 1:
                self.assertLess(cum[m - 2], threshold - 1e-12, key)

    def test_rank_is_min_of_rows_and_d(self):
        doc = self.analysis(WPE + "/spectrum?rows=10:15&center=none")
        self.assert_input(doc["input"]["matrix"], "gpt2-small/wpe", "10:15", 5, "none")
        self.assertEqual((doc["rank"], len(doc["singular_values"])), (5, 5))

    def test_exclude_and_rows_centring(self):
        doc = self.analysis(WPE + "/spectrum?rows=0:50&exclude=0,49&center=rows")
        self.assert_input(doc["input"]["matrix"], "gpt2-small/wpe", "1:49", 48, "rows")
        self.assertEqual(doc["rank"], 48)

    def test_items_of_a_conv1d_view(self):
        doc = self.analysis(Q + "/spectrum?center=none")
        inp = doc["input"]["matrix"]
        self.assert_input(inp, "gpt2-small/h0.q", "0:768", 768, "none")
        self.assertIn("columns 0:768", inp["view"])


class Cosine(ApiCase):
    def test_row_mode_is_the_default(self):
        doc = self.analysis(WPE + "/cosine?row=0")
        inp = doc["input"]
        self.assertEqual((inp["mode"], inp["row"]), ("row", 0))
        self.assertNotIn("bins", inp)
        self.assert_input(inp["matrix"], "gpt2-small/wpe", "0:1024", 1024, "none", svd=False)
        self.assertEqual(doc["rows"], list(range(1024)))
        self.assertEqual(len(doc["similarity"]), 1024)
        self.assertAlmostEqual(doc["similarity"][0], 1.0, places=14)
        self.assertTrue(all(-1 - TINY <= x <= 1 + TINY for x in doc["similarity"]))

    def test_row_outside_the_selection_against_the_closed_form(self):
        doc = self.analysis(PE + "/cosine?mode=row&row=700&rows=0:1024:100&exclude=300,500")
        self.assert_input(doc["input"]["matrix"], "sinusoidal/pe", "0:201:100,400,600:1001:100", 9, "none",
                          svd=False)
        self.assertEqual(doc["rows"], [0, 100, 200, 400, 600, 700, 800, 900, 1000])
        for idx, sim in zip(doc["rows"], doc["similarity"]):
            self.assertAlmostEqual(sim, pe_cosine(700 - idx), delta=TINY)

    def test_offset_mode_is_toeplitz_for_sinusoids(self):
        doc = self.analysis(PE + "/cosine?mode=offset&rows=0:64")
        self.assertEqual(doc["input"]["mode"], "offset")
        self.assertNotIn("row", doc["input"])
        self.assertEqual(doc["offsets"], list(range(64)))
        self.assertEqual(doc["pairs"], [64 - k for k in range(64)])
        for k in (0, 1, 7, 63):
            self.assertAlmostEqual(doc["mean"][k], pe_cosine(k), delta=TINY)

    def test_matrix_mode_bins(self):
        doc = self.analysis(PE + "/cosine?mode=matrix&rows=0:64&bins=4")
        self.assertEqual(doc["input"]["bins"], 4)
        self.assertEqual(doc["row_edges"], [0, 16, 32, 48, 64])
        self.assertEqual(doc["col_edges"], [0, 16, 32, 48, 64])
        grid = doc["values"]
        self.assertEqual([len(row) for row in grid], [4] * 4)
        for a in range(4):
            for b in range(4):
                want = math.fsum(pe_cosine(i - j) for i in range(16 * a, 16 * a + 16)
                                 for j in range(16 * b, 16 * b + 16)) / 256
                self.assertAlmostEqual(grid[a][b], want, delta=1e-12)

    def test_matrix_mode_default_bins_and_one_bin_per_item(self):
        doc = self.analysis(PE + "/cosine?mode=matrix")
        self.assertEqual(doc["input"]["bins"], 64)
        self.assertEqual(len(doc["values"]), 64)
        self.assertEqual(doc["row_edges"], list(range(0, 1025, 16)))
        doc = self.analysis(PE + "/cosine?mode=matrix&rows=0:5&bins=10")
        self.assertEqual(doc["row_edges"], [0, 1, 2, 3, 4, 5])
        row = self.analysis(PE + "/cosine?row=2&rows=0:5")["similarity"]
        for j in range(5):
            self.assertAlmostEqual(doc["values"][2][j], row[j], delta=TINY)


class Vectors(ApiCase):
    def test_right_vectors_default(self):
        doc = self.analysis(WPE + "/vectors")
        self.assertEqual((doc["input"]["side"], doc["input"]["k"]), ("right", 3))
        self.assert_input(doc["input"]["matrix"], "gpt2-small/wpe", "0:1024", 1024, "columns")
        self.assertNotIn("rows", doc)
        spec = self.analysis(WPE + "/spectrum")
        self.assertEqual([v["index"] for v in doc["vectors"]], [0, 1, 2])
        for j, v in enumerate(doc["vectors"]):
            self.assertEqual(v["singular_value"], spec["singular_values"][j])  # same decomposition, same double
            self.assertEqual(len(v["values"]), 768)
            self.assertAlmostEqual(math.fsum(x * x for x in v["values"]), 1.0, places=13)
            biggest = max(v["values"], key=abs)
            self.assertGreater(biggest, 0, "sign convention: largest-|x| entry positive")
            self.assertTrue(1 <= v["n50"] <= v["n90"] <= 768)

    def test_left_vectors_are_normalised_pca_coordinates(self):
        doc = self.analysis(WPE + "/vectors?side=left&k=2&rows=1:")
        pca = self.analysis(WPE + "/pca?k=2&rows=1:")
        self.assertEqual((doc["input"]["side"], doc["input"]["k"]), ("left", 2))
        self.assertEqual(doc["rows"], list(range(1, 1024)))
        for j, v in enumerate(doc["vectors"]):
            self.assertEqual(len(v["values"]), 1023)
            s = v["singular_value"]
            for i in (0, 1, 500, 1022):
                self.assertAlmostEqual(v["values"][i] * s, pca["rows"][i]["coords"][j], delta=1e-12 * s)
            self.assertTrue(1 <= v["n50"] <= v["n90"] <= 1023)

    def test_vectors_parameters_echo(self):
        doc = self.analysis(WPE + "/vectors?side=right&k=5&rows=0:30&exclude=0&center=none")
        self.assertEqual(doc["input"]["k"], 5)
        self.assertEqual(len(doc["vectors"]), 5)
        self.assert_input(doc["input"]["matrix"], "gpt2-small/wpe", "1:30", 29, "none")
        doc = self.analysis(WPE + "/vectors?side=left&k=1&rows=0:30&exclude=0&center=rows")
        self.assert_input(doc["input"]["matrix"], "gpt2-small/wpe", "1:30", 29, "rows")
        self.assertEqual(doc["rows"], list(range(1, 30)))


class Capture(ApiCase):
    def test_defaults_and_complete_basis(self):
        doc = self.analysis("/v1/capture?a=gpt2-small/wpe&b=gpt2-small/h0.q")
        inp = doc["input"]
        self.assertEqual(inp["k"], 30)
        self.assert_input(inp["a"], "gpt2-small/wpe", "0:1024", 1024, "none")
        self.assert_input(inp["b"], "gpt2-small/h0.q", "0:768", 768, "none")
        self.assertEqual(doc["baseline"], 30 / 768)
        cap = doc["capture"]
        self.assertEqual(len(cap), 768)
        self.assertTrue(all(-TINY <= c <= 1 + TINY for c in cap))
        self.assertAlmostEqual(doc["sum"], 30.0, places=9)
        self.assertAlmostEqual(math.fsum(cap), doc["sum"], places=10)

    def test_selection_and_centring_parameters_echo(self):
        doc = self.analysis("/v1/capture" + query(a="gpt2-small/wpe", a_rows="1:", a_exclude="5,6", a_center="columns",
                                                  b="gpt2-small/h0.k", b_rows="0:100", b_exclude="0",
                                                  b_center="rows", k=7))
        inp = doc["input"]
        self.assertEqual(inp["k"], 7)
        self.assert_input(inp["a"], "gpt2-small/wpe", "1:5,7:1024", 1021, "columns")
        self.assert_input(inp["b"], "gpt2-small/h0.k", "1:100", 99, "rows")
        self.assertEqual(len(doc["capture"]), 99)
        self.assertEqual(doc["baseline"], 7 / 768)

    def test_a_matrix_captures_its_own_top_subspace(self):
        doc = self.analysis("/v1/capture?a=sinusoidal/pe&b=sinusoidal/pe&k=5&a_center=columns&b_center=columns")
        cap = doc["capture"]
        for j in range(5):
            self.assertAlmostEqual(cap[j], 1.0, delta=1e-12)
        self.assertTrue(all(abs(c) < 1e-12 for c in cap[5:]))


class Overlap(ApiCase):
    def test_defaults_complete_bases_sum_per_bin(self):
        doc = self.analysis("/v1/overlap?a=gpt2-small/wpe&b=gpt2-small/h0.q")
        inp = doc["input"]
        self.assertEqual((inp["ka"], inp["kb"], inp["bins"], inp["blur"]), (768, 768, 64, 0))
        self.assert_input(inp["a"], "gpt2-small/wpe", "0:1024", 1024, "none")
        self.assert_input(inp["b"], "gpt2-small/h0.q", "0:768", 768, "none")
        self.assertEqual(doc["row_edges"], list(range(0, 769, 12)))
        self.assertEqual(doc["col_edges"], list(range(0, 769, 12)))
        grid = doc["overlap"]
        self.assertEqual([len(r) for r in grid], [64] * 64)
        for i in range(64):  # summed blocks of rows and columns that each sum to 1
            self.assertAlmostEqual(math.fsum(grid[i]), 12.0, delta=1e-9)
            self.assertAlmostEqual(math.fsum(row[i] for row in grid), 12.0, delta=1e-9)

    def test_a_matrix_against_itself_is_the_identity(self):
        doc = self.analysis("/v1/overlap?a=openai-gpt/wpe&b=openai-gpt/wpe&a_center=columns&b_center=columns"
                            "&ka=6&kb=6&bins=6")
        self.assertEqual(doc["row_edges"], [0, 1, 2, 3, 4, 5, 6])
        for i, row in enumerate(doc["overlap"]):
            for j, x in enumerate(row):
                self.assertAlmostEqual(x, 1.0 if i == j else 0.0, delta=1e-12)

    def test_blur_smooths_and_is_echoed(self):
        base = "/v1/overlap?a=openai-gpt/wpe&b=openai-gpt/wpe&a_center=columns&b_center=columns&ka=8&kb=8&bins=8"
        sharp = self.analysis(base)["overlap"]
        doc = self.analysis(base + "&blur=1.5")
        self.assertEqual(doc["input"]["blur"], 1.5)
        soft = doc["overlap"]
        self.assertLess(soft[3][3], sharp[3][3])
        self.assertGreater(soft[3][4], sharp[3][4])
        for i in range(8):
            for j in range(8):
                self.assertAlmostEqual(soft[i][j], soft[j][i], delta=1e-12)

    def test_selection_parameters(self):
        doc = self.analysis("/v1/overlap" + query(a="gpt2-small/wpe", a_rows="0:50", a_exclude="3",
                                                  a_center="rows", b="gpt2-small/h0.v", b_rows="0:40",
                                                  b_exclude="39", b_center="columns", ka=10, kb=20, bins=5))
        inp = doc["input"]
        self.assertEqual((inp["ka"], inp["kb"], inp["bins"]), (10, 20, 5))
        self.assert_input(inp["a"], "gpt2-small/wpe", "0:3,4:50", 49, "rows")
        self.assert_input(inp["b"], "gpt2-small/h0.v", "0:39", 39, "columns")
        self.assertEqual(doc["row_edges"], [0, 2, 4, 6, 8, 10])
        self.assertEqual(doc["col_edges"], [0, 4, 8, 12, 16, 20])


class Head(ApiCase):
    def test_head_has_the_get_headers_and_no_body(self):
        path = WPE + "/pca?k=3&rows=1:"
        get, head = request(path), request(path, method="HEAD")
        self.assertEqual((head.status, head.body), (200, b""))
        for name in ("Content-Type", "ETag", "Cache-Control", "Vary"):
            self.assertEqual(head.header(name), get.header(name), name)
        self.assertEqual(int(head.header("Content-Length")), len(get.body))


if __name__ == "__main__":
    unittest.main()
