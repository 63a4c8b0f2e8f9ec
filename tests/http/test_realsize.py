"""Real model sizes on the embedded default (issue 20): a token embedding the size of GPT-2's
(50257 x 768, float32, a seeded Gaussian with a decaying spectrum: the real wte is not in ../shared)
is uploaded and every analysis the dashboard and the README show answers, its numbers checked
against numpy. Long requests may answer as jobs (202): result() follows them to their reply."""
import io
import time
import unittest

import numpy as np

from httpkit import Daemon, request

N, D = 50257, 768
MINE = "/v1/models/mine/matrices/wte/"
GENEROUS = 900


def token_embedding():
    rng = np.random.default_rng(20)
    return (rng.standard_normal((N, D)) * (0.995 ** np.arange(D))).astype(np.float32)


def result(base, path):
    """The 200 of path, waiting for its job when the daemon answers 202 (Location: /v1/jobs/{id})."""
    r = request(path, base=base, headers={"Prefer": "wait=600"}, timeout=GENEROUS)
    deadline = time.monotonic() + GENEROUS
    while r.status == 202:
        assert time.monotonic() < deadline, path
        job = r.headers["Location"]
        time.sleep(0.5)
        r = request(job, base=base, timeout=GENEROUS)
        if r.status == 303:
            r = request(r.headers["Location"], base=base, timeout=GENEROUS)
        elif r.status == 200:
            r = type(r)(202, {"Location": job}, b"")
    assert r.status == 200, (path, r.status, r.body[:400])
    return r.json()


class TokenEmbedding(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.x = token_embedding()
        buf = io.BytesIO()
        np.save(buf, cls.x)
        cls.daemon = Daemon()
        cls.base = cls.daemon.base
        r = request("/v1/models/mine/matrices/wte", method="PUT", body=buf.getvalue(),
                    headers={"Content-Type": "application/x-npy"}, base=cls.base, timeout=GENEROUS)
        assert r.status == 201, r.body[:400]
        x = cls.x.astype(np.float64)
        mean = x.mean(axis=0)
        cls.xc_head = x[:100] - mean  # the rows whose PCA coordinates are checked
        # One product of the 50257 rows (the reference's cost): the uncentred Gram matrix, for the pair
        # analyses (centre none), and from it the centred one, X'X - n m m' (the column means are
        # ~1/sqrt(n) of the entries here: the difference loses no digit that matters)
        gram = x.T @ x
        wu, vu = np.linalg.eigh(gram)
        cls.vu = vu[:, ::-1]
        w, v = np.linalg.eigh(gram - N * np.outer(mean, mean))  # the Gram route: the top values to ~1e-13 here
        cls.s = np.sqrt(np.maximum(w[::-1], 0))
        cls.v = v[:, ::-1]
        wpe = np.load(cls.daemon_data("gpt2-small/wpe.npy")).astype(np.float64)
        cls.va_wpe = np.linalg.svd(wpe, full_matrices=False)[2]

    @classmethod
    def daemon_data(cls, rel):
        from httpkit import DATA
        import os
        return os.path.join(DATA, rel)

    @classmethod
    def tearDownClass(cls):
        cls.daemon.close()

    def test_spectrum_values_and_exact(self):
        for method in ("values", "exact"):
            with self.subTest(method=method):
                doc = result(self.base, MINE + "spectrum?method=" + method)
                got = np.array(doc["singular_values"][:50])
                np.testing.assert_allclose(got, self.s[:50], rtol=1e-9)
                self.assertGreater(doc["input"]["cost"]["predicted_seconds"], 0)

    def test_pca_topk_and_exact(self):
        evr = self.s ** 2 / np.sum(self.s ** 2)
        for method in ("topk", "exact"):
            with self.subTest(method=method):
                doc = result(self.base, MINE + "pca?k=3&method=" + method)
                np.testing.assert_allclose(doc["explained_variance_ratio"], evr[:3], rtol=1e-9)
                coords = np.array([row["coords"] for row in doc["rows"]])
                self.assertEqual(coords.shape, (N, 3))
                want = self.xc_head @ self.v[:, :3]
                np.testing.assert_allclose(np.abs(coords[:100]), np.abs(want), rtol=1e-7, atol=1e-9)

    def test_vectors(self):
        doc = result(self.base, MINE + "vectors?k=30")
        np.testing.assert_allclose([v["singular_value"] for v in doc["vectors"]], self.s[:30], rtol=1e-9)

    def test_cosine_row(self):
        doc = result(self.base, MINE + "cosine?row=5")
        xn = self.x.astype(np.float64)
        xn /= np.linalg.norm(xn, axis=1, keepdims=True)
        np.testing.assert_allclose(doc["similarity"], xn @ xn[5], rtol=1e-12, atol=1e-13)

    def test_cosine_offset_and_binned_on_the_first_rows(self):
        n = 4096
        xn = self.x[:n].astype(np.float64)
        xn /= np.linalg.norm(xn, axis=1, keepdims=True)
        g = xn @ xn.T
        doc = result(self.base, MINE + "cosine?mode=offset&rows=0:%d" % n)
        want = [np.mean(np.diagonal(g, o)) for o in (0, 1, 100, 4095)]
        np.testing.assert_allclose([doc["mean"][o] for o in (0, 1, 100, 4095)], want, rtol=1e-12, atol=1e-14)
        doc = result(self.base, MINE + "cosine?mode=matrix&bins=16&rows=0:%d" % n)
        want = g.reshape(16, n // 16, 16, n // 16).mean(axis=(1, 3))
        np.testing.assert_allclose(doc["values"], want, rtol=1e-12, atol=1e-14)

    def test_pairs_with_a_model_matrix(self):
        doc = result(self.base, "/v1/capture?a=gpt2-small/wpe&b=mine/wte&k=30")
        proj = self.va_wpe[:30] @ self.vu
        np.testing.assert_allclose(doc["capture"][:20], np.sum(proj[:, :20] ** 2, axis=0), atol=1e-8)
        doc = result(self.base, "/v1/overlap?a=mine/wte&b=gpt2-small/wpe&ka=10&kb=10&bins=0")
        want = (self.vu[:, :10].T @ self.va_wpe[:10].T) ** 2
        np.testing.assert_allclose(doc["overlap"], want, atol=1e-8)
        doc = result(self.base, "/v1/alignment?w=mine/wte&r=gpt2-small/wpe")
        self.assertEqual(len(doc["capture"]), D)
        doc = result(self.base, "/v1/compare?matrices=mine/wte,gpt2-small/wpe&analysis=spectrum")
        self.assertEqual(len(doc["results"]), 2)

    def test_the_whole_matrix_is_never_refused_for_its_size(self):
        # offset and binned cosine of every row: the n x n matrix is never held, so the prediction fits
        # the memory budget and the request is served (as a job when it is predicted to take long)
        for path in (MINE + "cosine?mode=offset", MINE + "cosine?mode=matrix&bins=64", MINE + "toeplitz"):
            with self.subTest(path=path):
                r = request(path, base=self.base, headers={"Prefer": "respond-async"})
                if "toeplitz" in path:  # toeplitz holds its n x n Gram matrix: 20 GB, refused at once
                    self.assertEqual((r.status, r.json().get("limit")), (400, "max_request_memory"))
                    continue
                self.assertIn(r.status, (200, 202), r.body[:300])
                if r.status == 202:
                    request(r.headers["Location"], method="DELETE", base=self.base)


if __name__ == "__main__":
    unittest.main()
