"""deploy/nginx.conf, live: Debian's nginx on a free loopback port in front of a
daemon of its own (tests/deploy/nginx.sh through nginxkit.Nginx).

Checks what an operator relies on: results cached (MISS then HIT, one daemon
request), every answer with its own X-Request-Id (a hit does not replay the
first one; nginx's access log and the daemon's both name it), 304 and gzip
through the cache, one entry for the many header spellings browsers send (the
key holds the format, the coding and, with a restricted CORS list, the allowed
Origin: never the raw headers), CORS with a restricted allow-list (an allowed
origin's reply is never given to another), the /embedscope/ prefix deployment,
writes refused without the upload token (or an allow-listed address), a slow
computation never retried on another replica, and nginx's own errors (401,
502 with the daemon down, 504 from an upstream that never answers, 413) as
problem+json."""
import gzip
import http.client
import itertools
import json
import re
import socket
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.parse

import yaml

from httpkit import DATA, WPE, Daemon, request
from nginxkit import Nginx

ORIGIN = "http://dash.example"
TOKEN = "proxy-test-token"
AUTH = {"Authorization": "Bearer " + TOKEN}
# nginx is the daemon's trusted proxy (docs/operations.md): its client addresses and request ids are taken.
# sync_seconds: every answer here is synchronous however loaded the machine (a request that became a job
# reached the daemon three times: the 202, the poll and the result, where the tests count one).
CONFIG = {"server": {"cors_origins": [ORIGIN], "trusted_proxies": ["127.0.0.1"]},
          "limits": {"sync_seconds": 600},
          "uploads": {"enabled": True, "token": TOKEN},
          "models": {"gpt2-small": {"matrices": {"wpe": {"file": "gpt2-small/wpe.npy"}}}}}
# Header spellings of one request by browsers and HTTP libraries: two Accept, two Accept-Encoding
# (all with gzip) and with or without an Origin the daemon does not allow: one reply for all.
BROWSER_HEADERS = [dict(h for h in combo if h[1] is not None) for combo in itertools.product(
    (("Accept", "*/*"), ("Accept", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8")),
    (("Accept-Encoding", "gzip, deflate, br"), ("Accept-Encoding", "gzip, deflate, br, zstd")),
    (("Origin", None), ("Origin", "http://elsewhere.example")))]
FRESH = itertools.count(2)


def fresh(analysis="spectrum"):
    """A result path this daemon has not computed before (a distinct row range)."""
    return "%s/%s?rows=0:%d" % (WPE, analysis, 1000 - next(FRESH))


def logged(daemon, needle, want, timeout=10):
    """How often needle is in daemon's log once it reaches want (the access line is written
    when a request completes, just after its reply went out), or after timeout seconds."""
    deadline = time.monotonic() + timeout
    while True:
        n = daemon.log().count(needle)
        if n >= want or time.monotonic() > deadline:
            return n
        time.sleep(0.02)


def problem_of(testcase, r, status):
    """The problem document of a reply that must be one, with that status."""
    testcase.assertEqual(r.status, status, r.body[:300])
    testcase.assertEqual(r.header("Content-Type"), "application/problem+json")
    doc = json.loads(r.body)
    testcase.assertEqual(doc["status"], status)
    testcase.assertTrue(doc["type"] and doc["title"] and doc["detail"])
    testcase.assertEqual(doc["request_id"], r.header("X-Request-Id"))
    return doc


@unittest.skipUnless(Nginx.available(), "nginx is not installed")
class Proxy(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon(CONFIG)
        cls.daemon.wait_ready()
        cls.proxy = Nginx(cls.daemon.base, cors_origins=[ORIGIN])
        cls.base = cls.proxy.base

    @classmethod
    def tearDownClass(cls):
        cls.proxy.close()
        cls.daemon.close()

    def get(self, path, **kw):
        return request(path, base=self.base, **kw)

    def daemon_hits(self, path, want):
        """How many times the daemon's access log shows this path and query, once it shows it
        `want` times (or after a timeout; a count above want is returned as it is)."""
        return logged(self.daemon, " %s " % urllib.parse.unquote(path), want)

    def test_rendered_config_passes_nginx_t(self):
        out = subprocess.run(["nginx", "-t", "-p", self.proxy.dir, "-c", self.proxy.dir + "/nginx.conf"],
                             capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stderr)

    def test_miss_then_hit_reaches_the_daemon_once(self):
        path = fresh()
        first, second = self.get(path), self.get(path)
        self.assertEqual((first.status, second.status), (200, 200))
        self.assertEqual(first.header("X-Cache-Status"), "MISS")
        self.assertEqual(second.header("X-Cache-Status"), "HIT")
        self.assertEqual(first.body, second.body)
        self.assertEqual(first.header("ETag"), second.header("ETag"))
        self.assertEqual(self.daemon_hits(path, 1), 1, self.daemon.log()[-2000:])

    def test_every_answer_has_its_own_request_id(self):
        path = fresh()
        first, second = self.get(path), self.get(path)
        self.assertEqual(second.header("X-Cache-Status"), "HIT")
        ids = first.header("X-Request-Id"), second.header("X-Request-Id")
        for rid in ids:
            self.assertRegex(rid, r"^[0-9a-f]{32}$")
        self.assertNotEqual(ids[0], ids[1])
        # The daemon logged the proxy's id for the request that reached it; nginx logs both.
        self.assertEqual(logged(self.daemon, "id=%s" % ids[0], 1), 1)
        self.assertNotIn("id=%s" % ids[1], self.daemon.log())
        deadline = time.monotonic() + 10
        # A hit never reached the daemon: its daemon_rid is that of the request that filled the cache.
        while "rid=%s daemon_rid=%s cache=HIT" % (ids[1], ids[0]) not in self.proxy.log("embedscope.access.log"):
            self.assertLess(time.monotonic(), deadline, self.proxy.log("embedscope.access.log")[-2000:])
            time.sleep(0.02)
        access = self.proxy.log("embedscope.access.log")
        # The miss: the daemon's id, the proxy's own here since 127.0.0.1 is a trusted proxy.
        self.assertRegex(access, r'"GET %s HTTP/1\.1" 200 \d+ rid=%s daemon_rid=%s cache=MISS upstream=127\.0\.0\.1:%d '
                         % (re.escape(path), ids[0], ids[0], self.daemon.port))

    def test_304_through_the_cache(self):
        path = fresh()
        etag = self.get(path).header("ETag")
        r = self.get(path, headers={"If-None-Match": etag})
        self.assertEqual((r.status, r.body, r.header("ETag")), (304, b"", etag))
        self.assertEqual(r.header("X-Cache-Status"), "HIT")
        self.assertEqual(self.daemon_hits(path, 1), 1)

    def test_gzip_through_the_cache(self):
        path = fresh("pca")
        plain = self.get(path)
        self.assertIsNone(plain.header("Content-Encoding"))
        for status in ("MISS", "HIT"):
            r = self.get(path, headers={"Accept-Encoding": "gzip"})
            self.assertEqual(r.header("X-Cache-Status"), status)
            self.assertEqual(r.header("Content-Encoding"), "gzip")
            self.assertIn("Accept-Encoding", r.header("Vary"))
            self.assertEqual(gzip.decompress(r.body), plain.body)
        # Two variants cached, one daemon request each.
        self.assertEqual(self.daemon_hits(path, 2), 2)

    def test_browser_header_spellings_share_one_entry(self):
        """8 combinations of the headers browsers send for one result: one daemon request, and every
        one answered the same gzip body (the key holds gzip, not the Accept-Encoding spelling)."""
        path = fresh()
        replies = [self.get(path, headers=h) for h in BROWSER_HEADERS]
        self.assertEqual(len(BROWSER_HEADERS), 8)
        self.assertEqual([r.header("X-Cache-Status") for r in replies], ["MISS"] + ["HIT"] * 7)
        for r in replies:
            self.assertEqual((r.status, r.header("Content-Encoding")), (200, "gzip"))
            self.assertEqual(r.body, replies[0].body)
            self.assertIsNone(r.header("Access-Control-Allow-Origin"))
        self.assertEqual(self.daemon_hits(path, 1), 1)

    def test_formats_and_codings_are_kept_apart(self):
        """What changes the answer gets its own entry: csv, npy and json by Accept (however
        spelled), gzip or not by Accept-Encoding; each reply is the format it says."""
        path = fresh()
        asks = ((("text/csv", None), "MISS", "text/csv"), (("text/csv; charset=utf-8", None), "HIT", "text/csv"),
                (("application/x-npy", None), "MISS", "application/x-npy"),
                (("application/json", None), "MISS", "application/json"), ((None, None), "HIT", "application/json"),
                (("text/csv", "gzip"), "MISS", "text/csv"), (("text/csv, */*;q=0.1", "gzip, br"), "HIT", "text/csv"))
        for (accept, coding), status, media in asks:
            headers = {k: v for k, v in (("Accept", accept), ("Accept-Encoding", coding)) if v}
            r = self.get(path, headers=headers)
            self.assertEqual((r.status, r.header("X-Cache-Status")), (200, status), headers)
            self.assertTrue(r.header("Content-Type").startswith(media), (headers, r.header("Content-Type")))
            self.assertEqual(r.header("Content-Encoding"), coding and "gzip", headers)
        self.assertEqual(self.daemon_hits(path, 4), 4)
        # Accept naming nothing the daemon produces reaches it as it is: its 406, never cached.
        for _ in range(2):
            problem_of(self, self.get(path, headers={"Accept": "image/png"}), 406)
        self.assertEqual(self.daemon_hits(path, 6), 6)

    def test_writes_need_the_token(self):
        """PUT and DELETE without a bearer token are refused by nginx (401 problem, the daemon never
        sees them); with one they reach the daemon, which checks it."""
        url = "/v1/models/proxywrites/matrices/pe"
        entry = json.dumps({"generator": "sinusoidal", "n_positions": 8, "d_model": 4})
        json_type = {"Content-Type": "application/json"}
        for method, body in (("PUT", entry), ("DELETE", None)):
            r = self.get(url, method=method, body=body, headers=json_type)
            doc = problem_of(self, r, 401)
            self.assertEqual(doc["title"], "Unauthorized")
            self.assertEqual(r.header("WWW-Authenticate"), 'Bearer realm="embedscope uploads"')
            self.assertEqual(r.header("Cache-Control"), "no-store")
        self.assertNotIn("proxywrites", self.daemon.log())
        wrong = self.get(url, method="PUT", body=entry, headers=dict(json_type, Authorization="Bearer nope"))
        problem_of(self, wrong, 401)  # the daemon's, naming the header
        self.assertEqual(logged(self.daemon, "PUT %s 401" % url, 1), 1)
        self.assertEqual(self.get(url, method="PUT", body=entry, headers=dict(json_type, **AUTH)).status, 201)
        self.assertEqual(self.get(url, method="DELETE", headers={"Authorization": "bearer " + TOKEN}).status, 204)

    def test_cors_variants_are_kept_apart(self):
        """A reply cached for an allowed Origin is never given to another: the allowed origins
        (the Origin map, as the daemon's cors_origins) have their own entries; no Origin and any
        other origin share the one without CORS headers, as the daemon answers them alike."""
        path = fresh()
        evil = "http://evil.example"
        for origin, status in ((None, "MISS"), (ORIGIN, "MISS"), (evil, "HIT"), (ORIGIN, "HIT"), (None, "HIT"),
                               (evil, "HIT")):
            r = self.get(path, headers={"Origin": origin} if origin else {})
            self.assertEqual(r.status, 200)
            self.assertEqual(r.header("X-Cache-Status"), status, origin)
            self.assertIn("Origin", r.header("Vary"), origin)
            self.assertEqual(r.header("Access-Control-Allow-Origin"), ORIGIN if origin == ORIGIN else None, origin)

    def test_preflight_through_the_proxy(self):
        r = self.get(WPE + "/pca", method="OPTIONS",
                     headers={"Origin": ORIGIN, "Access-Control-Request-Method": "GET",
                              "Access-Control-Request-Headers": "authorization"})
        self.assertEqual(r.status, 204)
        self.assertEqual(r.header("Access-Control-Allow-Origin"), ORIGIN)
        self.assertIn("Authorization", r.header("Access-Control-Allow-Headers"))

    def test_prefix_deployment(self):
        prefix = Nginx.PREFIX
        for path in ("/v1/models", WPE, "/healthz", "/openapi.yaml"):
            plain, prefixed = self.get(path), self.get(prefix + path)
            self.assertEqual((prefixed.status, prefixed.body), (plain.status, plain.body), path)
        # Results are cached under the prefix too, as one entry for both URLs (the cache key is
        # the daemon's URI: only problem documents, never cached, depend on the prefix).
        path = fresh()
        self.assertEqual(self.get(prefix + path).header("X-Cache-Status"), "MISS")
        self.assertEqual(self.get(prefix + path).header("X-Cache-Status"), "HIT")
        self.assertEqual(self.get(path).header("X-Cache-Status"), "HIT")
        self.assertEqual(self.daemon_hits(path, 1), 1)
        # Problems name the public paths, and their type resolves through the proxy.
        doc = problem_of(self, self.get(prefix + WPE + "/pca?k=abc"), 400)
        self.assertEqual(doc["type"], prefix + "/problems/invalid-parameter")
        self.assertEqual(doc["instance"], prefix + WPE + "/pca")
        r = self.get(doc["type"])
        self.assertEqual(r.status, 200)
        self.assertIn("query parameter", r.body.decode())
        doc = problem_of(self, self.get("/v1/nope"), 404)
        self.assertEqual((doc["type"], doc["instance"]), ("/problems/not-found", "/v1/nope"))
        # A client's own X-Forwarded-Prefix does not pass the proxy.
        doc = problem_of(self, self.get("/v1/nope", headers={"X-Forwarded-Prefix": "/evil"}), 404)
        self.assertEqual(doc["instance"], "/v1/nope")
        r = self.get(prefix)
        self.assertEqual((r.status, r.header("Location")[-len(prefix) - 1:]), (301, prefix + "/"))
        # The OpenAPI servers URL is relative, so it resolves under the prefix.
        spec = yaml.safe_load(self.get(prefix + "/openapi.yaml").body)
        self.assertEqual([s["url"] for s in spec["servers"]], ["."])

    def test_user_matrices_are_revalidated(self):
        """A user matrix can be replaced (PUT) under the same URL: its results say no-cache, so
        nginx never stores them, and the reply after a replacement is the new data's, at once.
        Configured matrices keep the day-long max-age."""
        url = "/v1/models/proxytest/matrices/pe"
        path = url + "/spectrum"
        values = []
        for n in (32, 48):
            entry = {"generator": "sinusoidal", "n_positions": n, "d_model": 16, "base": 10000}
            r = self.get(url, method="PUT", body=json.dumps(entry), headers=dict(AUTH, **{"Content-Type": "application/json"}))
            self.assertIn(r.status, (200, 201), r.body[:300])
            for _ in range(2):
                r = self.get(path)
                self.assertEqual(r.status, 200)
                self.assertEqual(r.header("Cache-Control"), "no-cache")
                self.assertNotEqual(r.header("X-Cache-Status"), "HIT")
            values.append(json.loads(r.body)["input"]["matrix"]["n_rows"])
            # Cross-matrix requests naming it revalidate too.
            r = self.get("/v1/capture?a=gpt2-small/wpe&b=proxytest/pe&k=2")
            self.assertIn(r.status, (200, 422))
            if r.status == 200:
                self.assertEqual(r.header("Cache-Control"), "no-cache")
        self.assertEqual(values, [32, 48])
        self.assertEqual(self.get(fresh()).header("Cache-Control"), "public, max-age=86400")
        self.assertEqual(self.get(url, method="DELETE", headers=AUTH).status, 204)

    def test_problems_are_not_cached(self):
        path = WPE + "/spectrum?bogus=1"
        for _ in range(2):
            r = self.get(path)
            problem_of(self, r, 400)
            self.assertEqual(r.header("Cache-Control"), "no-store")
        self.assertEqual(self.daemon_hits(path, 2), 2)

    def test_413_from_nginx_is_a_problem(self):
        url = urllib.parse.urlsplit(self.base)
        conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
        try:
            conn.putrequest("POST", "/v1/models")
            conn.putheader("Authorization", AUTH["Authorization"])  # else refused before its size is looked at
            conn.putheader("Content-Length", str((4 << 30) + 1))  # above client_max_body_size 4g
            conn.endheaders()
            resp = conn.getresponse()
            r = type("R", (), {})()
            r.status, r.body, r.header = resp.status, resp.read(), resp.headers.get
        finally:
            conn.close()
        doc = problem_of(self, r, 413)
        self.assertEqual(doc["title"], "Payload Too Large")
        self.assertEqual(r.header("Cache-Control"), "no-store")


def raw_exchange(base, data, source="127.0.0.1", timeout=30):
    """Send bytes as they are (malformed requests no client library writes) from a loopback source
    address; (status, {lower-case header: value}, body) of the answer, or None if the connection
    closed without one."""
    url = urllib.parse.urlsplit(base)
    with socket.create_connection((url.hostname, url.port), timeout=timeout, source_address=(source, 0)) as s:
        s.sendall(data)
        reply, headers = b"", None
        while True:  # until the connection closes, or the answer's Content-Length is there (keep-alive)
            if headers is None and b"\r\n\r\n" in reply:
                head, _, body = reply.partition(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                headers = {k.strip().lower(): v.strip() for k, v in (l.split(":", 1) for l in lines[1:] if ":" in l)}
            if headers is not None and len(body) >= int(headers.get("content-length", 1 << 62)):
                break
            chunk = s.recv(65536)
            if not chunk:
                break
            reply += chunk
            if headers is not None:
                body = reply.partition(b"\r\n\r\n")[2]
    if not reply:
        return None
    return int(lines[0].split()[1]), headers, body


@unittest.skipUnless(Nginx.available(), "nginx is not installed")
class Refusals(unittest.TestCase):
    """Every status nginx itself answers through deploy/nginx.conf is a problem+json document (never its HTML
    page), names no nginx version, and carries the request id; /metrics only from its allow-list. (408:
    nginx closes a connection whose head or body is late without answering, so it writes no page.)"""

    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon(CONFIG)
        cls.proxy = Nginx(cls.daemon.base)
        cls.base = cls.proxy.base

    @classmethod
    def tearDownClass(cls):
        cls.proxy.close()
        cls.daemon.close()

    def refused(self, data, status, source="127.0.0.1"):
        got = raw_exchange(self.base, data, source)
        self.assertIsNotNone(got, "no answer to %r" % data[:80])
        code, headers, body = got
        self.assertEqual(code, status, body[:300])
        self.assertEqual(headers.get("content-type"), "application/problem+json", body[:300])
        self.assertEqual(headers.get("server"), "nginx")  # server_tokens off: no version
        doc = json.loads(body)
        self.assertEqual((doc["type"], doc["status"]), ("about:blank", status))
        self.assertTrue(doc["title"] and doc["detail"] and doc["title"] != "Error", doc)
        self.assertEqual(doc["request_id"], headers.get("x-request-id"))
        self.assertEqual(headers.get("cache-control"), "no-store")
        return doc, headers

    def test_every_refusal_of_nginx_is_a_problem(self):
        host = b"Host: x\r\n"
        cases = [
            (b"GARBAGE\r\n\r\n", 400),  # a request line nginx cannot parse
            (b"GET /healthz HTTP/1.1\r\n" + host + b"Bad Name : v\r\n\r\n", 400),  # space before the colon
            (b"GET /healthz HTTP/1.1\r\n" + host + b"X-Big: " + b"a" * 9000 + b"\r\n\r\n", 400),  # 494: a field > 8k
            (b"GET /healthz HTTP/1.1\r\n\r\n", 400),  # HTTP/1.1 without Host
            (b"PUT /v1/models/m/matrices/x HTTP/1.1\r\n" + host + b"\r\n", 401),  # a write without the token
            (b"GET /.embedscope-problem HTTP/1.1\r\n" + host + b"\r\n", 404),  # the error page itself is internal
            (b"TRACE / HTTP/1.1\r\n" + host + b"\r\n", 405),
            (b"PUT /v1/models/m/matrices/x HTTP/1.1\r\n" + host + b"Authorization: Bearer t\r\n"
             b"Content-Length: %d\r\n\r\n" % ((4 << 30) + 1), 413),
            (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\n" + host + b"\r\n", 414),
            (b"PUT /v1/models/m/matrices/x HTTP/1.1\r\n" + host + b"Authorization: Bearer t\r\n"
             b"Transfer-Encoding: gzip\r\n\r\n", 501),
            (b"GET /healthz HTTP/2.0\r\n" + host + b"\r\n", 505),
        ]
        for data, status in cases:
            with self.subTest(request=data[:60], status=status):
                doc, headers = self.refused(data, status)
                if status == 401:
                    self.assertEqual(headers.get("www-authenticate"), 'Bearer realm="embedscope uploads"')

    def test_no_version_in_any_answer(self):
        for path in ("/healthz", "/v1/models", "/nope", WPE + "/spectrum?bogus=1"):
            r = request(path, base=self.base)
            self.assertEqual(r.header("Server"), "nginx", path)

    def test_metrics_only_from_the_allow_list(self):
        self.daemon.wait_ready()
        for path in ("/metrics", "/embedscope/metrics"):
            allowed = raw_exchange(self.base, b"GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                                   % path.encode())
            self.assertEqual(allowed[0], 200, allowed[2][:300])
            self.assertIn(b"embedscope_ready 1", allowed[2])
            # 127.0.0.2 is a loopback address too, but not on the list (127.0.0.1, ::1)
            doc, _ = self.refused(b"GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % path.encode(),
                                  403, source="127.0.0.2")
            self.assertEqual(doc["title"], "Forbidden")
        self.assertEqual(raw_exchange(self.base, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                                      source="127.0.0.2")[0], 200)  # the rest is public

    def test_every_status_of_the_error_page_has_its_title(self):
        """The statuses sent to the problem page each have a title of their own (494-497 are answered 400)."""
        with open(self.proxy.dir + "/embedscope.conf") as f:
            conf = f.read()
        codes = {int(c) for line in re.findall(r"(?m)^\s*error_page ((?:\d+\s+)+)", conf) for c in line.split()}
        titles = re.search(r"map \$status \$embedscope_problem_title \{(.*?)\}", conf, re.S).group(1)
        titled = {int(c) for c in re.findall(r"(?m)^\s*(\d{3})\s", titles)}
        self.assertTrue({400, 401, 403, 404, 405, 413, 414, 500, 501, 502, 503, 504, 505} <= codes, codes)
        self.assertEqual(codes - titled, {494, 495, 496, 497})


@unittest.skipUnless(Nginx.available(), "nginx is not installed")
class Replicas(unittest.TestCase):
    """Two daemons behind one proxy (docs/operations.md, "Scale"): nginx balances the requests
    between them, and when one stops the other answers everything."""

    def test_balanced_and_failing_over(self):
        # replicas share their cache_dir, as on the shared volume of deploy/k8s: a request that becomes a job
        # on one replica is polled through nginx on either (its record and reply are files there)
        shared = tempfile.TemporaryDirectory(prefix="embedscope-replicas-")
        config = dict(CONFIG, server=dict(CONFIG["server"], cache_dir=shared.name))
        daemons = [Daemon(config), Daemon(config)]
        try:
            for d in daemons:
                d.wait_ready()
            with Nginx([d.base for d in daemons]) as proxy:
                # synchronous answers (load-proof): a request that became a job would reach a daemon twice
                sync = {"Prefer": "wait=120"}
                paths = [fresh() for _ in range(6)]
                for path in paths:
                    r = request(path, base=proxy.base, headers=sync)
                    self.assertEqual(r.status, 200, r.body[:300])
                deadline = time.monotonic() + 10  # the last access lines may still be on their way
                while True:
                    served = [sum(d.log().count(" %s " % p) for p in paths) for d in daemons]
                    if sum(served) >= len(paths) or time.monotonic() > deadline:
                        break
                    time.sleep(0.02)
                self.assertEqual(sum(served), len(paths))
                self.assertTrue(all(served), "one replica got nothing: %s" % served)
                daemons[0].close()
                for path in [fresh() for _ in range(4)]:
                    r = request(path, base=proxy.base, headers=sync)
                    self.assertEqual((r.status, r.header("X-Cache-Status")), (200, "MISS"))
                    self.assertEqual(logged(daemons[1], " %s " % path, 1), 1)
                for path in paths:  # cached before: still answered, whoever computed them
                    self.assertEqual(request(path, base=proxy.base).header("X-Cache-Status"), "HIT")
        finally:
            for d in daemons:
                if d.proc.poll() is None:
                    d.close()
            shared.cleanup()


@unittest.skipUnless(Nginx.available(), "nginx is not installed")
class DaemonDown(unittest.TestCase):
    def test_502_is_a_problem(self):
        # A port held bound but never listening refuses every connection, and no other process
        # (another test's daemon on a busy machine) can take it over, as it could a closed daemon's.
        refusing = socket.socket()
        refusing.bind(("127.0.0.1", 0))
        upstream = "127.0.0.1:%d" % refusing.getsockname()[1]
        with refusing, Nginx(upstream) as proxy:
            for path in ("/v1/models", "/embedscope/v1/models", fresh()):
                r = request(path, base=proxy.base)
                doc = problem_of(self, r, 502)
                self.assertEqual(doc["title"], "Bad Gateway")
                self.assertEqual(r.header("Cache-Control"), "no-store")
                self.assertRegex(r.header("X-Request-Id"), r"^[0-9a-f]{32}$")
            self.assertRegex(proxy.log(), re.compile(r"connect\(\) failed .*Connection refused"))

    def test_504_is_a_problem(self):
        """An upstream that accepts and never answers: nginx's read timeout (1 s in this copy of
        the config) gives a problem+json 504."""
        with Silent() as silent, Nginx(silent.address, read_timeout="1s") as proxy:
            with open(proxy.dir + "/embedscope.conf") as f:
                self.assertIn("proxy_read_timeout 1s;", f.read())
            r = request(fresh(), base=proxy.base, timeout=30)
            doc = problem_of(self, r, 504)
            self.assertEqual(doc["title"], "Gateway Timeout")
            self.assertEqual(r.header("Cache-Control"), "no-store")
            self.assertIn("upstream timed out", proxy.log())


class Silent:
    """An upstream that accepts connections, reads the requests and never answers; .requests
    holds the request line of each one received."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.1)
        self.address = "127.0.0.1:%d" % self.sock.getsockname()[1]
        self.requests, self.held = [], []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve)
        self.thread.start()

    def _serve(self):
        while not self.stop.is_set():
            try:
                conn = self.sock.accept()[0]
            except OSError:
                continue
            self.held.append(conn)
            conn.settimeout(5)
            try:
                head = conn.recv(65536)
            except OSError:
                head = b""
            if head:
                self.requests.append(head.split(b"\r\n", 1)[0].decode("latin-1"))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
        for c in self.held:
            c.close()
        self.sock.close()


@unittest.skipUnless(Nginx.available(), "nginx is not installed")
class Retries(unittest.TestCase):
    """Two replicas that never answer in time (read timeout 1 s): a computing request is not sent
    to the second one after the first timed out (both would compute it, the client would wait
    twice); a request that never computes (/healthz) is. The write allow-list lets a listed
    address write without a token."""

    def requests_seen(self, replicas, want, timeout=10):
        deadline = time.monotonic() + timeout
        while sum(len(r.requests) for r in replicas) < want and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.3)  # a retry would come at once; give it the time to arrive
        return [line for r in replicas for line in r.requests]

    def test_a_slow_computation_is_not_retried(self):
        with Silent() as a, Silent() as b, Nginx([a.address, b.address], read_timeout="1s") as proxy:
            path = fresh()
            problem_of(self, request(path, base=proxy.base, timeout=30), 504)
            self.assertEqual(self.requests_seen((a, b), 1), ["GET %s HTTP/1.1" % path])
            self.assertEqual(proxy.log().count("upstream timed out"), 1)
            # Neither replica is set aside for it (max_fails=0): the next request reaches the other.
            other = fresh()
            problem_of(self, request(other, base=proxy.base, timeout=30), 504)
            self.assertEqual(sorted(self.requests_seen((a, b), 2)), sorted("GET %s HTTP/1.1" % p for p in (path, other)))
            self.assertEqual((len(a.requests), len(b.requests)), (1, 1))
            problem_of(self, request("/healthz", base=proxy.base, timeout=30), 504)
            self.requests_seen((a, b), 4)
            self.assertEqual([r.requests.count("GET /healthz HTTP/1.1") for r in (a, b)], [1, 1])  # retried

    def test_an_allow_listed_address_writes_without_a_token(self):
        with Silent() as a, Nginx(a.address, write_allow=["127.0.0.1/32"], read_timeout="1s") as proxy:
            url = "/v1/models/mine/matrices/pe"
            r = request(url, method="PUT", body=b"{}", base=proxy.base, headers={"Content-Type": "application/json"})
            self.assertEqual(r.status, 504)  # passed the proxy: the silent daemon timed out
            self.assertEqual(self.requests_seen((a,), 1), ["PUT %s HTTP/1.1" % url])


if __name__ == "__main__":
    unittest.main()
