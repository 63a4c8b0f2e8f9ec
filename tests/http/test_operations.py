"""What operators see of the daemon itself (issue 12): the build identity
(--version, /v1, embedscope_build_info), X-Forwarded-Prefix in problem
documents, and CORS headers that a shared cache can store safely (Vary: Origin
whenever they depend on it).

Run by tests/http/run.sh against the embedded default (EMBEDSCOPE_URL); the
CORS allow-list test starts its own daemon."""
import json
import re
import shutil
import subprocess
import unittest

from httpkit import ROOT, WPE, Daemon, get_json, request, run_binary

VERSION = re.compile(r"^embedscope (\d+\.\d+\.\d+) \(commit ([0-9a-f]{12}(-dirty)?|unknown)\)\n$")


def git_commit():
    """The commit the Makefile compiles in for this checkout, or "unknown"."""
    out = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty", "--abbrev=12", "--exclude=*"],
                         capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else "unknown"


class BuildIdentity(unittest.TestCase):
    def test_version_option(self):
        rc, out, err = run_binary("--version")
        self.assertEqual((rc, err), (0, ""))
        m = VERSION.match(out)
        self.assertIsNotNone(m, out)
        # The build's commit: the checkout's HEAD (the tree may have changed since the build: compare the hash).
        self.assertEqual(m.group(2).split("-")[0], git_commit().split("-")[0])

    def test_v1_lists_version_commit_and_limits(self):
        r, doc = get_json("/v1")
        self.assertEqual(r.status, 200)
        self.assertEqual(r.header("Cache-Control"), "no-cache")
        self.assertRegex(r.header("ETag"), r'^W/"[0-9a-f]{32}"$')
        rc, out, _ = run_binary("--version")
        version, commit = VERSION.match(out).group(1, 2)
        self.assertEqual((doc["service"], doc["version"], doc["commit"]), ("embedscope", version, commit))
        # The embedded default configuration's limits.
        with open(ROOT + "/config/embedscope.json") as f:
            limits = json.load(f)["limits"]
        for name in ("max_k", "max_bins", "max_exclude", "max_response_bytes", "sync_seconds", "job_ttl_s",
                     "max_jobs_per_client"):
            self.assertEqual(doc["limits"][name], limits[name], name)
        self.assertEqual(request("/v1", headers={"If-None-Match": r.header("ETag")}).status, 304)

    def test_build_info_metric(self):
        text = request("/metrics").body.decode()
        _, doc = get_json("/v1")
        self.assertIn('# TYPE embedscope_build_info gauge\nembedscope_build_info{version="%s",commit="%s"} 1\n'
                      % (doc["version"], doc["commit"]), text)

    @unittest.skipUnless(shutil.which("promtool"), "promtool (Debian's prometheus) is not installed")
    def test_exposition_passes_promtool(self):
        out = subprocess.run(["promtool", "check", "metrics"], input=request("/metrics").body,
                             capture_output=True)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)


class ForwardedPrefix(unittest.TestCase):
    def problem(self, path, prefix=None):
        headers = {"X-Forwarded-Prefix": prefix} if prefix is not None else {}
        r, doc = get_json(path, headers=headers)
        self.assertEqual(r.header("Content-Type"), "application/problem+json")
        return r, doc

    def test_problems_name_the_public_paths(self):
        r, doc = self.problem(WPE + "/pca?k=abc", "/embedscope")
        self.assertEqual(r.status, 400)
        self.assertEqual(doc["type"], "/embedscope/problems/invalid-parameter")
        self.assertEqual(doc["instance"], "/embedscope" + WPE + "/pca")
        self.assertEqual(doc["param"], "k")
        r, doc = self.problem("/v1/nope", "/a/b/")
        self.assertEqual((r.status, doc["type"], doc["instance"]), (404, "/a/b/problems/not-found", "/a/b/v1/nope"))

    def test_the_problem_type_resolves_under_the_prefix_path(self):
        # What a proxy forwards for <prefix>/problems/<slug>: the daemon's own path.
        _, doc = self.problem("/v1/nope", "/embedscope")
        slug_path = doc["type"][len("/embedscope"):]
        r = request(slug_path)
        self.assertEqual(r.status, 200)
        self.assertIn("does not exist", r.body.decode())

    def test_other_replies_do_not_change(self):
        plain, prefixed = request(WPE), request(WPE, headers={"X-Forwarded-Prefix": "/embedscope"})
        self.assertEqual((plain.body, plain.header("ETag")), (prefixed.body, prefixed.header("ETag")))

    def test_unclean_prefixes_are_ignored(self):
        for bad in ("embedscope", "//evil.example", "/a/../b", "/a b", "/\"x", "/" + "a" * 200):
            _, doc = self.problem("/v1/nope", bad)
            self.assertEqual((doc["type"], doc["instance"]), ("/problems/not-found", "/v1/nope"), bad)

    def test_no_header_no_prefix(self):
        _, doc = self.problem("/v1/nope")
        self.assertEqual((doc["type"], doc["instance"]), ("/problems/not-found", "/v1/nope"))


class CorsAnyOrigin(unittest.TestCase):
    """The default "*": the same headers whatever the Origin, so no Vary: Origin."""

    def test_same_headers_with_and_without_origin(self):
        for headers in ({}, {"Origin": "http://a.example"}, {"Origin": "null"}):
            r = request(WPE, headers=headers)
            self.assertEqual(r.header("Access-Control-Allow-Origin"), "*", headers)
            self.assertNotIn("Origin", r.header("Vary") or "", headers)

    def test_preflight_allows_authorization(self):
        r = request(WPE + "/pca", method="OPTIONS",
                    headers={"Origin": "http://a.example", "Access-Control-Request-Method": "GET",
                             "Access-Control-Request-Headers": "authorization, content-type"})
        self.assertEqual(r.status, 204)
        allowed = [h.strip().lower() for h in r.header("Access-Control-Allow-Headers").split(",")]
        self.assertIn("authorization", allowed)
        self.assertIn("content-type", allowed)


class CorsAllowList(unittest.TestCase):
    """A restricted cors_origins: every reply (allowed Origin, other Origin, none, errors, 304) says
    Vary: Origin, because its CORS headers depend on the Origin."""

    ORIGIN = "http://dash.example"

    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon({"server": {"cors_origins": [cls.ORIGIN]},
                             "models": {"gpt2-small": {"matrices": {"wpe": {"file": "gpt2-small/wpe.npy"}}}}})
        cls.daemon.wait_ready()

    @classmethod
    def tearDownClass(cls):
        cls.daemon.close()

    def vary(self, r):
        return [v.strip() for v in (r.header("Vary") or "").split(",")]

    def test_vary_origin_on_every_reply(self):
        etag = request(WPE, base=self.daemon.base).header("ETag")
        for origin in (self.ORIGIN, "http://evil.example", None):
            headers = {"Origin": origin} if origin else {}
            for path, extra, status in ((WPE, {}, 200), (WPE, {"If-None-Match": etag}, 304),
                                        ("/v1/nope", {}, 404), ("/healthz", {}, 200)):
                r = request(path, base=self.daemon.base, headers=dict(headers, **extra))
                self.assertEqual(r.status, status)
                self.assertIn("Origin", self.vary(r), (origin, path))
                want = self.ORIGIN if origin == self.ORIGIN else None
                self.assertEqual(r.header("Access-Control-Allow-Origin"), want, (origin, path))


if __name__ == "__main__":
    unittest.main()
