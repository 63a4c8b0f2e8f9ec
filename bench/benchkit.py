"""What the HTTP benchmarks share (bench/cosine_offset.py, cosine_row.py, parts.py, cost.py, calibration.py): the
daemon binary of a build directory, a daemon serving matrix entries (or one generated gaussian matrix at
/v1/models/b/matrices/g/) with limits that let a long request finish synchronously, and a process's CPU seconds
from /proc.

Import it from a script in bench/ (the script's directory is on sys.path); it puts tests/http on the path
for httpkit. A script's first argument is the build directory by convention (passed as build=)."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "http"))
import httpkit  # noqa: E402
from httpkit import request  # noqa: E402,F401  (re-exported for the scripts)

MATRIX = "/v1/models/b/matrices/g/"


def binary(build):
    """The daemon of a build directory (relative to the repository, or absolute)."""
    return build if build.endswith("embedscope") else os.path.join(ROOT, build, "embedscope")


# No request deadline, no 202 job, replies and generated matrices of any size: a long request answers synchronously.
LIMITS = {"max_response_bytes": 1 << 30, "request_timeout_s": 0, "sync_seconds": 86400,
          "max_generated_elements": 1 << 28}


def daemon(matrices, args=("--access-log", "off"), build=None, start_timeout=None):
    """A daemon (httpkit.Daemon, started, not yet ready: call wait_ready) of the given build (EMBEDSCOPE_BIN or
    build/ when None) serving the matrix entries given (name -> entry) as /v1/models/b/matrices/NAME/, with
    LIMITS."""
    if build is not None:
        httpkit.BIN = binary(build)
    kw = {"start_timeout": start_timeout} if start_timeout else {}
    return httpkit.Daemon({"limits": dict(LIMITS), "models": {"b": {"matrices": matrices}}}, args=tuple(args), **kw)


def generated_daemon(rows, cols, args=("--access-log", "off"), build=None, seed=7, start_timeout=None):
    """daemon() serving one rows x cols gaussian generator entry at MATRIX."""
    return daemon({"g": {"generator": "gaussian", "rows": rows, "cols": cols, "seed": seed}}, args, build,
                  start_timeout)


def cpu_of(pid):
    """User + system CPU seconds of a process so far, every thread (/proc/PID/stat)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
