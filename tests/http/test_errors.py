"""Every error class of the API, several cases each, as RFC 9457
application/problem+json documents (type, title, status, detail, instance,
and the offending `param` or `limit`): 400 malformed / out-of-range / unknown /
duplicate / missing parameters, 400 configured limits (max_k, max_bins,
max_rows, max_exclude, max_response_bytes; the small ones on a second daemon
started with a small-limit configuration), 404 unknown model / matrix / path,
422 incompatible matrices, 405 with Allow, 413 request bodies, HEAD, malformed
HTTP; and that the daemon still answers normally afterwards."""
import json
import time
import unittest

from httpkit import (BASE, WPE, raw_exchange, Daemon, ProblemAssertions, get_json, metrics, openapi_document, openapi_query_params,
                     request)

PAIR = "a=gpt2-small/wpe&b=gpt2-small/h0.q"
# One request path of each endpoint of issue 3, by its openapi.yaml path.
ENDPOINTS = {
    "/v1/models": "/v1/models",
    "/v1/models/{model}/matrices/{matrix}": WPE,
    "/v1/models/{model}/matrices/{matrix}/pca": WPE + "/pca",
    "/v1/models/{model}/matrices/{matrix}/spectrum": WPE + "/spectrum",
    "/v1/models/{model}/matrices/{matrix}/cosine": WPE + "/cosine",
    "/v1/models/{model}/matrices/{matrix}/vectors": WPE + "/vectors",
    "/v1/capture": "/v1/capture",
    "/v1/overlap": "/v1/overlap",
    "/healthz": "/healthz", "/readyz": "/readyz", "/openapi.yaml": "/openapi.yaml", "/metrics": "/metrics",
}
# Parameters every client may rely on (issue 3), whatever else an endpoint grows.
CORE_PARAMS = {
    WPE + "/pca": {"rows", "exclude", "center", "k"},
    WPE + "/spectrum": {"rows", "exclude", "center"},
    WPE + "/cosine": {"rows", "exclude", "mode", "row", "bins"},
    WPE + "/vectors": {"rows", "exclude", "center", "side", "k"},
    "/v1/capture": {"a", "b", "a_rows", "a_exclude", "a_center", "b_rows", "b_exclude", "b_center", "k"},
    "/v1/overlap": {"a", "b", "a_rows", "a_exclude", "a_center", "b_rows", "b_exclude", "b_center", "ka", "kb",
                    "bins", "blur"},
}


def raw_get(target, base=BASE):
    """(status, parsed body) of a GET with a request target sent byte for byte."""
    reply = raw_exchange(b"GET " + target + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", base)
    head, _, body = reply.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body) if body else None


class InvalidParameter(ProblemAssertions):
    def bad(self, path, param):
        return self.assert_problem(path, 400, param=param, slug="invalid-parameter")[1]

    def test_malformed_values(self):
        for path, param in [(WPE + "/pca?k=abc", "k"), (WPE + "/pca?k=-1", "k"), (WPE + "/pca?k=3.0", "k"),
                            (WPE + "/pca?k=", "k"), (WPE + "/pca?k=%2B3", "k"),
                            (WPE + "/pca?k=99999999999999999999999", "k"),
                            (WPE + "/pca?rows=abc", "rows"), (WPE + "/pca?rows=1:2:3:4", "rows"),
                            (WPE + "/spectrum?rows=0:10:0", "rows"), (WPE + "/spectrum?exclude=a,b", "exclude"),
                            (WPE + "/spectrum?exclude=1,,2", "exclude"), (WPE + "/spectrum?center=foo", "center"),
                            (WPE + "/spectrum?center=", "center"), (WPE + "/vectors?side=up", "side"),
                            (WPE + "/cosine?mode=foo", "mode"), (WPE + "/cosine?row=x", "row"),
                            ("/v1/overlap?" + PAIR + "&blur=nan", "blur"),
                            ("/v1/overlap?" + PAIR + "&blur=inf", "blur"),
                            ("/v1/overlap?" + PAIR + "&blur=1e400", "blur"),
                            ("/v1/overlap?" + PAIR + "&blur=%201", "blur"),
                            ("/v1/capture?a=nope&b=gpt2-small/wpe", "a"),
                            ("/v1/capture?" + PAIR + "&a_center=x", "a_center"),
                            ("/v1/capture?" + PAIR + "&b_rows=x", "b_rows"), ("/v1/overlap?" + PAIR + "&ka=x", "ka")]:
            with self.subTest(path):
                doc = self.bad(path, param)
                self.assertIn(param, doc["detail"])

    def test_detail_quotes_the_value_and_what_was_expected(self):
        doc = self.bad(WPE + "/pca?center=sideways", "center")
        self.assertIn("sideways", doc["detail"])
        self.assertIn("none, columns, rows", doc["detail"])

    def test_out_of_range_values(self):
        for path, param in [(WPE + "/pca?k=0", "k"), (WPE + "/pca?rows=0:3&k=4", "k"),
                            (WPE + "/vectors?rows=0:2&k=3", "k"), (WPE + "/pca?exclude=1024", "exclude"),
                            (WPE + "/pca?rows=10:0", "rows"), (WPE + "/pca?rows=2000", "rows"),
                            (WPE + "/pca?rows=0:3&exclude=0,1,2", "rows"), (WPE + "/cosine?row=1024", "row"),
                            (WPE + "/cosine?mode=matrix&bins=-1", "bins"),
                            ("/v1/overlap?" + PAIR + "&blur=-1", "blur"), ("/v1/overlap?" + PAIR + "&blur=513", "blur"),
                            ("/v1/overlap?" + PAIR + "&ka=0", "ka"), ("/v1/overlap?" + PAIR + "&kb=769", "kb"),
                            ("/v1/capture?" + PAIR + "&a_rows=0:5&k=6", "k"),
                            ("/v1/capture?" + PAIR + "&b_exclude=768", "b_exclude"),
                            ("/v1/capture?" + PAIR + "&a_exclude=99999", "a_exclude")]:
            with self.subTest(path):
                self.bad(path, param)

    def test_prefixed_selection_errors_use_the_prefixed_name_in_the_detail(self):
        for path, param in (("/v1/capture?" + PAIR + "&b_exclude=999", "b_exclude"),
                            ("/v1/overlap?" + PAIR + "&a_exclude=1,5000", "a_exclude")):
            with self.subTest(path):
                doc = self.bad(path, param)
                self.assertTrue(doc["detail"].startswith(param + ":"), doc["detail"])

    def test_unknown_parameters_name_themselves_and_list_the_documented_ones(self):
        """The parameters an endpoint accepts (listed by the 400) are those openapi.yaml documents."""
        openapi = openapi_document()
        for spec_path, path in ENDPOINTS.items():
            with self.subTest(path):
                doc = self.bad(path + "?zzz=1", "zzz")
                taken = doc["detail"].split("takes: ")[1].rstrip(")")
                accepted = set() if taken == "none" else set(taken.split(", "))
                self.assertEqual(accepted, openapi_query_params(openapi, spec_path))
                self.assertLessEqual(CORE_PARAMS.get(path, set()), accepted)
        self.bad(WPE + "/pca?K=3", "K")  # names are case-sensitive
        self.bad("/v1/capture?" + PAIR + "&bins=3", "bins")
        self.bad("/v1/overlap?" + PAIR + "&k=3", "k")
        self.bad(WPE + "/outliers?center=none", "center")  # row norms are never centred

    def test_repeated_parameters(self):
        self.bad(WPE + "/pca?k=3&k=3", "k")
        self.bad(WPE + "/pca?rows=1:&k=2&rows=1:", "rows")
        self.bad("/v1/capture?" + PAIR + "&a=gpt2-small/wpe", "a")

    def test_missing_and_mode_specific_parameters(self):
        self.bad("/v1/capture", "a")
        self.bad("/v1/capture?a=gpt2-small/wpe", "b")
        self.bad("/v1/overlap?b=gpt2-small/wpe", "a")
        self.bad(WPE + "/cosine", "row")
        self.bad(WPE + "/cosine?mode=row", "row")
        self.bad(WPE + "/cosine?mode=offset&row=1", "row")
        self.bad(WPE + "/cosine?mode=matrix&row=1", "row")
        self.bad(WPE + "/cosine?row=1&bins=3", "bins")
        self.bad(WPE + "/cosine?mode=offset&bins=3", "bins")

    def test_non_utf8_parameter_name_is_replaced_in_the_document(self):
        status, doc = raw_get(WPE.encode() + b"/pca?r\xffows=1")
        self.assertEqual((status, doc["param"]), (400, "r?ows"))

    def test_empty_parameter_name_is_named(self):
        """'?=3' is refused as an unknown parameter, and the problem names it: "param" is present and empty."""
        status, doc = raw_get(WPE.encode() + b"/pca?=3")
        self.assertEqual(status, 400)
        self.assertEqual(doc.get("param"), "")

    def test_reals_are_plain_decimals(self):
        """blur, gap, threshold are finite decimal numbers: C hex floats, inf, nan and blanks, all of
        which strtod takes, are refused; plain forms with a sign, a point or an exponent pass."""
        for value in ("0x1p0", "0X1P0", "0x10", "infinity", "-inf", "NaN", "1e", "e3", ".", "-", "1.5.2",
                      "1,5", "%2B%201", "1%20", "%091"):
            with self.subTest(value):
                self.bad("/v1/overlap?" + PAIR + "&ka=2&kb=2&blur=" + value, "blur")
        self.bad(WPE + "/spectrum?gap=0x0.1p0", "gap")
        self.bad(WPE + "/outliers?threshold=0x1p2", "threshold")
        for value, want in (("1", 1), ("%2B1.5", 1.5), ("-0", 0), ("2.", 2), (".5", 0.5), ("25e-1", 2.5), ("1E1", 10),
                            ("0.0", 0)):
            with self.subTest(value):
                r, doc = get_json("/v1/overlap?" + PAIR + "&ka=2&kb=2&bins=2&blur=" + value)
                self.assertEqual((r.status, doc["input"]["blur"]), (200, want))


class DefaultLimits(ProblemAssertions):
    """The embedded default's limits: max_k 768, max_bins 512, max_exclude 4096 (above what a request line holds)."""

    def test_max_k(self):
        for path in (WPE + "/pca?k=769", WPE + "/vectors?k=1000", "/v1/capture?" + PAIR + "&k=769"):
            with self.subTest(path):
                _, doc = self.assert_problem(path, 400, limit="max_k")
                self.assertIn("768", doc["detail"])

    def test_max_bins(self):
        for path in (WPE + "/cosine?mode=matrix&bins=513", "/v1/overlap?" + PAIR + "&bins=100000"):
            with self.subTest(path):
                self.assert_problem(path, 400, limit="max_bins")

    def test_max_exclude_is_above_what_a_request_line_holds(self):
        """An 8 KiB request line (docs/operations.md) holds about 1,400 excluded indices (of 5 digits), below the default
        max_exclude: a longer list is 414 naming the request line's limit (rows= slices say the rest)."""
        r, doc = get_json(WPE + "/spectrum?center=none&exclude=" + ",".join(str(i) for i in range(4, 1024)))
        self.assertEqual((r.status, doc["input"]["matrix"]["rows"]), (200, "0:4"))
        reply = raw_exchange(("GET %s/pca?exclude=%s HTTP/1.1\r\nHost: x\r\n\r\n"
                              % (WPE, ",".join(str(i) for i in range(4097)))).encode())
        self.assertTrue(reply.startswith(b"HTTP/1.1 414 "), reply[:80])
        self.assertIn(b"the request line is longer than 8192 bytes", reply)


class NotFound(ProblemAssertions):
    def test_unknown_model_or_matrix_in_the_path(self):
        for path, param, name in [("/v1/models/nope/matrices/wpe", "model", "nope"),
                                  ("/v1/models/nope/matrices/wpe/pca", "model", "nope"),
                                  ("/v1/models/gpt2-small/matrices/nope", "matrix", "nope"),
                                  ("/v1/models/gpt2-small/matrices/nope/spectrum?rows=1:", "matrix", "nope"),
                                  ("/v1/models/openai-gpt/matrices/h0.q/cosine?row=0", "matrix", "h0.q"),
                                  ("/v1/models/GPT2-small/matrices/wpe/vectors", "model", "GPT2-small")]:
            with self.subTest(path):
                _, doc = self.assert_problem(path, 404, param=param, slug="not-found")
                self.assertIn("'%s'" % name, doc["detail"])

    def test_unknown_matrix_references(self):
        for path, param in [("/v1/capture?a=foo/bar&b=gpt2-small/wpe", "a"),
                            ("/v1/capture?a=gpt2-small/bar&b=gpt2-small/wpe", "a"),
                            ("/v1/capture?a=gpt2-small/wpe&b=gpt2-small/zz", "b"),
                            ("/v1/overlap?a=gpt2-small/wpe&b=zz/wpe", "b")]:
            with self.subTest(path):
                self.assert_problem(path, 404, param=param, slug="not-found")

    def test_unknown_paths(self):
        # "/" is the dashboard (test_dashboard.py); its assets are one segment under /assets/.
        for path in ("/v1/", "/assets", "/assets/x/y", "/v1/models/", "/v2/models", "/v1//models", WPE + "/",
                     WPE + "/nope",
                     "/v1/models/gpt2-small/", "/v1/models/gpt2-small/matrices", "/problems/zzz", "/README.md",
                     "/v1/models/" + "x" * 300 + "/matrices/wpe"):
            with self.subTest(path):
                self.assert_problem(path, 404, slug="not-found")

    def test_path_lookup_happens_before_parameter_parsing(self):
        self.assert_problem("/v1/models/nope/matrices/wpe/pca?k=abc", 404, param="model")


class Incompatible(ProblemAssertions):
    def test_model_axes_of_different_length(self):
        for path in ("/v1/capture?a=openai-gpt/wpe&b=sinusoidal/rope64",
                     "/v1/capture?a=sinusoidal/rope64&b=gpt2-small/wpe&k=3",
                     "/v1/overlap?a=gpt2-small/h0.q&b=sinusoidal/rope64",
                     "/v1/capture?a=sinusoidal/rope64&b=sinusoidal/pe&a_rows=0:10"):
            with self.subTest(path):
                _, doc = self.assert_problem(path, 422, param="b", slug="incompatible-matrices")
                self.assertIn("64", doc["detail"])
                self.assertIn("768", doc["detail"])


class MethodsAndBodies(ProblemAssertions):
    def test_wrong_methods_are_405_with_allow(self):
        for method in ("POST", "PUT", "DELETE", "PATCH"):
            for path in ("/v1/models", WPE + "/pca?k=3", "/v1/capture?" + PAIR, "/healthz"):
                with self.subTest(method=method, path=path):
                    r, _ = self.assert_problem(path, 405, method=method, slug="method-not-allowed")
                    self.assertEqual(r.header("Allow"), "GET, HEAD, OPTIONS")

    def test_wrong_method_on_an_unknown_path_is_404(self):
        self.assert_problem("/nope", 404, method="POST", slug="not-found")

    def test_request_bodies_are_413(self):
        for headers, body in [({"Content-Type": "application/json"}, b'{"k": 3}'),
                              ({"Content-Length": "99999999999"}, None)]:
            with self.subTest(headers=headers):
                self.assert_problem(WPE + "/pca", 413, slug="body-not-accepted", headers=headers, body=body)
        reply = raw_exchange(b"GET /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                             b"Connection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
        self.assertTrue(reply.startswith(b"HTTP/1.1 413 "), reply[:100])
        self.assertIn(b'"/problems/body-not-accepted"', reply)

    def test_head_of_errors_has_no_body(self):
        for path, status in ((WPE + "/pca?k=abc", 400), ("/v1/models/nope/matrices/wpe", 404),
                             ("/v1/capture?a=openai-gpt/wpe&b=sinusoidal/rope64", 422)):
            with self.subTest(path):
                r, _ = self.assert_problem(path, status, method="HEAD")
                self.assertGreater(int(r.header("Content-Length")), 50)


class MalformedHttp(unittest.TestCase):
    def test_garbage_and_oversized_requests_do_not_crash(self):
        # every one answered with a problem document (the strict framing check, docs/operations.md)
        for data, answer in [(b"GARBAGE\r\n\r\n", b"HTTP/1.1 400 "), (b"GET\r\n\r\n", b"HTTP/1.1 400 "),
                             (b"\x00\xff\xfe /x HTTP/1.1\r\nHost: x\r\n\r\n", b"HTTP/1.1 400 "),
                             (b"GET /healthz HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n", b"HTTP/1.1 400 "),
                             (b"GET /healthz HTTP/9.9\r\nHost: x\r\n\r\n", b"HTTP/1.1 505 "),
                             (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX: " + b"y" * 300000 + b"\r\n\r\n",
                              b"HTTP/1.1 431 "),
                             (b"GET /v1/models?" + b"a" * 300000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", b"HTTP/1.1 414 ")]:
            with self.subTest(data[:40]):
                reply = raw_exchange(data)
                self.assertTrue(reply.startswith(answer), reply[:80])
                self.assertIn(b"\r\nContent-Type: application/problem+json\r\n", reply.partition(b"\r\n\r\n")[0])
        self.assertEqual(request("/healthz").status, 200)

    def test_non_utf8_path_gives_a_valid_problem(self):
        status, doc = raw_get(b"/v1/\xff\xfe")
        self.assertEqual((status, doc["instance"], doc["type"]), (404, "/v1/??", "/problems/not-found"))

    def test_percent_escapes_in_values(self):
        status, doc = raw_get(WPE.encode() + b"/pca?rows=%zz")
        self.assertEqual((status, doc["param"]), (400, "rows"))
        status, doc = raw_get(WPE.encode() + b"/pca?k=%33&rows=0%3A20")
        self.assertEqual((status, doc["input"]["k"], doc["input"]["matrix"]["rows"]), (200, 3, "0:20"))


# max_response_bytes: the JSON document's tables are bounded at 25 bytes a number (row index included)
# before computing, so the requests that must pass stay within 8192 that way
SMALL_LIMITS = {"max_k": 5, "max_bins": 4, "max_rows": 100, "max_exclude": 3, "max_response_bytes": 8192}


class ConfiguredLimits(ProblemAssertions):
    """A second daemon with small limits: each one is a 400 naming it, and requests just under pass."""

    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon({
            "server": {"threads": 2},
            "limits": SMALL_LIMITS,
            "models": {"m": {"matrices": {
                "wpe": {"file": "gpt2-small/wpe.npy"},
                "pe": {"generator": "sinusoidal", "n_positions": 64, "d_model": 768}}}}})
        cls.base = cls.daemon.base

    @classmethod
    def tearDownClass(cls):
        cls.daemon.close()

    def ok(self, path):
        r, doc = get_json(path, base=self.base)
        self.assertEqual(r.status, 200, r.body[:300])
        return doc

    def test_max_k(self):
        for path in ("/v1/models/m/matrices/pe/pca?k=6", "/v1/models/m/matrices/pe/vectors?k=6",
                     "/v1/capture?a=m/pe&b=m/pe&k=6"):
            with self.subTest(path):
                self.assert_problem(path, 400, limit="max_k")
        self.assertEqual(self.ok("/v1/models/m/matrices/pe/pca?rows=0:10&k=5")["input"]["k"], 5)

    def test_default_k_is_capped_by_max_k(self):
        doc = self.ok("/v1/capture?a=m/pe&b=m/pe&b_rows=0:3")
        self.assertEqual(doc["input"]["k"], 5)
        self.assertEqual(doc["baseline"], 5 / 768)

    def test_max_bins(self):
        for path in ("/v1/models/m/matrices/pe/cosine?mode=matrix&bins=5",
                     "/v1/overlap?a=m/pe&b=m/pe&bins=5&ka=8&kb=8"):
            with self.subTest(path):
                self.assert_problem(path, 400, limit="max_bins")
        doc = self.ok("/v1/models/m/matrices/pe/cosine?mode=matrix")
        self.assertEqual((doc["input"]["bins"], len(doc["values"])), (4, 4))  # default 64 capped to max_bins

    def test_max_rows(self):
        for path in ("/v1/models/m/matrices/wpe/pca?rows=0:101&k=1", "/v1/models/m/matrices/wpe/spectrum",
                     "/v1/models/m/matrices/wpe/cosine?row=0", "/v1/capture?a=m/wpe&b=m/pe&k=1",
                     "/v1/capture?a=m/pe&b=m/wpe&k=1&b_rows=::2"):
            with self.subTest(path):
                _, doc = self.assert_problem(path, 400, limit="max_rows")
                self.assertIn("100", doc["detail"])
        doc = self.ok("/v1/models/m/matrices/wpe/cosine?row=0&rows=0:200:2")
        self.assertEqual((doc["input"]["matrix"]["n_rows"], len(doc["similarity"])), (100, 100))

    def test_max_exclude(self):
        self.assert_problem("/v1/models/m/matrices/pe/spectrum?exclude=1,2,3,4", 400, limit="max_exclude")
        self.assert_problem("/v1/capture?a=m/pe&b=m/pe&k=1&b_exclude=1,2,3,4", 400, limit="max_exclude")
        doc = self.ok("/v1/models/m/matrices/pe/spectrum?rows=0:48&exclude=1,2,3")  # (within max_response_bytes)
        self.assertEqual(doc["input"]["matrix"]["rows"], "0,4:48")

    def test_max_exclude_detail_counts_the_rows(self):
        """The detail counts the rows listed (it used to read the count after freeing the list: 0)."""
        _, doc = self.assert_problem("/v1/models/m/matrices/pe/spectrum?exclude=" + ",".join(str(i) for i in range(10)),
                                     400, limit="max_exclude")
        self.assertIn("lists 10 rows", doc["detail"])

    def test_max_response_bytes(self):
        _, doc = self.assert_problem("/v1/models/m/matrices/wpe/pca?rows=0:100&k=5", 400, limit="max_response_bytes")
        self.assertIn("8192", doc["detail"])
        self.assert_problem("/v1/models/m/matrices/pe/vectors?k=4", 400, limit="max_response_bytes")
        self.ok("/v1/models/m/matrices/wpe/pca?rows=0:10&k=2")

    def test_limits_do_not_stop_the_service(self):
        self.assertEqual(request("/healthz", base=self.base).status, 200)
        self.assertEqual(request("/readyz", base=self.base).status, 200)


class ZzStillServing(unittest.TestCase):
    """Runs after the other classes of this module: the daemon answers as before."""

    def test_serves_normally_after_all_errors(self):
        self.assertEqual(request("/healthz").status, 200)
        r, doc = get_json(WPE + "/pca?k=3&rows=1:")
        self.assertEqual((r.status, len(doc["rows"]), doc["input"]["k"]), (200, 1023, 3))
        r, doc = get_json("/v1/models")
        self.assertEqual(r.status, 200)
        self.assertIn("gpt2-small", [m["name"] for m in doc["models"]])
        # No request stays counted in flight: a poll sees only itself (completions are counted just
        # after the client has its reply, so an earlier poll may still be counted for a moment).
        deadline = time.monotonic() + 10
        while metrics()["embedscope_http_requests_in_flight"] != 1:
            self.assertLess(time.monotonic(), deadline, "requests left counted in flight")
            time.sleep(0.05)


if __name__ == "__main__":
    unittest.main()
