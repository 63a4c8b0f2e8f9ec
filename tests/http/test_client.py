"""The Python client (clients/python) against the live daemon: installed from the checkout
with pip (offline: --no-index, its in-tree build backend), then every method checked
against the daemon's own JSON answers, and examples/tour.py run as it is."""
import io
import json
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

from httpkit import BASE, DATA, ROOT, get_json, request

try:
    import pandas as pd
except ImportError:  # make test installs python3-pandas; without it the numpy paths still run
    pd = None

PYTHON = "/usr/bin/python3"
WPE = "gpt2-small/wpe"
_target = tempfile.TemporaryDirectory(prefix="embedscope-client-")


def setUpModule():
    """pip install ./clients/python into a fresh directory (no index: nothing is downloaded)
    and import it from there, not from the checkout."""
    p = subprocess.run([PYTHON, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--target",
                        _target.name, os.path.join(ROOT, "clients", "python")],
                       capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise AssertionError("pip install ./clients/python failed:\n" + p.stdout + p.stderr)
    sys.path.insert(0, _target.name)
    global embedscope
    import embedscope
    assert embedscope.__file__.startswith(_target.name), embedscope.__file__


def tearDownModule():
    sys.path.remove(_target.name)
    _target.cleanup()


class Tables(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.es = embedscope.Client(BASE)
        cls.np = embedscope.Client(BASE, as_="numpy")

    @classmethod
    def tearDownClass(cls):
        cls.es.close()
        cls.np.close()

    def test_models_lists_every_matrix(self):
        doc = get_json("/v1/models")[1]
        ids = [x["id"] for m in doc["models"] for x in m["matrices"]]
        rows = self.es.models(as_="numpy")
        self.assertEqual([r["id"] for r in rows], ids)
        wpe = rows[ids.index(WPE)]
        self.assertEqual((wpe["rows"], wpe["cols"], wpe["model_axis"]), (1024, 768, "columns"))
        if pd is not None:
            df = self.es.models()
            self.assertEqual(list(df.index), ids)
            self.assertEqual(df.loc[WPE, "items"], 1024)

    def test_pca_is_the_daemons_answer_bit_for_bit(self):
        doc = get_json("/v1/models/gpt2-small/matrices/wpe/pca?k=3&rows=1:")[1]
        want = np.array([r["coords"] for r in doc["rows"]])
        got = self.np.pca(WPE, k=3, rows="1:")
        self.assertEqual(got.dtype, np.float64)
        np.testing.assert_array_equal(got, want)
        if pd is not None:
            df = self.es.pca(WPE, k=3, rows="1:")
            self.assertEqual((df.shape, df.index.name, df.index[0], df.index[-1]), ((1023, 3), "row", 1, 1023))
            np.testing.assert_array_equal(df.values, want)  # CSV's 17 digits parse back exactly
            var = self.es.pca(WPE, k=3, rows="1:", table="variance")
            np.testing.assert_array_equal(var.iloc[:, 0].values, doc["explained_variance_ratio"])

    def test_spectrum_cosine_capture_overlap(self):
        spec = self.np.spectrum(WPE, rows="1:")
        doc = get_json("/v1/models/gpt2-small/matrices/wpe/spectrum?rows=1:")[1]
        np.testing.assert_array_equal(spec[:, 0], doc["singular_values"])
        row = self.np.cosine(WPE, row=1, rows="0:31")
        x = np.load(os.path.join(DATA, "gpt2-small", "wpe.npy")).astype(np.float64)[0:31]
        cos = x @ x[1] / (np.linalg.norm(x, axis=1) * np.linalg.norm(x[1]))
        np.testing.assert_allclose(row, cos, rtol=0, atol=1e-12)
        full = self.np.cosine(WPE, mode="matrix", bins=0, rows="0:31")
        self.assertEqual(full.shape, (31, 31))
        np.testing.assert_allclose(full[1], cos, rtol=0, atol=1e-12)
        offsets = self.np.cosine(WPE, mode="offset")
        self.assertEqual(offsets.ndim, 2)
        cap = self.np.capture(WPE, "openai-gpt/wpe", k=30)
        raw = request("/v1/capture?a=gpt2-small/wpe&b=openai-gpt/wpe&k=30&format=npy").body
        np.testing.assert_array_equal(cap, np.load(io.BytesIO(raw)))
        ov = self.np.overlap(WPE, "openai-gpt/wpe")
        self.assertEqual(ov.ndim, 2)
        self.assertLessEqual(np.nanmax(np.abs(ov)), 1 + 1e-12)

    def test_alignment_and_attention(self):
        al = self.np.alignment(w="gpt2-small/h0.q", r=WPE, k=10, r_rows="1:", r_center="columns")
        self.assertTrue(np.all(np.isfinite(al)))
        at = self.np.attention(model="gpt2-small", layer=0, queries="1:64")
        self.assertEqual(at.shape[0], 12)  # one row per head


class Errors(unittest.TestCase):
    def test_problems_are_typed_and_carry_the_document(self):
        es = embedscope.Client(BASE)
        self.addCleanup(es.close)
        with self.assertRaises(embedscope.BadRequestError) as cm:
            es.pca(WPE, k=0)
        e = cm.exception
        self.assertEqual((e.status, e.param, e.slug), (400, "k", "invalid-parameter"))
        self.assertEqual(e.problem["status"], 400)
        self.assertRegex(e.request_id, r"^[0-9a-f]{32}$")
        with self.assertRaises(embedscope.NotFoundError) as cm:
            es.spectrum("gpt2-small/nope")
        self.assertEqual(cm.exception.problem["type"].rsplit("/", 1)[-1], "not-found")
        with self.assertRaises(embedscope.ConflictError):
            es.upload("gpt2-small/wpe", np.zeros((2, 2)))
        with self.assertRaises(ValueError):
            es.pca("no-slash")
        self.assertTrue(issubclass(embedscope.TimeoutError, embedscope.EmbedscopeError))


class Uploads(unittest.TestCase):
    def test_array_file_generator_and_delete(self):
        es = embedscope.Client(BASE, as_="numpy")
        self.addCleanup(es.close)
        rng = np.random.default_rng(7)
        x = rng.standard_normal((40, 16))
        try:
            doc = es.upload("clienttest/x", x)
            self.assertEqual(doc["shape"], [40, 16])
            np.testing.assert_array_equal(es.rows("clienttest/x"), x)
            s = es.spectrum("clienttest/x", center="none")
            np.testing.assert_allclose(s[:, 0], np.linalg.svd(x, compute_uv=False), rtol=1e-12)
            with tempfile.NamedTemporaryFile(suffix=".npy") as f:
                np.save(f, x[:10].astype(np.float32))
                f.flush()
                doc = es.upload("clienttest/f", f.name)
            self.assertEqual((doc["shape"], doc["dtype"]), ([10, 16], "<f4"))
            doc = es.upload("clienttest/pe", {"generator": "sinusoidal", "n_positions": 32, "d_model": 8})
            self.assertEqual(doc["shape"], [32, 8])
            ids = [r["id"] for r in es.models()]
            self.assertIn("clienttest/pe", ids)
        finally:
            for name in ("x", "f", "pe"):
                try:
                    es.delete("clienttest/" + name)
                except embedscope.NotFoundError:
                    pass
        self.assertNotIn("clienttest/x", [r["id"] for r in es.models()])
        with self.assertRaises(embedscope.NotFoundError):
            es.delete("clienttest/x")

    def test_safetensors_file(self):
        es = embedscope.Client(BASE, as_="numpy")
        self.addCleanup(es.close)
        x = np.arange(12, dtype="<f4").reshape(3, 4)
        header = json.dumps({"w": {"dtype": "F32", "shape": [3, 4], "data_offsets": [0, x.nbytes]}}).encode()
        with tempfile.NamedTemporaryFile(suffix=".safetensors") as f:
            f.write(len(header).to_bytes(8, "little") + header + x.tobytes())
            f.flush()
            try:
                doc = es.upload("clienttest/st", f.name, tensor="w")
                self.assertEqual(doc["shape"], [3, 4])
                np.testing.assert_array_equal(es.rows("clienttest/st"), x.astype(np.float64))
            finally:
                es.delete("clienttest/st")


class Jobs(unittest.TestCase):
    def test_jobs_list(self):
        with embedscope.Client(BASE) as es:
            self.assertIsInstance(es.jobs(), list)

    def test_a_202_is_followed_to_the_result_and_a_failed_job_raises_its_problem(self):
        """The daemon's 202 jobs as the client expects them (a stand-in server on loopback): the
        analysis answers 202 with Location /v1/jobs/{id}; the job runs twice, then is done; the
        analysis then answers 200. A failed job's problem document becomes the exception."""
        import http.server
        import threading
        seen = []

        class Handler(http.server.BaseHTTPRequestHandler):
            polls = 0

            def log_message(self, *args):
                pass

            def reply(self, status, doc=None, body=None, ctype="application/json", headers=()):
                data = body if body is not None else json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers:
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                seen.append(self.path)
                path = self.path.split("?")[0]
                if path == "/v1/models/m/matrices/x/spectrum":
                    if Handler.polls < 3:
                        return self.reply(202, {"id": "j1", "status": "queued"}, headers=[("Location", "/v1/jobs/j1")])
                    buf = io.BytesIO()
                    np.save(buf, np.arange(3.0))
                    return self.reply(200, body=buf.getvalue(), ctype="application/x-npy")
                if path == "/v1/models/m/matrices/x/pca":
                    return self.reply(202, {"id": "j2", "status": "queued"}, headers=[("Location", "/v1/jobs/j2")])
                if path == "/v1/jobs/j1":
                    Handler.polls += 1
                    done = Handler.polls >= 3
                    return self.reply(200, {"id": "j1", "status": "done" if done else "running",
                                            "fraction": min(1.0, Handler.polls / 3)})
                if path == "/v1/jobs/j2":
                    return self.reply(200, {"id": "j2", "status": "failed", "problem": {
                        "type": "/problems/timeout", "title": "Timeout", "status": 504, "detail": "too slow"}})
                self.reply(404, {"type": "/problems/not-found", "status": 404, "detail": path})

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)
        with embedscope.Client("http://127.0.0.1:%d" % server.server_port, as_="numpy") as es:
            np.testing.assert_array_equal(es.spectrum("m/x"), [0.0, 1.0, 2.0])
            self.assertEqual([p.split("?")[0] for p in seen], ["/v1/models/m/matrices/x/spectrum"] +
                             ["/v1/jobs/j1"] * 3 + ["/v1/models/m/matrices/x/spectrum"])
            with self.assertRaises(embedscope.TimeoutError) as cm:
                es.pca("m/x")
            self.assertEqual((cm.exception.status, cm.exception.slug, cm.exception.detail), (504, "timeout", "too slow"))


@unittest.skipIf(pd is None, "examples/tour.py needs pandas (python3-pandas)")
class Tour(unittest.TestCase):
    def test_examples_tour_runs(self):
        env = dict(os.environ, EMBEDSCOPE_URL=BASE, PYTHONPATH=_target.name)
        p = subprocess.run([PYTHON, os.path.join(ROOT, "examples", "tour.py")], capture_output=True, text=True,
                           timeout=300, env=env, cwd=ROOT)
        self.assertEqual(p.returncode, 0, p.stdout[-2000:] + p.stderr[-2000:])
        self.assertIn("helix", p.stdout)


if __name__ == "__main__":
    unittest.main()
