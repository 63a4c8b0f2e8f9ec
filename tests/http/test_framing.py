"""Strict request framing (RFC 9112, src/http/framing.c): what decides where a request ends is
checked on the raw bytes before libmicrohttpd parses them. Each framing case of CORPUS is either
served or refused with a problem document (400, or 501 for a transfer coding the daemon does not
decode, 505 for another HTTP version) and the connection closed, so that nothing after a refused
head is ever read as a request. The smuggling forms are checked end to end (a smuggled DELETE must
not run), and the same corpus goes through nginx (deploy/nginx.conf), which must take the same
accept/reject decision for every case."""
import json
import socket
import struct
import tempfile
import unittest
import urllib.parse

from httpkit import BASE, DATA, Daemon, raw_exchange, read_until_closed, request
from nginxkit import Nginx

# (name, header lines after "Host", body, expected status or None when the framing is served).
# Every request is a GET of /healthz: a served one with a body gets the daemon's own 413.
CORPUS = [
    ("no body", b"", b"", None),
    ("length", b"Content-Length: 5\r\n", b"hello", None),
    ("length zero", b"Content-Length: 0\r\n", b"", None),
    ("length after blanks", b"Content-Length:   5\r\n", b"hello", None),
    # RFC 9110 lets blanks after a value go, but libmicrohttpd would misread these (framing.c)
    ("length with blanks after", b"Content-Length: 5  \r\n", b"hello", 400),
    ("chunked with blanks after", b"Transfer-Encoding: chunked \r\n", b"5\r\nhello\r\n0\r\n\r\n", 400),
    ("chunked", b"Transfer-Encoding: chunked\r\n", b"5\r\nhello\r\n0\r\n\r\n", None),
    ("chunked capitals", b"Transfer-Encoding: Chunked\r\n", b"5\r\nhello\r\n0\r\n\r\n", None),
    ("chunk extension", b"Transfer-Encoding: chunked\r\n", b"5;a=b\r\nhello\r\n0\r\n\r\n", None),
    ("trailer field", b"Transfer-Encoding: chunked\r\n", b"5\r\nhello\r\n0\r\nX-T: 1\r\n\r\n", None),
    ("space before colon", b"Content-Length : 5\r\n", b"hello", 400),
    ("tab before colon", b"Content-Length\t: 5\r\n", b"hello", 400),
    ("space before colon of another field", b"X-A : 1\r\n", b"", 400),
    ("obs-fold", b"X-A: 1\r\n Content-Length: 5\r\n", b"hello", 400),
    ("obs-fold of the length", b"Content-Length:\r\n 5\r\n", b"hello", 400),
    ("obs-fold with a tab", b"X-A: 1\r\n\tmore\r\n", b"", 400),
    ("empty field name", b": x\r\n", b"", 400),
    ("field line without colon", b"X-A\r\n", b"", 400),
    ("two equal lengths", b"Content-Length: 5\r\nContent-Length: 5\r\n", b"hello", 400),
    ("two different lengths", b"Content-Length: 0\r\nContent-Length: 5\r\n", b"hello", 400),
    ("length list", b"Content-Length: 5, 5\r\n", b"hello", 400),
    ("negative length", b"Content-Length: -1\r\n", b"", 400),
    ("signed length", b"Content-Length: +5\r\n", b"hello", 400),
    ("hex length", b"Content-Length: 0x5\r\n", b"hello", 400),
    ("empty length", b"Content-Length: \r\n", b"", 400),
    ("overflowing length", b"Content-Length: 99999999999999999999999\r\n", b"", 400),
    ("length and chunked", b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", b"0\r\n\r\n", 400),
    ("gzip then chunked", b"Transfer-Encoding: gzip, chunked\r\n", b"0\r\n\r\n", 501),
    ("identity then chunked", b"Transfer-Encoding: identity, chunked\r\n", b"0\r\n\r\n", 501),
    ("gzip alone", b"Transfer-Encoding: gzip\r\n", b"", 400),
    ("chunked then gzip", b"Transfer-Encoding: chunked, gzip\r\n", b"0\r\n\r\n", 400),
    ("chunked twice", b"Transfer-Encoding: chunked, chunked\r\n", b"0\r\n\r\n", 400),
    ("empty coding", b"Transfer-Encoding: , chunked\r\n", b"0\r\n\r\n", 400),
    ("bad chunk size", b"Transfer-Encoding: chunked\r\n", b"zz\r\nhello\r\n0\r\n\r\n", 400),
    ("chunk size overflow", b"Transfer-Encoding: chunked\r\n", b"1" + b"0" * 20 + b"\r\nhello\r\n0\r\n\r\n", 400),
    ("chunk longer than its size", b"Transfer-Encoding: chunked\r\n", b"3\r\nhello\r\n0\r\n\r\n", 400),
    ("bare CR in a value", b"X-A: a\rb\r\n", b"", 400),
    ("NUL in a value", b"X-A: a\x00b\r\n", b"", 400),
]
FOLLOWER = b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"


def message(lines, body, target=b"/healthz"):
    return b"GET " + target + b" HTTP/1.1\r\nHost: x\r\n" + lines + b"\r\n" + body


def first_reply(data):
    """(status, headers, body) of the first reply in raw bytes (framed by Content-Length), and the rest."""
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    n = int(headers.get("content-length", "0"))
    return int(lines[0].split()[1]), headers, rest[:n], rest[n:]


class Framing(unittest.TestCase):
    def test_corpus(self):
        for name, lines, body, want in CORPUS:
            with self.subTest(name):
                got = raw_exchange(message(lines, body) + FOLLOWER)
                status, headers, doc, rest = first_reply(got)
                if want is None:
                    self.assertNotIn(status, (400, 501), got[:400])
                    continue
                self.assertEqual(status, want, got[:400])
                self.assertEqual(headers.get("content-type"), "application/problem+json")
                self.assertEqual(headers.get("connection"), "close")
                problem = json.loads(doc)
                self.assertEqual(problem["status"], want)
                self.assertRegex(problem["detail"], r"byte \d+ of the request")
                self.assertEqual(rest, b"", "nothing after a refused head is read as a request")
        self.assertEqual(request("/healthz").status, 200)

    def test_request_line(self):
        for data, want in ((b"GET /healthz HTTP/2.0\r\nHost: x\r\n\r\n", 505),
                           (b"GET /healthz HTTP/1.2\r\nHost: x\r\n\r\n", 505),
                           (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505),
                           (b"GET /healthz http/1.1\r\nHost: x\r\n\r\n", 400),
                           (b"GET /healthz\r\n\r\n", 400),
                           (b"GET  /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 400),
                           (b"GET /hea lthz HTTP/1.1\r\nHost: x\r\n\r\n", 400),
                           (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400)):
            with self.subTest(data[:24]):
                status, headers, doc, rest = first_reply(raw_exchange(data))
                self.assertEqual(status, want)
                self.assertEqual(headers.get("content-type"), "application/problem+json")
                self.assertEqual(json.loads(doc)["status"], want)

    def test_complete_requests_before_a_refused_one_are_served(self):
        got = raw_exchange(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" + message(b"X-A : 1\r\n", b""))
        status, _, _, rest = first_reply(got)
        self.assertEqual(status, 200)
        status, headers, doc, rest = first_reply(rest)
        self.assertEqual(status, 400)
        self.assertIn("whitespace between a field name and its colon", json.loads(doc)["detail"])
        self.assertEqual(rest, b"")

    def test_a_head_split_across_reads_is_refused(self):
        url = urllib.parse.urlsplit(BASE)
        with socket.create_connection((url.hostname, url.port), timeout=30) as s:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Le")
            s.sendall(b"ngth : 5\r\n\r\nhello")
            got = read_until_closed(s)
        status, headers, doc, rest = first_reply(got)
        self.assertEqual(status, 400)
        self.assertEqual(rest, b"")


def npy_bytes():
    header = "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }"
    text = header + " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text.encode() + struct.pack("<6d", *range(6))


class InTheRequestPath(unittest.TestCase):
    """The check works only because libmicrohttpd reads its sockets with recv(), which the daemon
    defines (src/http/conns.c). At start the daemon sends a request the check refuses through a
    loopback connection handed to libmicrohttpd, and refuses to start unless the check answered it.
    ES_TEST_FRAMING_BYPASS=1 makes recv() check nothing, as a libmicrohttpd that reads otherwise
    would: the daemon must then not start."""

    SMALL = {"models": {"m": {"matrices": {"pe": {"generator": "sinusoidal", "n_positions": 16, "d_model": 8}}}}}

    def test_without_the_check_in_the_path_the_daemon_refuses_to_start(self):
        daemon = Daemon(self.SMALL, wait=False, env={"ES_TEST_FRAMING_BYPASS": "1"})
        try:
            status = daemon.proc.wait(timeout=120)
        finally:
            log = daemon.log()
            daemon.stop()
            daemon.dir.cleanup()
        self.assertEqual(status, 1, log)
        self.assertIn("the strict framing check is not in libmicrohttpd's request path", log)
        self.assertIn("HTTP/1.1 400 Bad Request", log)  # libmicrohttpd's own answer to the probe
        self.assertNotIn("listening on", log)

    def test_with_the_check_in_the_path_the_self_test_passes(self):
        daemon = Daemon(self.SMALL, args=("--log-level", "debug"))
        log = daemon.close()
        self.assertIn("framing self-test: a request with two Content-Length fields was refused", log)
        self.assertNotIn("refused a request from", log)  # the probe is no client's


class Smuggling(unittest.TestCase):
    """A request hidden in the body of one the daemon would misread: the hidden DELETE must never run."""

    VICTIM = "/v1/models/victim/matrices/m"

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="embedscope-framing-")
        config = {"data_dir": DATA, "uploads": {"tmp_dir": cls.tmp.name},
                  "models": {"base": {"matrices": {"pe": {"generator": "sinusoidal", "n_positions": 16,
                                                          "d_model": 4}}}}}
        cls.daemon = Daemon(config)
        cls.daemon.wait_ready()
        r = request(cls.VICTIM, method="PUT", headers={"Content-Type": "application/x-npy"}, body=npy_bytes(),
                    base=cls.daemon.base)
        assert r.status == 201, r.body

    @classmethod
    def tearDownClass(cls):
        cls.daemon.close()
        cls.tmp.cleanup()

    def test_smuggled_delete_never_runs(self):
        hidden = ("DELETE %s HTTP/1.1\r\nHost: x\r\n\r\n" % self.VICTIM).encode()
        n = str(len(hidden)).encode()
        forms = {
            "space before colon": b"Content-Length : " + n + b"\r\n",
            "tab before colon": b"Content-Length\t: " + n + b"\r\n",
            "obs-fold": b"X-A: 1\r\n Content-Length: " + n + b"\r\n",
            "folded value": b"Content-Length:\r\n " + n + b"\r\n",
            "empty field name": b": x\r\nContent-Length: " + n + b"\r\n",
            "gzip, chunked": b"Transfer-Encoding: gzip, chunked\r\n",
            "chunked, gzip": b"Transfer-Encoding: chunked, gzip\r\n",
            "length and chunked": b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
            "two lengths": b"Content-Length: 0\r\nContent-Length: " + n + b"\r\n",
        }
        for name, lines in forms.items():
            with self.subTest(name):
                got = raw_exchange(message(lines, hidden), base=self.daemon.base)
                status, headers, doc, rest = first_reply(got)
                self.assertIn(status, (400, 501), got[:300])
                self.assertEqual(headers.get("content-type"), "application/problem+json")
                self.assertEqual(rest, b"", "the hidden request was answered")
                self.assertEqual(request(self.VICTIM, base=self.daemon.base).status, 200, "the DELETE ran")
        self.assertNotIn("DELETE", "\n".join(ln for ln in self.daemon.log().splitlines() if "access" in ln))


class AnsweredInOrderBeforeARefusal(unittest.TestCase):
    """Complete requests pipelined before a refused one are answered first, in order, then the refusal
    (issue 29 §6): the 400 used to be written as soon as MHD read again, before the answers of requests
    still computing, and the connection closed under them (a pipelined PUT ran, its 201 never came)."""

    BAD = message(b"X-A : 1\r\n", b"")

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="embedscope-framing-")
        config = {"uploads": {"tmp_dir": cls.tmp.name}, "limits": {"sync_seconds": 600},
                  "models": {"b": {"matrices": {"g": {"generator": "gaussian", "rows": 300, "cols": 16,
                                                      "seed": 3}}}}}
        cls.daemon = Daemon(config)
        cls.daemon.wait_ready()

    @classmethod
    def tearDownClass(cls):
        cls.daemon.close()
        cls.tmp.cleanup()

    def answers(self, data):
        got, out = raw_exchange(data, base=self.daemon.base), []
        while got:
            status, headers, body, got = first_reply(got)
            out.append((status, headers, body))
        return out

    def test_two_gets_then_a_refused_request(self):
        spectrum = b"GET /v1/models/b/matrices/g/spectrum?rows=1: HTTP/1.1\r\nHost: x\r\n\r\n"  # computed
        got = self.answers(spectrum + b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" + self.BAD)
        self.assertEqual([status for status, _, _ in got], [200, 200, 400])
        self.assertEqual(json.loads(got[0][2])["rank"], 16)
        self.assertEqual(json.loads(got[1][2])["status"], "ok")
        self.assertIn("whitespace between a field name and its colon", json.loads(got[2][2])["detail"])

    def test_a_put_then_a_refused_request(self):
        body = npy_bytes()
        put = (b"PUT /v1/models/u/matrices/m HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-npy\r\n"
               b"Content-Length: %d\r\n\r\n" % len(body)) + body
        got = self.answers(put + self.BAD)
        self.assertEqual([status for status, _, _ in got], [201, 400])
        self.assertEqual(json.loads(got[0][2])["shape"], [2, 3])
        self.assertEqual(request("/v1/models/u/matrices/m", base=self.daemon.base).status, 200)


# Where the daemon alone is stricter than nginx: nginx repairs these before it forwards them (it
# trims the blanks after a value, drops a field line it cannot parse), libmicrohttpd would misread
# them (framing.c), so the daemon refuses them. Both readings give the same framing: never a smuggle.
STRICTER_THAN_NGINX = {"length with blanks after", "chunked with blanks after", "field line without colon"}


@unittest.skipUnless(Nginx.available(), "nginx is not installed")
def nginx_own_page(reply):
    """A refusal nginx made itself: deploy/nginx.conf answers those with its own problem document (type
    about:blank), where a refusal the daemon made and nginx passed on has the daemon's /problems/ type."""
    if "application/problem+json" not in reply[1].get("content-type", ""):
        return False
    try:
        return json.loads(reply[2])["type"] == "about:blank"
    except ValueError:
        return False


class SameDecisionAsNginx(unittest.TestCase):
    """deploy/nginx.conf in front: nginx refuses a framing case (its own error page) exactly when the
    daemon alone refuses it (a problem document), but for STRICTER_THAN_NGINX, so that the daemon
    without the proxy is no easier to smuggle through than with it."""

    def test_corpus_through_nginx(self):
        decisions = []
        with Nginx(BASE) as proxy:
            for name, lines, body, want in CORPUS:
                direct = first_reply(raw_exchange(message(lines, body) + FOLLOWER))
                fronted = first_reply(raw_exchange(message(lines, body) + FOLLOWER, base=proxy.base))
                daemon_refused = direct[0] in (400, 501) and direct[1].get("content-type") == "application/problem+json" \
                    and json.loads(direct[2])["type"].endswith(("/bad-request", "/not-implemented"))
                nginx_refused = fronted[0] in (400, 411, 501) and nginx_own_page(fronted)
                decisions.append((name, daemon_refused, nginx_refused, direct[0], fronted[0]))
        differ = {d[0]: d for d in decisions if d[1] != d[2]}
        print("  framing corpus: %d cases, nginx and the daemon decide alike on %d (%d where the daemon is "
              "stricter)" % (len(decisions), len(decisions) - len(differ), len(differ)))
        self.assertEqual(set(differ), STRICTER_THAN_NGINX, list(differ.values()))
        for name in STRICTER_THAN_NGINX:  # refused by the daemon, repaired and served through nginx
            self.assertEqual(differ[name][1:3], (True, False))
            self.assertIn(differ[name][4], (200, 413))


if __name__ == "__main__":
    unittest.main()
