"""Debian's nginx with deploy/nginx.conf in front of a daemon, for tests.

    with Nginx(daemon_base) as proxy:      # e.g. Nginx("http://127.0.0.1:43381")
        request("/embedscope/healthz", base=proxy.base)

Wraps tests/deploy/nginx.sh: a private directory (config, pid, logs, cache,
temp files), a free loopback port, stopped (and the directory removed) on
close. Nginx.available() is False when nginx is not installed.
"""
import os
import shutil
import subprocess
import tempfile
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "tests", "deploy", "nginx.sh")


class Nginx:
    """A running nginx proxying to upstream: a base URL or host:port, or a list of them
    (replicas, balanced by nginx)."""

    PREFIX = "/embedscope"

    @staticmethod
    def available():
        return shutil.which("nginx") is not None or os.access("/usr/sbin/nginx", os.X_OK)

    def __init__(self, upstream, cors_origins=(), write_allow=(), read_timeout=None):
        """cors_origins: the daemon's restricted server.cors_origins, listed in the config's Origin
        map; write_allow: addresses (CIDR) allowed to write without a token; read_timeout: the
        config's proxy_read_timeout instead of its own (e.g. "1s")."""
        servers = [upstream] if isinstance(upstream, str) else list(upstream)
        upstream = ",".join(urllib.parse.urlsplit(s).netloc if "://" in s else s for s in servers)
        self.dir = tempfile.mkdtemp(prefix="embedscope-nginx-")
        env = dict(os.environ, NGINX_CORS_ORIGINS=" ".join(cors_origins), NGINX_WRITE_ALLOW=" ".join(write_allow))
        if read_timeout:
            env["NGINX_READ_TIMEOUT"] = read_timeout
        out = subprocess.run([SCRIPT, "start", self.dir, upstream], capture_output=True, text=True, timeout=60,
                             env=env)
        if out.returncode != 0:
            shutil.rmtree(self.dir, ignore_errors=True)
            raise AssertionError("nginx did not start:\n" + out.stderr)
        self.base = out.stdout.strip()

    def log(self, name="error.log"):
        """The text of one of nginx's logs (error.log; embedscope.access.log: the config's own
        access log, with request ids)."""
        with open(os.path.join(self.dir, "logs", name), errors="replace") as f:
            return f.read()

    def close(self):
        """Stop nginx and remove its directory. Idempotent."""
        if self.dir:
            subprocess.run([SCRIPT, "stop", self.dir], check=True, timeout=60)
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
