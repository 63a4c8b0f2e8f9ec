"""Clear answers at the edges of an upload and of the numbers: a Content-Encoding the daemon does not
decode is 415 before the body is read, an empty body gets its format's "empty (0 bytes)", bytes
that are no safetensors file get its format error (not a request for a tensor name), and subnormal
values (finite, down to 5e-324) are computed like any other in cosine and toeplitz."""
import json
import struct
import tempfile
import unittest

from httpkit import DATA, Daemon, request

NPY = {"Content-Type": "application/x-npy"}


def npy_f8(rows, cols, values):
    header = "{'descr': '<f8', 'fortran_order': False, 'shape': (%d, %d), }" % (rows, cols)
    text = header + " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text.encode() + struct.pack("<%dd" % len(values),
                                                                                            *values)


class ClearErrors(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="embedscope-clear-")
        cls.daemon = Daemon({"data_dir": DATA, "uploads": {"tmp_dir": cls.tmp.name},
                             "models": {"base": {"matrices": {"pe": {"generator": "sinusoidal", "n_positions": 8,
                                                                     "d_model": 4}}}}})
        cls.daemon.wait_ready()
        cls.base = cls.daemon.base

    @classmethod
    def tearDownClass(cls):
        cls.daemon.close()
        cls.tmp.cleanup()

    def put(self, path, body, headers):
        r = request(path, method="PUT", headers=headers, body=body, base=self.base)
        return r, (json.loads(r.body) if r.header("Content-Type") == "application/problem+json" else None)

    def test_content_encoding_is_refused(self):
        for coding in ("gzip", "deflate", "br", "gzip, identity"):
            with self.subTest(coding):
                r, doc = self.put("/v1/models/enc/matrices/x", npy_f8(1, 2, [1, 2]), dict(NPY, **{"Content-Encoding": coding}))
                self.assertEqual(r.status, 415, r.body)
                self.assertEqual(doc["param"], "Content-Encoding")
                self.assertIn("is not decoded", doc["detail"])
        r, _ = self.put("/v1/models/enc/matrices/x", npy_f8(1, 2, [1, 2]), dict(NPY, **{"Content-Encoding": "identity"}))
        self.assertEqual(r.status, 201, r.body)
        self.assertEqual(request("/v1/models/enc/matrices/x", method="DELETE", base=self.base).status, 204)

    def test_empty_body_names_its_format(self):
        for content_type, rule in (("application/x-npy", "a .npy file starts with"),
                                   ("application/octet-stream", "empty (0 bytes)")):
            with self.subTest(content_type):
                r, doc = self.put("/v1/models/empty/matrices/x", b"", {"Content-Type": content_type})
                self.assertEqual(r.status, 400, r.body)
                self.assertEqual(doc["param"], "body")
                self.assertIn("empty (0 bytes)", doc["detail"])
                self.assertIn(rule, doc["detail"])
        self.assertEqual(request("/v1/models/empty/matrices/x", base=self.base).status, 404)

    def test_garbage_gets_the_format_error(self):
        r, doc = self.put("/v1/models/junk/matrices/x", b"this is no tensor file at all",
                          {"Content-Type": "application/octet-stream"})
        self.assertEqual(r.status, 400, r.body)
        self.assertEqual(doc["param"], "body")
        self.assertNotIn("needs a tensor name", doc["detail"])

    def test_subnormal_values_compute(self):
        # rows c_i * e_j with subnormal c_i: the cosines of unit vectors; as in tests/analysis
        values = [5e-324, 0, 0, 1e-322, 2e-320, 0, 0, 4.9e-310]
        r, _ = self.put("/v1/models/tiny/matrices/x", npy_f8(4, 2, values), NPY)
        self.assertEqual(r.status, 201, r.body)
        m = "/v1/models/tiny/matrices/x"
        r = request(m + "/cosine?mode=matrix&bins=0", base=self.base)
        self.assertEqual(r.status, 200, r.body[:300])
        got = json.loads(r.body)
        cells = got.get("values") or got.get("matrix")
        flat = [v for row in cells for v in row] if isinstance(cells[0], list) else cells
        self.assertEqual(flat, [1, 0, 1, 0, 0, 1, 0, 1, 1, 0, 1, 0, 0, 1, 0, 1])
        r = request(m + "/cosine?row=0", base=self.base)
        self.assertEqual(r.status, 200, r.body[:300])
        r = request(m + "/toeplitz?kind=cosine", base=self.base)
        self.assertEqual(r.status, 200, r.body[:300])
        self.assertEqual(json.loads(r.body)["score"], 1.0)


if __name__ == "__main__":
    unittest.main()
