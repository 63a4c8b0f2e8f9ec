"""The docs checked against the code (issue 32): what docs/*.md name as the daemon's JSON log fields, its
configuration defaults and its limits is read from the daemon itself (a running instance, --dump-config)
and compared, so a field, default or limit changed in the code only fails here.

- log fields: every bare backticked name in a docs paragraph about `--log-format json` is a key (or a
  value) of a line the daemon wrote with --log-format json, and each paragraph names every key of an
  access line;
- configuration defaults: each `key | type | default` row of docs/configuration.md's server, limits and
  uploads tables whose default is one JSON literal in backticks equals what --dump-config prints for a
  configuration that sets nothing;
- limits: "a request line of N bytes or more" (docs/api.md, docs/operations.md): N - 1 bytes are taken,
  N refused with 414; the body size the docs give the proxy is deploy/nginx.conf's client_max_body_size."""
import glob
import json
import os
import re
import socket
import subprocess
import tempfile
import unittest

from httpkit import BIN, ROOT, Daemon, request

DOCS = sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))) + [os.path.join(ROOT, "README.md")]
SMALL_MODEL = {"m": {"matrices": {"pe": {"generator": "sinusoidal", "n_positions": 16, "d_model": 8}}}}
LEVELS = {"debug", "info", "warn", "error"}


def paragraphs(path):
    """Paragraphs and list items."""
    with open(path) as f:
        return re.split(r"\n\s*\n|\n(?=- )", f.read())


def dump_config(config):
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        json.dump(config, f)
        f.flush()
        out = subprocess.run([BIN, "--config", f.name, "--dump-config", "--log-level", "error"], capture_output=True,
                             text=True, timeout=120, env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


class LogFields(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        config = {"server": {"trusted_proxies": ["127.0.0.1"]}, "models": SMALL_MODEL,
                  "warm": [{"matrix": "m/pe", "center": "columns"}]}
        d = Daemon(config, args=("--log-format", "json"))
        try:
            d.wait_ready()
            # through a trusted proxy: the access line has every field, "peer" included
            request("/healthz", base=d.base, headers={"X-Forwarded-For": "192.0.2.7"})
            request("/v1/models/m/matrices/pe/pca?k=0", base=d.base)
        finally:
            log = d.close()
        cls.lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
        cls.keys = {k for line in cls.lines for k in line}
        cls.values = {v for line in cls.lines for v in line.values() if isinstance(v, str)}
        cls.access = [line for line in cls.lines if line.get("log") == "access"]
        cls.paragraphs = [(os.path.relpath(path, ROOT), p) for path in DOCS for p in paragraphs(path)
                          if "--log-format json" in p]

    def test_the_docs_describe_the_json_log(self):
        self.assertGreaterEqual(len(self.paragraphs), 2, [p for _, p in self.paragraphs])
        self.assertTrue(any("peer" in a for a in self.access), self.access)

    def test_every_documented_field_is_written(self):
        for where, text in self.paragraphs:
            named = set(re.findall(r"`([a-z_]+)`", text))
            unknown = sorted(named - self.keys - self.values - LEVELS)
            self.assertEqual(unknown, [], "%s names log fields the daemon does not write: %s\n%s"
                             % (where, unknown, text))

    def test_every_field_of_an_access_line_is_documented(self):
        fields = {k for a in self.access for k in a}
        for where, text in self.paragraphs:
            if "access" not in text:
                continue
            named = set(re.findall(r"`([a-z_]+)`", text)) | set(re.findall(r'"([a-z_]+)":', text))
            self.assertEqual(sorted(fields - named), [], "%s leaves out fields of an access line:\n%s"
                             % (where, text))


class ConfigurationDefaults(unittest.TestCase):
    # docs key -> (section member, how the stored value reads in the docs' terms)
    SPECIAL = {("server", "listen"): lambda s: "%s:%d" % (s["host"], s["port"]),
               ("server", "cache_mb"): lambda s: s["cache_bytes"] >> 20,
               ("server", "blas_threads"): lambda s: "auto" if s["blas_threads"] == 0 else s["blas_threads"],
               ("server", "cache_dir"): lambda s: s["cache_dir"] or ""}

    @classmethod
    def setUpClass(cls):
        cls.settings = dump_config({"models": SMALL_MODEL})
        with open(os.path.join(ROOT, "docs", "configuration.md")) as f:
            text = f.read()
        cls.rows = []  # (section, key, default text)
        for section in ("server", "limits", "uploads"):
            block = re.search(r"(?ms)^### `%s`\n(.*?)(?=^### |\Z)" % section, text).group(1)
            for key, default in re.findall(r"(?m)^\| `([a-z_]+)` \| [^|]+ \| ([^|]+) \|", block):
                cls.rows.append((section, key, default.strip()))

    def test_documented_defaults_are_the_daemons(self):
        checked = 0
        for section, key, default in self.rows:
            literal = re.fullmatch(r"`([^`]+)`(?: \(.*\))?", default)
            if not literal:
                continue  # prose ("2, or the cores ...", "loopback", "all defaults")
            try:
                documented = json.loads(literal.group(1))
            except ValueError:
                continue  # `$TMPDIR` and such
            stored = self.settings[section]
            if (section, key) in self.SPECIAL:
                actual = self.SPECIAL[section, key](stored)
            elif key in stored:
                actual = stored[key]
            else:
                continue  # accepted and ignored (max_request_cost)
            with self.subTest(key="%s.%s" % (section, key)):
                self.assertEqual(actual, documented, "docs/configuration.md: %s.%s defaults to %s, the daemon to %r"
                                 % (section, key, default, actual))
            checked += 1
        self.assertGreaterEqual(checked, 25, self.rows)

    def test_every_setting_is_documented(self):
        documented = {(s, k) for s, k, _ in self.rows}
        aliases = {("server", "host"): "listen", ("server", "port"): "listen", ("server", "cache_bytes"): "cache_mb"}
        for section, members in self.settings.items():
            for member in members:
                key = aliases.get((section, member), member)
                self.assertIn((section, key), documented, "docs/configuration.md has no row for %s.%s" % (section, key))


class Limits(unittest.TestCase):
    def test_request_line_limit(self):
        stated = set()
        for path in DOCS:
            with open(path) as f:
                stated |= {int(n.replace(",", "")) for n in re.findall(r"request line of ([\d,]+) bytes or more", f.read())}
        self.assertEqual(len(stated), 1, "the docs state the request-line limit as %s" % stated)
        limit = stated.pop()
        d = Daemon({"models": SMALL_MODEL})
        try:
            for n, refused in ((limit - 1, False), (limit, True)):
                line = "GET /healthz?" + "a" * (n - len("GET /healthz? HTTP/1.1")) + " HTTP/1.1"
                self.assertEqual(len(line), n)
                with socket.create_connection(("127.0.0.1", d.port), timeout=30) as s:
                    s.sendall((line + "\r\nHost: x\r\nConnection: close\r\n\r\n").encode())
                    status = int(s.recv(64).split()[1])
                self.assertEqual(status == 414, refused, "a request line of %d bytes: %d" % (n, status))
        finally:
            d.close()

    def test_proxy_body_limit(self):
        with open(os.path.join(ROOT, "deploy", "nginx.conf")) as f:
            size = re.search(r"(?m)^\s*client_max_body_size (\d+)g;", f.read()).group(1)
        stated = set()
        for path in DOCS:
            with open(path) as f:
                text = f.read()
            stated |= set(re.findall(r"streams bodies up to (\d+) GiB", text))
            stated |= set(re.findall(r"client_max_body_size (\d+)g", text))
        self.assertEqual(stated, {size}, "the docs give the proxy's body limit as %s GiB, deploy/nginx.conf as %s"
                         % (stated, size))


if __name__ == "__main__":
    unittest.main()
