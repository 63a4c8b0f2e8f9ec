"""The dashboard's static routes: / and /assets/{file} (src/api/assets.c).

The browser tests (tests/browser) check what the page does; these check what the daemon
serves: types, caching, the build-time gzip, hashed names that match the content, errors.
"""
import gzip
import hashlib
import re
import unittest

from httpkit import ProblemAssertions, request


def asset_refs(html):
    """Relative asset URLs of the page (assets/NAME.HASH.EXT)."""
    return re.findall(r'(?:src|href)="(assets/[^"]+)"', html)


class Dashboard(ProblemAssertions):
    def test_page(self):
        r = request("/")
        self.assertEqual(r.status, 200)
        self.assertEqual(r.header("Content-Type"), "text/html; charset=utf-8")
        self.assertEqual(r.header("Cache-Control"), "no-cache")
        html = r.body.decode()
        self.assertIn("<title>embedscope</title>", html)
        self.assertGreaterEqual(len(asset_refs(html)), 3)
        again = request("/", headers={"If-None-Match": r.header("ETag")})
        self.assertEqual(again.status, 304)
        self.assertEqual(request("/", method="HEAD").body, b"")

    def test_assets_are_hashed_gzipped_and_immutable(self):
        html = request("/").body.decode()
        for ref in asset_refs(html):
            with self.subTest(ref=ref):
                plain = request("/" + ref)
                self.assertEqual(plain.status, 200)
                self.assertIsNone(plain.header("Content-Encoding"))
                name_hash = ref.split(".")[-2]
                self.assertEqual(hashlib.sha256(plain.body).hexdigest()[:16], name_hash)
                self.assertEqual(plain.header("ETag"), 'W/"%s"' % name_hash)
                self.assertEqual(plain.header("Cache-Control"), "public, max-age=31536000, immutable")
                zipped = request("/" + ref, headers={"Accept-Encoding": "gzip"})
                self.assertEqual(zipped.header("Content-Encoding"), "gzip")
                self.assertEqual(gzip.decompress(zipped.body), plain.body)
                self.assertEqual(request("/" + ref, headers={"If-None-Match": plain.header("ETag")}).status, 304)
        types = {ref.rsplit(".", 1)[1]: request("/" + ref).header("Content-Type") for ref in asset_refs(html)}
        self.assertEqual(types.get("js"), "text/javascript; charset=utf-8")
        self.assertEqual(types.get("css"), "text/css; charset=utf-8")

    def test_errors(self):
        self.assert_problem("/assets/nope.js", 404, param="file", slug="not-found")
        self.assert_problem("/assets/index.html", 404, param="file")
        self.assert_problem("/assets/", 404)
        self.assert_problem("/?view=1", 400, param="view", slug="invalid-parameter")


if __name__ == "__main__":
    unittest.main()
