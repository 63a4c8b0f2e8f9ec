"""Every curl example and every Python snippet of the documentation (README.md,
docs/*.md, bench/README.md) runs against the daemon and succeeds.

curl examples: each line starting with `curl ` (a `$ ` prompt may precede it;
a line ending in a backslash continues) inside ```sh, ```bash, ```shell or
```console blocks. Python snippets: ```python / ```py blocks. In both,
http://127.0.0.1:8080 and localhost:8080 are replaced by EMBEDSCOPE_URL's
host:port. A curl command must exit 0 with non-empty output, and its output
must be valid JSON when it prints a JSON body (no -i/-I/-v/-o/-w, a JSON
endpoint, no pipe other than into json.tool or jq). A snippet must exit 0
(run with /usr/bin/python3, which needs python3-requests)."""
import json
import os
import re
import subprocess
import unittest
import urllib.parse

from httpkit import BASE, DATA, HANG_S, ROOT, WPE, Daemon

import glob

README = os.path.join(ROOT, "README.md")
DOCS = [README] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))) + [os.path.join(ROOT, "bench", "README.md")]
SHELL_LANGS = {"sh", "bash", "shell", "console"}
PYTHON_LANGS = {"python", "py", "python3"}
NOT_JSON_PATHS = ("/openapi.yaml", "/metrics", "/problems/")
FENCE = re.compile(r"^\s*```+\s*([\w+-]*)")


def code_blocks(markdown):
    """(language, [lines]) of every fenced code block."""
    blocks, lang, lines = [], None, None
    for line in markdown.splitlines():
        m = FENCE.match(line)
        if m and lines is None:
            lang, lines = m.group(1).lower(), []
        elif m and not m.group(1):
            blocks.append((lang, lines))
            lang, lines = None, None
        elif lines is not None:
            lines.append(line)
    return blocks


def curl_commands(markdown):
    """Every curl command of the shell blocks, continuation lines joined, prompts removed."""
    commands = []
    for lang, lines in code_blocks(markdown):
        if lang not in SHELL_LANGS:
            continue
        i = 0
        while i < len(lines):
            line = re.sub(r"^\s*\$\s+", "", lines[i])
            i += 1
            if not line.startswith("curl "):
                continue
            parts = [line]
            while parts[-1].endswith("\\") and i < len(lines):
                parts[-1] = parts[-1][:-1]
                parts.append(lines[i].strip())
                i += 1
            commands.append(" ".join(p.strip() for p in parts))
    return commands


def python_snippets(markdown):
    return ["\n".join(lines) for lang, lines in code_blocks(markdown) if lang in PYTHON_LANGS]


def localize(text, base=BASE):
    """Point the README's default address at the daemon under test."""
    hostport = urllib.parse.urlsplit(base).netloc
    return text.replace("127.0.0.1:8080", hostport).replace("localhost:8080", hostport)


def prints_json(command):
    """Does this curl command print a JSON body (so its output must parse)?"""
    if re.search(r"\s(-[a-zA-Z]*[iIvow]|-D|--include|--head|--verbose|--output|--write-out|--dump-header)\b",
                 command):
        return False
    if re.search(r"accept-encoding", command, re.I) and "--compressed" not in command:
        return False
    stages = command.split("|")
    if len(stages) > 1 and not re.search(r"(json\.tool|\bjq\b(?!.*\s-r\b))", stages[-1]):
        return False
    url = re.search(r"https?://[^\s'\"]+", stages[0])
    if not url:
        return False
    parts = urllib.parse.urlsplit(url.group(0))
    if urllib.parse.parse_qs(parts.query).get("format", ["json"])[-1] in ("csv", "npy"):
        return False
    return not any(p in parts.path for p in NOT_JSON_PATHS)


def run_curl(command):
    """(problem or None, output) of one localized curl command run with bash."""
    p = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=HANG_S, cwd=ROOT)
    if p.returncode != 0:
        return "exit status %d: %s" % (p.returncode, p.stderr.strip()[:300]), p.stdout
    if not p.stdout.strip():
        return "no output", p.stdout
    if prints_json(command):
        try:
            json.loads(p.stdout)
        except ValueError as e:
            return "output is not JSON (%s): %r" % (e, p.stdout[:200]), p.stdout
    return None, p.stdout


def run_python(code):
    """(problem or None) of one localized snippet run with /usr/bin/python3 (the Python client of
    clients/python importable, as after `pip install ./clients/python`)."""
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "clients", "python"))
    p = subprocess.run(["/usr/bin/python3", "-"], input=code, capture_output=True, text=True, timeout=HANG_S, cwd=ROOT,
                       env=env)
    if p.returncode != 0:
        return "exit status %d: %s" % (p.returncode, p.stderr.strip()[-600:])
    return None


SAMPLE = """# Sample
```sh
make run
curl -fsS http://127.0.0.1:8080/healthz
```
```console
$ curl -s 'http://localhost:8080/v1/models/gpt2-small/matrices/wpe/pca?k=3&rows=1:' \\
    | python3 -m json.tool
{"not": "a command"}
$ curl -sI http://127.0.0.1:8080/healthz
```
```json
curl -s http://127.0.0.1:8080/ignored
```
```bash
curl -s http://127.0.0.1:8080/metrics | head -3
```
```python
import json, urllib.request
doc = json.load(urllib.request.urlopen("http://127.0.0.1:8080/v1/models"))
assert any(m["name"] == "gpt2-small" for m in doc["models"])
```
"""


class Runner(unittest.TestCase):
    """The extraction and the checks on a sample document, so the runner itself can fail."""

    def test_extraction(self):
        self.assertEqual(curl_commands(SAMPLE), [
            "curl -fsS http://127.0.0.1:8080/healthz",
            "curl -s 'http://localhost:8080/v1/models/gpt2-small/matrices/wpe/pca?k=3&rows=1:' | python3 -m json.tool",
            "curl -sI http://127.0.0.1:8080/healthz",
            "curl -s http://127.0.0.1:8080/metrics | head -3"])
        self.assertEqual(len(python_snippets(SAMPLE)), 1)
        self.assertEqual([prints_json(c) for c in curl_commands(SAMPLE)], [True, True, False, False])
        self.assertFalse(prints_json("curl -s 'http://127.0.0.1:8080/v1/x/pca?k=3&format=csv'"))
        self.assertTrue(prints_json("curl -s 'http://127.0.0.1:8080/v1/x/pca?k=3&format=json'"))

    def test_sample_commands_run(self):
        for command in curl_commands(SAMPLE):
            with self.subTest(command):
                problem, _ = run_curl(localize(command))
                self.assertIsNone(problem)
        self.assertIsNone(run_python(localize(python_snippets(SAMPLE)[0])))

    def test_failures_are_detected(self):
        for command in ("curl -fsS %s/nope" % BASE,                                # HTTP 404 with -f
                        "curl -s %s/nope -o /dev/null" % BASE,                      # no output
                        "curl -s --max-filesize 10 '%s%s/pca?k=3'" % (BASE, WPE),   # curl error
                        "curl -s %s/healthz; echo ' trailing garbage'" % BASE):     # not JSON
            with self.subTest(command):
                self.assertIsNotNone(run_curl(command)[0])
        self.assertIsNotNone(run_python("raise SystemExit(3)"))

    def test_localize(self):
        self.assertEqual(localize("curl http://127.0.0.1:8080/x http://localhost:8080/y", "http://127.0.0.1:4321"),
                         "curl http://127.0.0.1:4321/x http://127.0.0.1:4321/y")


class Readme(unittest.TestCase):
    """The documents read as one text: an example moved between them is still run, against a daemon
    of its own on the shipped configuration with sync_seconds and request_timeout_s of 600 s: the
    examples expect the answers a quiet machine gives (a cosine matrix as NPY, not a 202 job), and
    on a loaded one a computation runs past the default 10 s."""
    @classmethod
    def setUpClass(cls):
        texts = []
        for path in DOCS:
            with open(path) as f:
                texts.append(f.read())
        cls.text = "\n".join(texts)
        with open(os.path.join(ROOT, "config", "embedscope.json")) as f:
            config = json.load(f)
        config["data_dir"] = DATA
        config["limits"]["sync_seconds"] = 600
        config["limits"]["request_timeout_s"] = 600
        cls.daemon = Daemon(config)
        cls.daemon.wait_ready()
        cls.base = cls.daemon.base

    @classmethod
    def tearDownClass(cls):
        cls.daemon.close()

    def test_readme_has_examples_of_its_own(self):
        with open(README) as f:
            commands = curl_commands(f.read())
        self.assertGreaterEqual(len(commands), 3, "the README's short tour lost its curl examples")

    def test_every_curl_example_succeeds(self):
        commands = curl_commands(self.text)
        self.assertGreater(len(commands), 0, "the documentation has no curl example")
        for command in commands:
            with self.subTest(command):
                problem, _ = run_curl(localize(command, self.base))
                self.assertIsNone(problem, command)

    def test_the_tour_covers_the_issue(self):
        """The tour shows the helix PCA, the spectrum, a cosine row and the q/k/v capture."""
        commands = " ".join(curl_commands(self.text))
        for fragment in ("/pca?", "rows=1:", "k=3", "/spectrum", "/cosine?", "/v1/capture?", "h0.q", "h0.k", "h0.v"):
            self.assertIn(fragment, commands)

    def test_every_python_snippet_succeeds(self):
        snippets = python_snippets(self.text)
        self.assertGreater(len(snippets), 0, "the documentation has no Python snippet")
        self.assertTrue(any("requests" in s for s in snippets), "no snippet uses requests")
        for code in snippets:
            with self.subTest(code[:60]):
                self.assertIsNone(run_python(localize(code, self.base)))


if __name__ == "__main__":
    unittest.main()
