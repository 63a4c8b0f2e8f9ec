"""The API reference at /docs: an offline page (Swagger UI bundled into the daemon) that renders
the served openapi.yaml, linked from the dashboard. (The browser tests render it in chromium.)"""
import re
import unittest
import urllib.parse

from httpkit import openapi_document, request


class ApiReference(unittest.TestCase):
    def test_docs_page_references_the_served_openapi_yaml_and_its_bundled_assets(self):
        r = request("/docs")
        self.assertEqual(r.status, 200)
        self.assertEqual(r.header("Content-Type"), "text/html; charset=utf-8")
        self.assertEqual(r.header("Cache-Control"), "no-cache")
        html = r.body.decode()
        self.assertIn('data-spec="openapi.yaml"', html)  # relative: works under a proxy prefix
        refs = re.findall(r'(?:src|href)="([^"]+)"', html)
        self.assertTrue(all(not urllib.parse.urlsplit(u).scheme or u.startswith("data:") for u in refs), refs)
        scripts = re.findall(r'<script src="([^"]+)"', html)
        self.assertEqual(len(scripts), 2, html)
        bodies = {}
        for ref in refs:
            if ref.startswith("assets/"):
                a = request("/" + ref)
                self.assertEqual(a.status, 200, ref)
                bodies[ref] = a.body
        swagger, init = (bodies[s] for s in scripts)
        self.assertGreater(len(swagger), 500_000)  # the whole Swagger UI bundle, not a loader
        self.assertIn(b"SwaggerUIBundle", swagger)
        self.assertIn(b"data-spec", init)
        self.assertIn(b"validatorUrl: null", init)  # the badge would send the document outside
        self.assertEqual(request("/openapi.yaml").status, 200)

    def test_linked_from_the_dashboard_and_described(self):
        self.assertRegex(request("/").body.decode(), r'<a class="docs" href="docs">')
        self.assertIn("/docs", openapi_document()["paths"])

    def test_the_description_is_not_read_only_and_every_computing_get_declares_504(self):
        doc = openapi_document()
        self.assertNotIn("Read-only:", doc["info"]["description"])
        self.assertIn("put", doc["paths"]["/v1/models/{model}/matrices/{matrix}"])
        self.assertIn("delete", doc["paths"]["/v1/models/{model}/matrices/{matrix}"])
        # the GETs that queue on the compute pool (their 503 is "server busy")
        computing = [(p, op) for p, item in doc["paths"].items() for m, op in item.items()
                     if m == "get" and op.get("responses", {}).get("503") == {"$ref": "#/components/responses/Busy"}]
        self.assertGreater(len(computing), 15)
        for path, op in computing:
            self.assertEqual(op["responses"].get("504"), {"$ref": "#/components/responses/Timeout"}, path)
        self.assertIn("timeout", doc["components"]["responses"]["Timeout"]["description"])

    def test_pages_are_not_assets(self):
        for name in ("docs.html", "index.html"):
            self.assertEqual(request("/assets/" + name).status, 404, name)


if __name__ == "__main__":
    unittest.main()
