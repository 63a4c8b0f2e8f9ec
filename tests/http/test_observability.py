"""Observability conventions: the JSON log line schema, request ids unique across
processes and adopted only from trusted proxies, the standard process metrics,
duration buckets up to the longest deadline, warm-up 503s of /readyz
kept out of the server-error count, and request counts exact when many HTTP threads answer at once (each
counts on its own shard, summed at the scrape).

Own small daemons; no timing is asserted beyond generous bounds."""
import datetime
import http.client
import json
import re
import threading
import time
import unittest

from httpkit import Daemon, request

SMALL_MODEL = {"m": {"matrices": {"pe": {"generator": "sinusoidal", "n_positions": 16, "d_model": 8}}}}
GAUSSIAN = {"b": {"matrices": {"g": {"generator": "gaussian", "rows": 4096, "cols": 768, "seed": 1}}}}
LEVELS = {"debug", "info", "warn", "error"}
REQUEST_ID = re.compile(r"^[0-9a-f]{12}7[0-9a-f]{3}[89ab][0-9a-f]{15}$")  # UUIDv7 layout, no dashes


def samples(text, name):
    """{labels text: value} of one metric's samples in a Prometheus exposition."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"^%s(\{[^}]*\})? (\S+)$" % re.escape(name), line)
        if m:
            out[m.group(1) or ""] = float(m.group(2))
    return out


class JsonLogLines(unittest.TestCase):
    def test_every_line_has_time_level_msg_and_access_lines_their_fields(self):
        d = Daemon({"models": SMALL_MODEL}, args=("--log-format", "json"))
        try:
            ok = request("/healthz", base=d.base)
            request("/v1/models/m/matrices/pe/pca?k=0", base=d.base)
        finally:
            log = d.close()
        records = [json.loads(line) for line in log.splitlines() if line.strip()]
        self.assertGreater(len(records), 3)
        for r in records:
            self.assertIsInstance(r, dict)
            self.assertEqual(list(r)[:3], ["time", "level", "msg"], r)  # the common keys first
            self.assertIn(r["level"], LEVELS, r)
            self.assertIsInstance(r["msg"], str)
            t = datetime.datetime.strptime(r["time"], "%Y-%m-%dT%H:%M:%S.%fZ")  # RFC 3339, UTC
            self.assertLess(abs((datetime.datetime.utcnow() - t).total_seconds()), 600)
        # An access line is written when its reply has gone out, which the client can see first: the
        # two lines may come in either order.
        access = sorted((r for r in records if r.get("log") == "access"), key=lambda a: a["path"] != "/healthz")
        self.assertEqual([a["path"] for a in access], ["/healthz", "/v1/models/m/matrices/pe/pca"])
        first, second = access
        self.assertEqual((first["level"], first["method"], first["status"], first["client"]),
                         ("info", "GET", 200, "127.0.0.1"))
        self.assertEqual(first["request_id"], ok.header("X-Request-Id"))
        self.assertIn("GET /healthz 200", first["msg"])
        self.assertEqual((second["status"], second["query"]), (400, "k=0"))
        for a in access:
            self.assertIsInstance(a["ms"], float)
            self.assertIsInstance(a["bytes"], int)


    def test_key_value_tokens_of_a_message_are_fields(self):
        d = Daemon({"models": SMALL_MODEL, "warm": [{"matrix": "m/pe", "center": "columns"}]},
                   args=("--log-format", "json"))
        try:
            d.wait_ready()
        finally:
            log = d.close()
        records = [json.loads(line) for line in log.splitlines() if line.strip()]
        warmed = [r for r in records if r["msg"].startswith("warmed ")]
        self.assertEqual(len(warmed), 1, log[-2000:])
        w = warmed[0]
        self.assertIn(" solver=%s " % w["solver"], w["msg"])  # text as it was, a field beside it
        self.assertIsInstance(w["seconds"], float)
        self.assertIsInstance(w["recon_error"], float)
        self.assertLess(w["recon_error"], 1e-12)
        # tokens inside a word (the key's "|axis=columns") are not fields
        self.assertNotIn("axis", w)


class RequestIds(unittest.TestCase):
    def test_fresh_ids_are_time_ordered_128_bit_and_unique_across_processes(self):
        ids = []
        for _ in range(2):  # two processes, as two replicas or a restart
            d = Daemon({"models": SMALL_MODEL})
            try:
                ids += [request("/healthz", base=d.base).header("X-Request-Id") for _ in range(20)]
            finally:
                d.close()
        for i in ids:
            self.assertRegex(i, REQUEST_ID)
        self.assertEqual(len(set(ids)), len(ids))
        self.assertEqual(ids[:20], sorted(ids[:20], key=lambda i: i[:12]))  # milliseconds first
        now_ms = int(time.time() * 1000)
        self.assertLess(abs(int(ids[-1][:12], 16) - now_ms), 600_000)

    def test_x_request_id_is_adopted_from_trusted_proxies_only(self):
        d = Daemon({"models": SMALL_MODEL})
        try:
            r = request("/healthz", base=d.base, headers={"X-Request-Id": "nb-42.run:7"})
            self.assertRegex(r.header("X-Request-Id"), REQUEST_ID)  # an untrusted client's id is not taken
        finally:
            d.close()
        d = Daemon({"server": {"trusted_proxies": ["127.0.0.1"]}, "models": SMALL_MODEL})
        try:
            r = request("/healthz", base=d.base, headers={"X-Request-Id": "nb-42.run:7"})
            self.assertEqual(r.header("X-Request-Id"), "nb-42.run:7")
            r = request("/v1/models/nope", base=d.base, headers={"X-Request-Id": "edge-1"})
            self.assertEqual((r.header("X-Request-Id"), r.json()["request_id"]), ("edge-1", "edge-1"))
            r = request("/healthz", base=d.base, headers={"X-Request-Id": "bad id with spaces"})
            self.assertRegex(r.header("X-Request-Id"), REQUEST_ID)
        finally:
            d.close()


class ProcessMetrics(unittest.TestCase):
    def test_standard_process_metrics(self):
        before = time.time()
        d = Daemon({"models": SMALL_MODEL})
        try:
            text = request("/metrics", base=d.base).body.decode()
        finally:
            d.close()
        start = samples(text, "process_start_time_seconds")[""]
        self.assertLess(abs(start - before), 30)  # clock ticks after boot: 10 ms resolution, boot time to 1 s
        for name in ("process_cpu_seconds_total", "process_resident_memory_bytes", "process_virtual_memory_bytes",
                     "process_open_fds", "process_max_fds"):
            self.assertGreater(samples(text, name)[""], 0, name)
        self.assertIn("# TYPE process_start_time_seconds gauge", text)
        self.assertIn("# TYPE process_cpu_seconds_total counter", text)


class DurationBuckets(unittest.TestCase):
    def bounds(self, config):
        d = Daemon(config)
        try:
            request("/healthz", base=d.base)
            # a request is counted when its reply is complete, which the client can see a moment
            # before the daemon's thread records it (slower under ASan): wait for its sample
            deadline = time.monotonic() + 10
            while True:
                text = request("/metrics", base=d.base).body.decode()
                if 'route="/healthz"' in text or time.monotonic() > deadline:
                    break
                time.sleep(0.02)
        finally:
            d.close()
        les = [re.search(r'le="([^"]+)"', k).group(1)
               for k in samples(text, "embedscope_http_request_duration_seconds_bucket")]
        route = [re.search(r'le="([^"]+)"', k).group(1)
                 for k in samples(text, "embedscope_http_route_request_duration_seconds_bucket")
                 if 'route="/healthz"' in k]
        self.assertEqual(les, route)
        self.assertEqual(les[-1], "+Inf")
        return [float(x) for x in les[:-1]]

    def test_buckets_reach_the_longest_deadline(self):
        default = self.bounds({"models": SMALL_MODEL})
        self.assertEqual(default[-1], 600)  # limits.max_wait_s's default: the longest a Prefer: wait holds a request
        self.assertEqual(default, sorted(default))
        self.assertEqual(self.bounds({"models": SMALL_MODEL,
                                      "limits": {"request_timeout_s": 300, "max_wait_s": 0}})[-1], 300)
        self.assertEqual(self.bounds({"models": SMALL_MODEL, "limits": {"request_timeout_s": 5, "max_wait_s": 5}})[-1],
                         60)


class ExactUnderConcurrency(unittest.TestCase):
    """Replies counted by several HTTP threads at once (per-thread shards summed at the scrape, no shared
    counter) add up exactly: per route, in the duration histogram and in the status classes."""
    CLIENTS, EACH = 8, 40
    PCA = "/v1/models/m/matrices/pe/pca?k=2"

    @staticmethod
    def labelled(text, name):
        """samples() for label values that hold braces (route patterns)."""
        return {m.group(1): float(m.group(2))
                for m in re.finditer(r"^%s\{(.*)\} (\S+)$" % re.escape(name), text, re.M)}

    def client(self, port, errors):
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
            for i in range(self.EACH):
                conn.request("GET", "/healthz" if i % 2 else self.PCA)
                r = conn.getresponse()
                r.read()
                if r.status != 200:
                    errors.append(r.status)
            conn.close()
        except Exception as e:  # reported by the test, not lost in a thread
            errors.append(repr(e))

    def test_counts_are_exact(self):
        d = Daemon({"models": SMALL_MODEL, "server": {"threads": 4}})
        try:
            self.assertEqual(request(self.PCA, base=d.base, headers={"Prefer": "wait=600"}).status, 200)
            errors = []
            threads = [threading.Thread(target=self.client, args=(d.port, errors)) for _ in range(self.CLIENTS)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.assertEqual(errors, [])
            n = self.CLIENTS * self.EACH // 2
            key = 'route="/v1/models/{model}/matrices/{matrix}/pca",method="GET",code="200"'
            # a reply is counted once it has been sent: the last ones may be counted just after the client read
            # them, so the scrape is repeated until they are (never a timing assertion: the bound is a hang's)
            deadline = time.time() + 120
            while True:
                text = request("/metrics", base=d.base).body.decode()
                route = self.labelled(text, "embedscope_http_route_requests_total")
                if route.get(key, 0) >= n + 1 and route.get('route="/healthz",method="GET",code="200"', 0) >= n \
                        or time.time() > deadline:
                    break
                time.sleep(0.05)
        finally:
            d.close()
        self.assertEqual(route[key], n + 1)
        self.assertEqual(route['route="/healthz",method="GET",code="200"'], n)
        inf = self.labelled(text, "embedscope_http_route_request_duration_seconds_bucket")
        self.assertEqual(inf['route="/healthz",method="GET",le="+Inf"'], n)
        self.assertEqual(inf['route="/v1/models/{model}/matrices/{matrix}/pca",method="GET",le="+Inf"'], n + 1)
        # the status classes and the histogram count every reply the per-route series count (the start's
        # /readyz probes and the scrapes before this one included), no more, no less
        ok = sum(v for k, v in route.items() if re.search(r'code="2\d\d"', k))
        every = sum(route.values())
        self.assertEqual(samples(text, "embedscope_http_requests_total")['{code="2xx"}'], ok)
        self.assertEqual(samples(text, "embedscope_http_request_duration_seconds_count")[""], every)


class WarmUp(unittest.TestCase):
    def test_readyz_503s_while_warming_are_not_server_errors(self):
        warm = [{"matrix": "b/g", "center": c} for c in ("none", "columns")]
        d = Daemon({"models": GAUSSIAN, "warm": warm})
        try:
            early = request("/readyz", base=d.base)
            d.wait_ready()
            text = request("/metrics", base=d.base).body.decode()
        finally:
            d.close()
        self.assertEqual(early.status, 503, "the warm-up ended before the first probe; nothing to check")
        route = samples(text, "embedscope_http_route_requests_total")
        self.assertGreaterEqual(route['{route="/readyz",method="GET",code="503"}'], 1)
        self.assertEqual(samples(text, "embedscope_http_requests_total")['{code="5xx"}'], 0)


if __name__ == "__main__":
    unittest.main()
