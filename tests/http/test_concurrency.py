"""Concurrency and HTTP caching semantics.

- Single flight: the same UNCACHED request from 16 concurrent clients computes
  its decomposition exactly once (embedscope_svd_computations_total + 1) and
  its reply once (embedscope_response_cache_misses_total + 1; the other 15 take
  it from the response cache), and all 16 bodies are identical; on the shared
  daemon (2 HTTP threads) and on a second daemon with 16 HTTP threads.
- Nothing blocks the HTTP threads: on a daemon computing ~1 s decompositions
  on its single compute thread, /healthz, /metrics and cached replies answer
  within 0.5 s, a full job queue is a 503 with Retry-After, and clients that
  disconnect mid-computation neither crash nor leak anything (the finished
  reply is cached; a queued job whose client left is dropped unrun).
- The response cache serves a repeated attention ranking without a compute job.
- ETag / If-None-Match (weak comparison, lists, *), 304 without computing.
- gzip negotiation with Vary: Accept-Encoding.
- CORS: any origin by default, preflight headers, and a configured allow-list.
- Keep-alive: several requests on one connection."""
import gzip
import http.client
import json
import os
import random
import re
import socket
import struct
import threading
import time
import unittest
import urllib.parse

from httpkit import BASE, DATA, HANG_S, ROOT, WPE, Daemon, get_json, metrics, read_until_closed, request

CLIENTS = 16
# Rows excluded by uncached_path(), each used once (random: a re-run against the same daemon still misses).
FRESH_EXCLUDES = iter(random.sample(range(3, 1000), 997))
SINGLE_FLIGHT_COUNTERS = ("embedscope_svd_computations_total", "embedscope_svd_cache_misses_total",
                          "embedscope_svd_cache_hits_total", "embedscope_svd_cache_waits_total",
                          "embedscope_response_cache_misses_total", "embedscope_response_cache_hits_total",
                          "embedscope_response_cache_waits_total")


def uncached_path():
    """A selection nobody warms or asked for before: rows 3:1000 minus a row not used before."""
    return WPE + "/pca?rows=3:1000:1&k=2&exclude=%d" % next(FRESH_EXCLUDES)


def concurrent_gets(path, base, stagger=0.0, clients=CLIENTS):
    """The replies of `clients` concurrent GETs of path, released together by a barrier, client i
    after i * stagger seconds."""
    barrier = threading.Barrier(clients)
    replies = [None] * clients

    def client(i):
        barrier.wait()
        time.sleep(i * stagger)
        replies[i] = request(path, base=base)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return replies


def assert_single_flight(self, base, stagger=0.0):
    """16 concurrent clients of an uncached request, one computation, identical bodies
    (self: the TestCase); returns the change of each cache counter."""
    path = uncached_path()
    before = metrics(base)
    replies = concurrent_gets(path, base, stagger)
    after = metrics(base)
    delta = {name: after[name] - before[name] for name in SINGLE_FLIGHT_COUNTERS}
    self.assertEqual([r.status for r in replies], [200] * CLIENTS)
    self.assertEqual(len({r.body for r in replies}), 1, "the 16 bodies differ")
    self.assertEqual(len({r.header("ETag") for r in replies}), 1)
    self.assertEqual(delta["embedscope_svd_computations_total"], 1, delta)
    self.assertEqual(delta["embedscope_svd_cache_misses_total"], 1, delta)
    # One request computed the reply; the other 15 took it from the response cache (after waiting for
    # it when a compute thread picked them up while it ran), so none asked for the decomposition.
    self.assertEqual(delta["embedscope_response_cache_misses_total"], 1, delta)
    self.assertEqual(delta["embedscope_response_cache_hits_total"], CLIENTS - 1, delta)
    self.assertEqual(delta["embedscope_svd_cache_hits_total"] + delta["embedscope_svd_cache_waits_total"], 0, delta)
    doc = replies[0].json()
    self.assertEqual(doc["input"]["matrix"]["n_rows"], 996)
    self.assertEqual(len(doc["rows"]), 996)
    return delta


class SingleFlight(unittest.TestCase):
    def test_shared_daemon_computes_once(self):
        assert_single_flight(self, BASE)


class SixteenThreads(unittest.TestCase):
    """A second daemon with 16 HTTP threads and a CORS allow-list, serving GPT-2's W_pos under the
    same id as the embedded default (so entity tags agree between the two daemons)."""

    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon({"server": {"threads": 16, "cors_origins": ["http://dash.example"]},
                             "models": {"gpt2-small": {"matrices": {"wpe": {"file": "gpt2-small/wpe.npy"}}}}},
                            args=("--threads", "16"))
        cls.base = cls.daemon.base

    @classmethod
    def tearDownClass(cls):
        cls.daemon.close()

    def test_overlapping_requests_wait_for_one_computation(self):
        """Clients 5 ms apart, all within the ~0.3 s computation: with two or more compute threads the
        second job reaches a compute thread while the first computes, and waits for its reply."""
        delta = assert_single_flight(self, self.base, stagger=0.005)
        if metrics(self.base)["embedscope_compute_threads"] >= 2:
            self.assertGreaterEqual(delta["embedscope_response_cache_waits_total"], 1, delta)

    def test_if_none_match_answers_304_without_computing(self):
        path = uncached_path()
        etag = request(path).header("ETag")  # computed by the shared daemon
        before = metrics(self.base)
        r = request(path, base=self.base, headers={"If-None-Match": etag})
        self.assertEqual((r.status, r.body, r.header("ETag")), (304, b"", etag))
        after = metrics(self.base)
        self.assertEqual(after["embedscope_svd_computations_total"], before["embedscope_svd_computations_total"])
        self.assertEqual(after["embedscope_svd_cache_misses_total"], before["embedscope_svd_cache_misses_total"])

    def test_cors_allow_list(self):
        r = request("/v1/models", base=self.base, headers={"Origin": "http://dash.example"})
        self.assertEqual(r.header("Access-Control-Allow-Origin"), "http://dash.example")
        self.assertIn("ETag", r.header("Access-Control-Expose-Headers"))
        self.assertIn("Origin", r.header("Vary"))
        r = request("/v1/models", base=self.base, headers={"Origin": "http://evil.example"})
        self.assertEqual(r.status, 200)
        self.assertIsNone(r.header("Access-Control-Allow-Origin"))
        r = request(WPE + "/pca", method="OPTIONS", base=self.base,
                    headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "GET"})
        self.assertIsNone(r.header("Access-Control-Allow-Origin"))
        self.assertIsNone(r.header("Access-Control-Allow-Methods"))


# 4096 x 768 seeded Gaussian: each decomposition takes about a second.
GAUSSIAN = {"b": {"matrices": {"g": {"generator": "gaussian", "rows": 4096, "cols": 768, "seed": 1}}}}
# Answers that must not wait for a computation (seconds).
PROMPT = 0.5


def timed(path, base, **kw):
    """(Reply, seconds) of one request."""
    t0 = time.monotonic()
    r = request(path, base=base, **kw)
    return r, time.monotonic() - t0


class HeavyLoad(unittest.TestCase):
    """A daemon with ONE compute thread and room for two waiting jobs, computing ~1 s decompositions of
    distinct selections (rows=i:, each new): its HTTP threads must keep answering at once."""

    @classmethod
    def setUpClass(cls):
        # queue 3: one client may hold 2 of it (a quarter, at least one slot, stays free for others)
        cls.daemon = Daemon({"models": GAUSSIAN}, args=("--compute-threads", "1", "--queue-limit", "3"))
        cls.base = cls.daemon.base
        cls.next_row = iter(range(1, 1000))

    @classmethod
    def tearDownClass(cls):
        cls.daemon.close()  # exit status 0 and no sanitizer report (no leak after the disconnects)

    def heavy_path(self):
        return "/v1/models/b/matrices/g/spectrum?center=none&rows=%d:" % next(self.next_row)

    def wait_metrics(self, done, timeout=HANG_S):
        """The metrics once done(metrics) holds."""
        deadline = time.monotonic() + timeout
        while True:
            m = metrics(self.base)
            if done(m):
                return m
            self.assertLess(time.monotonic(), deadline, "metrics never satisfied the condition: %s" % m)
            time.sleep(0.01)

    def wait_idle(self):
        """No job running or queued and no request in flight but the metrics poll itself."""
        return self.wait_metrics(lambda m: m["embedscope_compute_jobs_running"] == 0 and
                                 m["embedscope_compute_queue_depth"] == 0 and
                                 m["embedscope_http_requests_in_flight"] == 1)

    def test_cheap_requests_answer_while_the_compute_thread_is_busy(self):
        self.wait_idle()
        listing = "/v1/models/b/matrices/g"
        self.assertEqual(request(listing, base=self.base).status, 200)  # now in the response cache
        paths = [self.heavy_path() for _ in range(3)]
        replies = {}

        def client(path):
            replies[path] = request(path, base=self.base)

        threads = [threading.Thread(target=client, args=(p,)) for p in paths]
        for i, t in enumerate(threads):  # one by one: the first must be running, not queued, when the third comes
            t.start()
            before = self.wait_metrics(lambda m: m["embedscope_compute_jobs_running"] == 1 and
                                       m["embedscope_compute_queue_depth"] == i)
        for path in ("/healthz", "/readyz", "/metrics", "/v1/models", listing, "/openapi.yaml", "/healthz"):
            with self.subTest(path):
                r, seconds = timed(path, self.base)
                self.assertEqual(r.status, 200)
                self.assertLess(seconds, PROMPT)
        # The client's share of the queue is used up: a fourth computation is refused at once with Retry-After.
        r, seconds = timed(self.heavy_path(), self.base)
        self.assertLess(seconds, PROMPT)
        self.assertEqual((r.status, r.header("Content-Type"), r.header("Retry-After")),
                         (503, "application/problem+json", "1"))
        doc = r.json()
        self.assertEqual((doc["type"], doc["status"], doc["request_id"]),
                         ("/problems/server-busy", 503, r.header("X-Request-Id")))
        after = metrics(self.base)
        self.assertTrue(any(t.is_alive() for t in threads), "measured after the heavy requests ended")
        for t in threads:
            t.join(120)
        self.assertEqual([replies[p].status for p in paths], [200] * 3)
        self.assertEqual(len(replies[paths[0]].json()["singular_values"]), 768)
        self.assertEqual(after["embedscope_response_cache_hits_total"] - before["embedscope_response_cache_hits_total"],
                         1)  # the listing
        self.assertEqual(after["embedscope_compute_rejected_total"] - before["embedscope_compute_rejected_total"], 1)

    def test_clients_leaving_mid_computation(self):
        """One client leaves (resets its connection) while its job runs, another while its job waits: the running one is
        abandoned at its next safe point (or finishes, if it was past the last one), the waiting one is
        dropped unrun; both are 499 in the access log, nothing stays in flight, a repeat is computed
        afresh, and the daemon answers as before (tearDownClass: clean exit, no leak)."""
        before = self.wait_idle()
        running, queued = self.heavy_path(), self.heavy_path()
        url = urllib.parse.urlsplit(self.base)
        socks = []
        for path, gauge in ((running, "embedscope_compute_jobs_running"), (queued, "embedscope_compute_queue_depth")):
            s = socket.create_connection((url.hostname, url.port), timeout=30)
            # Prefer: wait: synchronous however loaded the machine (a job would outlive its client)
            s.sendall(("GET %s HTTP/1.1\r\nHost: x\r\nPrefer: wait=600\r\n\r\n" % path).encode())
            socks.append(s)
            self.wait_metrics(lambda m: m[gauge] == 1)
        for s in socks:  # a reset: the end of the client's stream alone is no departure (half-close)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()
        after = self.wait_idle()
        self.assertLessEqual(after["embedscope_svd_computations_total"] - before["embedscope_svd_computations_total"], 1)
        for path in (running, queued):
            self.assertRegex(self.daemon.log(), re.escape(path) + r" 499 0 B .*\(connection closed early\)")
        r = request(running, base=self.base)
        self.assertEqual(r.status, 200)
        self.assertEqual(request("/healthz", base=self.base).status, 200)

    def test_half_closed_client_gets_its_computed_answer(self):
        """A client that sends its request and then shuts down its sending side (shutdown(SHUT_WR), as
        some clients and proxies do) still receives the computed answer: the end of its stream means
        no more requests, not gone."""
        self.wait_idle()
        path = self.heavy_path()
        url = urllib.parse.urlsplit(self.base)
        with socket.create_connection((url.hostname, url.port), timeout=HANG_S) as s:
            s.sendall(("GET %s HTTP/1.1\r\nHost: x\r\nPrefer: wait=600\r\n\r\n" % path).encode())
            s.shutdown(socket.SHUT_WR)
            data = read_until_closed(s)
        head, _, body = data.partition(b"\r\n\r\n")
        self.assertTrue(head.startswith(b"HTTP/1.1 200 "), data[:300])
        self.assertEqual(len(json.loads(body)["singular_values"]), 768)
        self.assertRegex(self.daemon.log(), re.escape(path) + r" 200 ")


class ResponseCache(unittest.TestCase):
    def test_repeated_attention_ranking_is_served_without_computing(self):
        """The ranking is no decomposition: the response cache alone saves its recomputation. A repeat,
        even spelled differently (negative range bounds), is answered by the HTTP thread from the cache:
        a hit, no compute job, the same body and ETag, and its gzip from the cache."""
        lo = random.randrange(0, 800)
        path = "/v1/attention/ranking?model=gpt2-small&queries=%d:%d" % (lo, lo + 200)
        m0 = metrics()
        # Answered in this request, never as a job: on a loaded machine (ASan) it could run past
        # limits.sync_seconds, and a job's reply is served from the job (limits.job_ttl_s), not counted
        # as a hit of the response cache.
        first = request(path, headers={"Prefer": "wait=600"}, timeout=600)
        self.assertEqual(first.status, 200, first.body[:300])
        m1 = metrics()
        while m1["embedscope_compute_jobs_running"]:  # the job ends just after its reply went out
            time.sleep(0.01)
            m1 = metrics()
        again = request("/v1/attention/ranking?queries=%d:%d&model=gpt2-small" % (lo - 1024, lo + 200 - 1024))
        zipped = request(path, headers={"Accept-Encoding": "gzip"})
        m2 = metrics()
        delta1 = {k: m1[k] - m0[k] for k in m0 if k.startswith(("embedscope_response", "embedscope_compute_jobs"))}
        delta2 = {k: m2[k] - m1[k] for k in m1 if k.startswith(("embedscope_response", "embedscope_compute_jobs"))}
        self.assertEqual((delta1["embedscope_response_cache_misses_total"], delta1["embedscope_compute_jobs_total"]),
                         (1, 1), delta1)
        self.assertEqual((delta2["embedscope_response_cache_hits_total"], delta2["embedscope_response_cache_misses_total"],
                          delta2["embedscope_compute_jobs_total"]), (2, 0, 0), delta2)
        self.assertEqual((again.status, again.body, again.header("ETag")), (200, first.body, first.header("ETag")))
        self.assertEqual(zipped.header("Content-Encoding"), "gzip")
        self.assertEqual(gzip.decompress(zipped.body), first.body)
        self.assertEqual(len(first.json()["heads"]), 12)
        self.assertGreater(m2["embedscope_response_cache_bytes"], len(first.body))


class EntityTags(unittest.TestCase):
    PATH = WPE + "/pca?k=3&rows=1:"

    @classmethod
    def setUpClass(cls):
        cls.etag = request(cls.PATH).header("ETag")

    def revalidate(self, if_none_match, method="GET", path=None):
        return request(path or self.PATH, method=method, headers={"If-None-Match": if_none_match})

    def test_304_has_no_body_and_the_caching_headers(self):
        r = self.revalidate(self.etag)
        self.assertEqual((r.status, r.body), (304, b""))
        self.assertEqual(r.header("ETag"), self.etag)
        self.assertEqual(r.header("Cache-Control"), "public, max-age=86400")
        self.assertIn("Accept-Encoding", r.header("Vary"))
        self.assertEqual(self.revalidate(self.etag, method="HEAD").status, 304)

    def test_weak_comparison_lists_and_star(self):
        strong = self.etag[2:]
        for header in (strong, '"nope", ' + self.etag, 'W/"nope",%s' % self.etag, "*"):
            with self.subTest(header):
                self.assertEqual(self.revalidate(header).status, 304)
        for header in ('W/"nope"', '"%s"' % self.etag[3:-2], self.etag[:-3] + '"'):
            with self.subTest(header):
                r = self.revalidate(header)
                self.assertEqual(r.status, 200)
                self.assertEqual(len(r.json()["rows"]), 1023)

    def test_etag_depends_on_the_request_and_is_stable(self):
        self.assertEqual(request(self.PATH).header("ETag"), self.etag)
        self.assertEqual(self.revalidate(self.etag, path=WPE + "/pca?k=3&rows=2:").status, 200)
        self.assertEqual(self.revalidate(self.etag, path=WPE + "/vectors?k=3&rows=1:").status, 200)

    def test_listings_revalidate_by_body(self):
        r = request("/v1/models")
        self.assertEqual(r.header("Cache-Control"), "no-cache")
        self.assertEqual(self.revalidate(r.header("ETag"), path="/v1/models").status, 304)
        r = request("/openapi.yaml")
        self.assertEqual(self.revalidate(r.header("ETag"), path="/openapi.yaml").status, 304)

    def test_errors_carry_no_etag(self):
        r = request(WPE + "/pca?k=abc")
        self.assertIsNone(r.header("ETag"))
        self.assertEqual(self.revalidate("*", path=WPE + "/pca?k=abc").status, 400)


class Gzip(unittest.TestCase):
    PATH = WPE + "/spectrum?rows=1:"

    def test_gzip_when_accepted(self):
        plain = request(self.PATH)
        self.assertIsNone(plain.header("Content-Encoding"))
        self.assertIn("Accept-Encoding", plain.header("Vary"))
        for accept in ("gzip", "deflate, gzip;q=0.5", "x-gzip", "*", "br;q=1, *;q=0.1"):
            with self.subTest(accept):
                r = request(self.PATH, headers={"Accept-Encoding": accept})
                self.assertEqual(r.header("Content-Encoding"), "gzip")
                self.assertIn("Accept-Encoding", r.header("Vary"))
                self.assertEqual(int(r.header("Content-Length")), len(r.body))
                self.assertLess(len(r.body), len(plain.body))
                self.assertEqual(gzip.decompress(r.body), plain.body)

    def test_identity_when_refused_or_small(self):
        for accept in ("identity", "br", "gzip;q=0", "*;q=0", "gzip;q=0, *"):
            with self.subTest(accept):
                r = request(self.PATH, headers={"Accept-Encoding": accept})
                self.assertIsNone(r.header("Content-Encoding"))
                self.assertEqual(len(r.json()["singular_values"]), 768)
        r = request("/healthz", headers={"Accept-Encoding": "gzip"})
        self.assertIsNone(r.header("Content-Encoding"))
        self.assertEqual(r.json(), {"status": "ok"})


class Cors(unittest.TestCase):
    def test_any_origin_by_default(self):
        r = request("/v1/models", headers={"Origin": "http://notebook.example:8888"})
        self.assertEqual(r.header("Access-Control-Allow-Origin"), "*")
        self.assertEqual(r.header("Access-Control-Expose-Headers"), "ETag, X-Request-Id, Location")
        # "*" does not depend on Origin: sent without one too, and no Vary: Origin.
        r = request("/v1/models")
        self.assertEqual(r.header("Access-Control-Allow-Origin"), "*")
        self.assertNotIn("Origin", r.header("Vary"))

    def test_preflight(self):
        r = request(WPE + "/pca?k=3", method="OPTIONS",
                    headers={"Origin": "http://dash.example", "Access-Control-Request-Method": "GET",
                             "Access-Control-Request-Headers": "If-None-Match"})
        self.assertEqual((r.status, r.body), (204, b""))
        self.assertEqual(r.header("Access-Control-Allow-Origin"), "*")
        self.assertEqual(r.header("Access-Control-Allow-Methods"), "GET, HEAD, OPTIONS")
        self.assertIn("If-None-Match", r.header("Access-Control-Allow-Headers"))
        self.assertEqual(r.header("Access-Control-Max-Age"), "86400")
        self.assertEqual(r.header("Allow"), "GET, HEAD, OPTIONS")

    def test_options_on_an_unknown_path_is_404(self):
        r = request("/nope", method="OPTIONS", headers={"Origin": "http://x", "Access-Control-Request-Method": "GET"})
        self.assertEqual(r.status, 404)


class KeepAlive(unittest.TestCase):
    def test_several_requests_on_one_connection(self):
        url = urllib.parse.urlsplit(BASE)
        conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
        try:
            for path, status in (("/healthz", 200), (WPE + "/pca?k=abc", 400), (WPE + "/cosine?row=3&rows=0:8", 200),
                                 ("/nope", 404), ("/v1/models", 200)):
                conn.request("GET", path)
                r = conn.getresponse()
                body = r.read()
                self.assertEqual(r.status, status, path)
                self.assertTrue(body)
        finally:
            conn.close()

    def test_mixed_concurrent_load(self):
        """32 requests at once, each answered with its own status. Its own daemon, the embedded default's
        models without the warm list and with no request deadline that a loaded machine could reach
        (request_timeout_s HANG_S): 32 computations on 2 cores at load 30 ran past the default 60 s, and
        a capture (no synchronous window: it never becomes a job) got 504 instead of its answer."""
        with open(os.path.join(ROOT, "config", "embedscope.json")) as f:
            config = json.load(f)
        config = {"data_dir": DATA, "limits": dict(config["limits"], request_timeout_s=HANG_S),
                  "models": {m: config["models"][m] for m in ("gpt2-small", "openai-gpt", "sinusoidal")}}
        daemon = Daemon(config)
        try:
            self.mixed_concurrent_load(daemon.base)
        finally:
            daemon.close()

    def mixed_concurrent_load(self, base):
        paths = [("/healthz", 200), (WPE + "/pca?k=3&rows=1:", 200), (WPE + "/pca?k=abc", 400),
                 ("/v1/models/nope/matrices/wpe", 404), ("/v1/capture?a=openai-gpt/wpe&b=sinusoidal/rope64", 422),
                 (WPE + "/spectrum?rows=1:", 200), ("/v1/capture?a=gpt2-small/wpe&b=gpt2-small/h0.k", 200),
                 (WPE + "/cosine?row=5", 200)] * 4
        barrier = threading.Barrier(len(paths))
        got = [None] * len(paths)

        def client(i):
            barrier.wait()
            got[i] = request(paths[i][0], base=base).status

        threads = [threading.Thread(target=client, args=(i,)) for i in range(len(paths))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        self.assertEqual(got, [status for _, status in paths])
        _, doc = get_json(WPE + "/pca?k=3&rows=1:", base=base)
        self.assertEqual(len(doc["rows"]), 1023)


if __name__ == "__main__":
    unittest.main()
