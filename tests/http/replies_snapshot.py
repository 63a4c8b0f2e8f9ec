#!/usr/bin/env python3
"""Fingerprints of the daemon's replies to a fixed list of requests, to show that a
change meant to keep behaviour (a refactoring) keeps every reply byte for byte.

    make ES_COMMIT=snapshot build/embedscope    # both builds with one commit string (/v1's ETag)
    tests/http/replies_snapshot.py BIN OUT      # start BIN on the default configuration, write OUT
    SNAPSHOT_BODIES=DIR tests/http/...          # also keep each normalised reply in DIR
    diff before.txt after.txt                   # run once per build; no output: the same replies

One line per request: the request, then sha256 of the status, the headers that
describe the representation (Content-Type, ETag, Cache-Control, Vary, Allow,
Location, Retry-After, Content-Encoding, the CORS ones) and the body. What
legitimately differs between two runs is left out: Date, X-Request-Id, and in
JSON bodies the build's commit, request_id and the cost model's
predicted_seconds (calibrated at start). The daemon runs config/embedscope.json
with server.blas_threads 1: under "auto" a decomposition warmed beside another
one runs with fewer threads, and its error figures differ in the last bits. A tool, not a test: expected hashes would break on every
legitimate change of a reply (docs/development.md).
"""
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

PAIR = "a=gpt2-small/wpe&b=gpt2-small/h0.q"
ONE = "/v1/models/gpt2-small/matrices/wpe"
REQUESTS = [
    "/v1", "/v1/models", "/openapi.yaml", "/healthz", "/readyz", "/problems/invalid-parameter",
    ONE, "/v1/models/sinusoidal/matrices/pe",
    ONE + "/pca?k=3", ONE + "/pca?k=3&format=csv", ONE + "/pca?k=3&format=npy", ONE + "/pca?k=3&orient=columns",
    ONE + "/spectrum", ONE + "/spectrum?format=csv&center=none", ONE + "/spectrum?rows=1:&format=npy",
    ONE + "/cosine?row=3&rows=0:40", ONE + "/cosine?mode=offset&format=csv",
    ONE + "/neighbors?row=5&k=4", ONE + "/vectors?k=2", ONE + "/vectors?k=2&format=csv",
    ONE + "/periodicity?k=4", ONE + "/outliers", ONE + "/toeplitz", ONE + "/toeplitz?kind=cosine&format=csv",
    ONE + "/averaging?g=4", ONE + "/rows?rows=0:5",
    ONE + "/pca?k=3&average=4", ONE + "/pca?k=3&average=4&average_order=average_then_select",
    "/v1/models/gpt2-small/matrices/h0.q/spectrum?head=2&center=none",
    "/v1/capture?" + PAIR + "&k=3", "/v1/capture?" + PAIR + "&k=3&format=csv",
    "/v1/overlap?" + PAIR + "&ka=3&kb=3&bins=8",
    "/v1/alignment?w=gpt2-small/h0.q&r=gpt2-small/wpe&k=10&r_rows=1:&r_center=columns",
    "/v1/alignment/layers?model=gpt2-small&r=gpt2-small/wpe&k=10&r_rows=1:&r_center=columns",
    "/v1/attention?model=gpt2-small&layer=0&queries=1:64",
    "/v1/attention/ranking?model=gpt2-small&queries=100:300",
    "/v1/attention/pattern?model=gpt2-small&layer=0&head=1&queries=0:64&bins=16",
    "/v1/rope/relative?matrix=sinusoidal/rope64&seed=3",
    "/v1/compare?matrices=gpt2-small/wpe,openai-gpt/wpe&analysis=spectrum",
    "/v1/compare?matrices=gpt2-small/wpe&analysis=pca&k=3&format=csv",
    # errors
    ONE + "/pca?k=x", ONE + "/pca?k=3&bogus=1", ONE + "/pca?k=3&format=xml", "/v1/models/nope/matrices/x/pca",
    "/v1/capture?a=gpt2-small/wpe", ONE + "/cosine?bins=100000", "/nowhere", "/v1/jobs/none",
]
# (path, extra headers): conditional and negotiated requests
WITH_HEADERS = [
    (ONE + "/pca?k=3", {"If-None-Match": 'W/"x", *'}),
    (ONE + "/spectrum", {"Accept": "text/csv"}),
    (ONE + "/spectrum", {"Accept": "image/png"}),
    ("/v1/models", {"Origin": "https://example.org"}),
]
KEPT = ("content-type", "etag", "cache-control", "vary", "allow", "location", "retry-after", "content-encoding",
        "access-control-allow-origin", "access-control-expose-headers", "preference-applied")
VARYING = {"predicted_seconds", "commit", "request_id"}


def scrub(value):
    """The JSON value with what differs between runs of one build replaced by '*'."""
    if isinstance(value, dict):
        return {k: "*" if k in VARYING else scrub(v) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub(v) for v in value]
    return value


def fingerprint(base, path, headers):
    req = urllib.request.Request(base + path, headers={"Accept-Encoding": "identity", **headers})
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            status, hdrs, body = r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        status, hdrs, body = e.code, e.headers, e.read()
    ctype = hdrs.get("Content-Type", "")
    if "json" in ctype:
        body = json.dumps(scrub(json.loads(body)), sort_keys=False).encode()
    kept = "".join("%s: %s\n" % (k, hdrs[k]) for k in KEPT if hdrs.get(k) is not None)
    digest = hashlib.sha256(b"%d\n%s\n%s" % (status, kept.encode(), body)).hexdigest()
    if os.environ.get("SNAPSHOT_BODIES"):  # a folder: keep what was hashed, to diff two runs
        with open(os.path.join(os.environ["SNAPSHOT_BODIES"], re.sub(r"[^A-Za-z0-9]+", "_", path + str(headers))), "wb") as f:
            f.write(b"%d\n%s\n%s" % (status, kept.encode(), body))
    return "%d %s" % (status, digest)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: tests/http/replies_snapshot.py BIN OUT")
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    conf = json.load(open(os.path.join(root, "config", "embedscope.json")))
    conf["data_dir"] = os.path.join(root, "data")
    conf["server"]["blas_threads"] = 1
    # one path for every run: /v1/models names the configuration file (and its ETag follows)
    conf_path = os.path.join(tempfile.gettempdir(), "embedscope-replies-snapshot.json")
    with open(conf_path, "w") as f:
        json.dump(conf, f)
    # a copy of BIN with one modification time: it dates the generated matrices ("created")
    bin_path = os.path.join(tempfile.gettempdir(), "embedscope-replies-snapshot.bin")
    shutil.copyfile(sys.argv[1], bin_path)
    os.chmod(bin_path, 0o755)
    os.utime(bin_path, (1.6e9, 1.6e9))
    log = tempfile.NamedTemporaryFile(prefix="embedscope-snapshot.", delete=False)
    daemon = subprocess.Popen([bin_path, "--config", conf_path, "--listen", "127.0.0.1:0"], stderr=log,
                              env=env)
    try:
        port = None
        for _ in range(600):
            m = re.search(rb"listening on http://127\.0\.0\.1:(\d+)", open(log.name, "rb").read())
            if m:
                port = int(m.group(1))
                break
            time.sleep(0.1)
        if not port:
            sys.exit("the daemon did not start: see " + log.name)
        base = "http://127.0.0.1:%d" % port
        for _ in range(1200):
            try:
                urllib.request.urlopen(base + "/readyz", timeout=5)
                break
            except (urllib.error.URLError, OSError):
                time.sleep(0.1)
        lines = ["%s %s" % (p, fingerprint(base, p, {})) for p in REQUESTS]
        lines += ["%s %s %s" % (p, json.dumps(h, sort_keys=True), fingerprint(base, p, h)) for p, h in WITH_HEADERS]
    finally:
        daemon.terminate()
        daemon.wait(60)
        os.unlink(log.name)
        os.unlink(conf_path)
        os.unlink(bin_path)
    with open(sys.argv[2], "w") as f:
        f.write("\n".join(lines) + "\n")
    print("%d replies fingerprinted into %s" % (len(lines), sys.argv[2]))


if __name__ == "__main__":
    main()
