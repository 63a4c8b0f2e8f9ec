"""Hostile requests (issue 12): every parameter of every documented route with malformed, huge,
non-finite, overflowing, repeated, percent-encoded and traversal values; odd methods, versions and
headers; ambiguous framing; pipelining. Every answer is a problem document with the status its
"status" member says, and the daemon keeps serving (run.sh then requires a clean exit and no
sanitizer report, against the normal and the ASan+UBSan daemon).

The parameters of each route are taken from the daemon itself: an unknown parameter is refused with
the list of the ones the route takes, which comes from the routing table."""
import json
import re
import socket
import time
import unittest
import urllib.parse

from httpkit import BASE, ROOT, raw_exchange, read_until_closed, request

PATH_VALUES = {"{model}": "gpt2-small", "{matrix}": "wpe", "{slug}": "not-found"}
# Raw (already percent-encoded where needed) query values no parameter accepts.
HOSTILE_VALUES = [
    "NaN", "inf", "1e999", "-1e999", "0x10", "1..2", "1,,2", "[1]",
    "..%2F..%2F..%2Fetc%2Fpasswd", "../../../../etc/passwd", "%FF%FE", "%00", "5%00", "%25%32%65",
    "9" * 5000,
]
CLIENT_ERRORS = (400, 404, 414, 422, 431)
# Integer parameters: values past 2^64 or negative must not wrap.
INTEGERS = {"k", "ka", "kb", "kw", "kr", "bins", "g", "layer", "head", "n_heads", "seed", "average", "row", "blur"}


def documented_paths():
    """The concrete paths of openapi.yaml (placeholders filled), except the dashboard's."""
    with open(ROOT + "/openapi.yaml") as f:
        paths = re.findall(r"^  (/\S*):$", f.read(), re.M)
    out = []
    for p in paths:
        if p == "/" or p.startswith("/assets"):
            continue
        for k, v in PATH_VALUES.items():
            p = p.replace(k, v)
        out.append(p)
    return out


def params_of(path):
    """The parameters the route takes, from its refusal of an unknown one."""
    r = request(path + "?zz_probe=1")
    doc = json.loads(r.body)
    m = re.search(r"takes: ([^)]*)\)", doc.get("detail", ""))
    if not m or m.group(1).strip() == "none":
        return []
    return [p.strip() for p in m.group(1).split(",") if p.strip()]


# The head limits of docs/operations.md ("Strict framing"): what the framing check admits, and so what
# libmicrohttpd's per-connection memory must always hold.
REQUEST_LINE_MAX, FIELD_SECTION_MAX, FIELD_LINES_MAX, QUERY_PARAMS_MAX = 8192, 8192, 100, 64


def request_line(length, params, path="/healthz"):
    """A request line of `length` bytes (counting its CR) with `params` query parameters."""
    target = path + "?" + "".join("p%d=1&" % i for i in range(params - 1)) + "z="
    target += "a" * (length - len("GET  HTTP/1.1\r") - len(target))
    return ("GET %s HTTP/1.1\r\n" % target).encode()


def field_section(size, lines, cookies=0, sep=b";", close=False):
    """`lines` field lines (Host first, then Connection: close if asked; with cookies, the last one a Cookie of
    that many, separated by `sep`) whose section counts `size` bytes: each line with its CR, the CR of the
    empty line, a Cookie value twice."""
    names = [b"Host: x"] + [b"Connection: close"] * close
    names += [b"X-%d: " % i for i in range(lines - len(names) - bool(cookies))]
    if cookies:
        names.append(b"Cookie: " + sep.join(b"c%d=" % i for i in range(cookies)))
    counted = sum(len(n) + 1 for n in names) + 1 + (len(names[-1]) - len(b"Cookie:") if cookies else 0)
    pad = size - counted
    names[-1] += b"v" * (pad // 2 if cookies else pad)
    return b"".join(n + b"\r\n" for n in names) + b"\r\n"


def replies(data):
    """Split raw bytes into (status, headers, body) replies framed by Content-Length."""
    out = []
    while data:
        head, sep, rest = data.partition(b"\r\n\r\n")
        if not sep:
            break
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
        n = int(headers.get("content-length", "0"))
        out.append((int(lines[0].split()[1]), headers, rest[:n]))
        data = rest[n:]
    return out


class Hostile(unittest.TestCase):
    sent = set()

    def check_problem(self, status, content_type, body, what):
        self.assertIn(status, CLIENT_ERRORS, what)
        self.assertEqual(content_type, "application/problem+json", what)
        doc = json.loads(body)
        self.assertEqual(doc["status"], status, what)
        for field in ("type", "title", "detail", "instance"):
            self.assertIn(field, doc, what)
        if doc["type"].endswith("/invalid-parameter"):
            self.assertIn("param", doc, what)
        return doc

    def hostile(self, target):
        self.sent.add(target)
        r = request(target)
        self.check_problem(r.status, r.header("Content-Type"), r.body, target)

    def test_every_parameter_of_every_route(self):
        paths = documented_paths()
        self.assertGreater(len(paths), 15)
        for path in paths:
            params = params_of(path)
            for p in params:
                with self.subTest(path=path, param=p):
                    for v in HOSTILE_VALUES:
                        self.hostile("%s?%s=%s" % (path, p, v))
                    self.hostile("%s?%s=1&%s=1" % (path, p, p))  # repeated
                    if p in INTEGERS:
                        for v in ("18446744073709551617", "-1", "99999999999999999999999999"):  # overflowing
                            self.hostile("%s?%s=%s" % (path, p, v))
            with self.subTest(path=path):
                self.hostile(path + "?zz_unknown=1")
                self.hostile(path + "?" + "&" * 5000)
                # far beyond the request line's 8 KiB and its 64 parameters (docs/operations.md)
                self.hostile(path + "?" + "&" * 32000)
                self.hostile(path + "?" + "k=1&" * 8000)
                self.hostile(path + "?=1")
        print("  %d distinct hostile requests" % len(self.sent))
        self.assertGreaterEqual(len(self.sent), 200)
        self.assertEqual(request("/healthz").status, 200)

    def test_path_attacks(self):
        for target in ("/v1/models/gpt2-small/matrices/wpe%00.npy", "/v1/models/..%2F..%2Fetc/matrices/passwd",
                       "/v1/models/gpt2-small/matrices/../../../etc/passwd", "/v1/models/%FF/matrices/%FE",
                       "/v1/models/" + "a" * 3000 + "/matrices/b", "/%2e%2e/%2e%2e/etc/passwd", "/v1//models",
                       "/v1/models/gpt2-small/matrices/wpe/pca/", "/healthz?%00=1", "/v1/models/gpt2-small%00"):
            with self.subTest(target=target):
                self.hostile(target)

    def test_odd_methods(self):
        for method in ("PUT", "DELETE", "PATCH", "TRACE", "PROPFIND", "FOO", "get"):
            for path in ("/healthz", "/v1/models", "/nope"):
                with self.subTest(method=method, path=path):
                    data = raw_exchange(("%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % (method, path))
                                        .encode())
                    (status, headers, body), = replies(data)
                    self.assertIn(status, (404, 405))
                    self.assertEqual(headers.get("content-type"), "application/problem+json")
                    self.assertEqual(json.loads(body)["status"], status)
                    if status == 405:
                        self.assertEqual(headers.get("allow"), "GET, HEAD, OPTIONS")

    def test_ambiguous_framing_is_refused_and_never_smuggled(self):
        cases = {
            "two lengths": b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: 40\r\n\r\n"
                           b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n",
            "length and chunked": b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
                                  b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n",
            "two hosts": b"GET /healthz HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n",
            "no host": b"GET /healthz HTTP/1.1\r\n\r\n",
            "NUL in path": b"GET /healthz%00 HTTP/1.1\r\nHost: x\r\n\r\n",
            "NUL in value": b"GET /v1/models/gpt2-small/matrices/wpe/pca?k=5%00 HTTP/1.1\r\nHost: x\r\n\r\n",
            "long target": b"GET /v1/models?x=" + b"a" * 40000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
            "big headers": b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: " + b"a" * 40000 + b"\r\n\r\n",
        }
        for name, data in cases.items():
            with self.subTest(name):
                got = replies(raw_exchange(data))
                self.assertEqual(len(got), 1, "exactly one reply, the rest never read as a request")
                status, headers, body = got[0]
                self.check_problem(status, headers.get("content-type"), body, name)
                self.assertEqual(headers.get("connection"), "close")
        self.assertEqual(request("/healthz").status, 200)

    def test_every_answer_is_ours(self):
        """Heads libmicrohttpd 0.9.75 would answer itself with an HTML page (malformed Content-Length,
        HTTP versions, heads past its memory, chunk syntax, bytes that are not HTTP): the strict framing
        check (src/http/framing.c) refuses them first, so every answer is a problem document
        (docs/operations.md, "Every answer is ours")."""
        get = b"GET /healthz HTTP/1.1\r\nHost: x\r\n"
        chunked = get + b"Transfer-Encoding: chunked\r\n\r\n"
        heads = [b"GET /healthz %s\r\nHost: x\r\n\r\n" % v for v in
                 (b"HTTP/2.0", b"HTTP/1.2", b"HTTP/0.9", b"HTTP/3", b"http/1.1", b"HTTP/1.1.1", b"HTTP/11",
                  b"HTTP/1.x", b"HTTP/", b"FOO/1.1", b"HTTP/1.1 extra")]
        heads += [get + b"Content-Length: " + v + b"\r\n\r\n" for v in
                  (b"-1", b"+0", b"1x", b"0x10", b"", b" ", b"1 1", b"1,1", b"1.0", b"1e3", b"5\t",
                   b"99999999999999999999", b"18446744073709551616", b"5 ", b"0;", b"\xff")]
        heads += [b"GET /healthz\r\n\r\n", b"GET\r\n\r\n", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",
                  b"GET /v1/models?x=" + b"a" * 45000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
                  get + b"X-A: " + b"a" * 140000 + b"\r\n\r\n",
                  get + b"".join(b"X-%d: a\r\n" % i for i in range(2000)) + b"\r\n",
                  get + b"X-A: " + b"a" * 30000 + b"\r\nX-B: " + b"b" * 30000 + b"\r\n\r\n",
                  get + b"Cookie: " + b"a;" * 15000 + b"\r\n\r\n", get + b"Cookie: " + b";" * 400 + b"\r\n\r\n",
                  chunked + b"zz\r\n\r\n", chunked + b"5\r\nhelloXX\r\n0\r\n\r\n", chunked + b"-1\r\n\r\n",
                  chunked + b"5\r\nhello\r\n0\r\nbad trailer\r\n\r\n", chunked + b"1" * 40 + b"\r\n\r\n",
                  get + b"Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", get + b"Host: y\r\n\r\n",
                  b"GET /healthz HTTP/1.1\r\n\r\n", get + b"\x00: x\r\n\r\n", get + b"X-A: \x01\r\n\r\n"]
        not_ours = []
        for data in heads:
            with self.subTest(data[:40]):
                self.sent.add(data)
                got = replies(raw_exchange(data))
                self.assertEqual(len(got), 1, data[:60])
                status, headers, body = got[0]
                if headers.get("content-type") != "application/problem+json":
                    not_ours.append((data[:60], status))
                    continue
                if status in (501, 505):  # a transfer coding or an HTTP version the daemon does not speak
                    self.assertEqual(json.loads(body)["status"], status)
                else:
                    self.check_problem(status, headers.get("content-type"), body, data[:60])
        print("  %d hostile heads, %d answers not application/problem+json" % (len(heads), len(not_ours)))
        self.assertEqual(not_ours, [])
        self.assertEqual(request("/healthz").status, 200)

    def test_largest_admitted_heads_are_answered(self):
        """The limits keep every head the framing check admits inside libmicrohttpd's 32 KiB per-connection
        memory (docs/operations.md): the largest ones, three of them pipelined on one connection, each
        get the daemon's answer (here a 400 naming the unknown parameter), and one byte, line, cookie or
        parameter more is refused with the limit it broke."""
        line = request_line(REQUEST_LINE_MAX, QUERY_PARAMS_MAX)
        largest = {"fields": (FIELD_SECTION_MAX, FIELD_LINES_MAX, 0),
                   "some cookies": (FIELD_SECTION_MAX, FIELD_LINES_MAX - 40, 40),
                   "a long cookie": (FIELD_SECTION_MAX, 3, FIELD_LINES_MAX - 2),
                   "cookies split at commas": (FIELD_SECTION_MAX, 3, FIELD_LINES_MAX - 2, b",")}
        for name, shape in largest.items():
            with self.subTest(name):
                head = line + field_section(*shape)
                got = replies(raw_exchange(head * 2 + line + field_section(*shape, close=True)))
                self.assertEqual([status for status, _, _ in got], [400] * 3, name)
                for status, headers, body in got:
                    self.check_problem(status, headers.get("content-type"), body, name)
                    self.assertIn("unknown query parameter", json.loads(body)["detail"])
        over = {"request line": (request_line(REQUEST_LINE_MAX + 1, 1) + field_section(20, 1), 414,
                                 "the request line is longer than 8192 bytes"),
                "parameters": (request_line(2000, QUERY_PARAMS_MAX + 1) + field_section(20, 1), 400,
                               "the query has more than 64 parameters"),
                "field section": (line + field_section(FIELD_SECTION_MAX + 1, FIELD_LINES_MAX), 431,
                                  "the header fields exceed 8192 bytes"),
                "cookie bytes": (line + field_section(FIELD_SECTION_MAX + 2, 2, 10), 431,
                                 "the header fields exceed 8192 bytes"),
                "field lines": (line + field_section(4000, FIELD_LINES_MAX + 1), 431, "more than 100 header field lines"),
                "cookies": (line + field_section(FIELD_SECTION_MAX, 2, FIELD_LINES_MAX), 431,
                            "more than 100 header field lines"),
                # libmicrohttpd splits a Cookie value at ',' too, so each of these is an entry of its own
                "cookies split at commas": (line + field_section(FIELD_SECTION_MAX, 2, FIELD_LINES_MAX, sep=b","), 431,
                                            "more than 100 header field lines")}
        for name, (head, status, detail) in over.items():
            with self.subTest(name):
                (got, headers, body), = replies(raw_exchange(head))
                self.check_problem(got, headers.get("content-type"), body, name)
                self.assertEqual(got, status, name)
                self.assertIn(detail, json.loads(body)["detail"])
        self.assertEqual(request("/healthz").status, 200)

    def test_what_cannot_be_answered(self):
        """The cases docs/operations.md ("Every answer is ours") lists as unanswerable: a request cut
        short by the end of the client's stream has nothing complete to answer, so the connection is
        closed at once (the daemon does not wait for the rest); a head left incomplete is closed by
        server.header_timeout_s (test_connections.py, Slowloris)."""
        url = urllib.parse.urlsplit(BASE)
        for partial in (b"GET /healthz HTTP/1.1\r\nHost: x\r\n", b"GET /heal",
                        b"PUT /v1/models/u/matrices/x HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n12345"):
            with self.subTest(partial[:20]), socket.create_connection((url.hostname, url.port), timeout=10) as s:
                s.sendall(partial)
                s.shutdown(socket.SHUT_WR)
                t0 = time.monotonic()
                self.assertEqual(read_until_closed(s), b"")
                self.assertLess(time.monotonic() - t0, 5)
        self.assertEqual(request("/healthz").status, 200)

    def test_pipelined_requests_are_answered_in_order(self):
        data = (b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
                b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n"
                b"GET /v1/models/gpt2-small/matrices/wpe/pca?k=NaN HTTP/1.1\r\nHost: x\r\n\r\n"
                b"HEAD /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        got = raw_exchange(data)
        statuses = [status for status, _, _ in replies(got)]
        self.assertEqual(statuses, [200, 404, 400, 200])

    def test_http_1_0_is_served(self):
        (status, headers, body), = replies(raw_exchange(b"GET /healthz HTTP/1.0\r\n\r\n"))
        self.assertEqual(status, 200)


if __name__ == "__main__":
    unittest.main()
