"""Runs the HTTP test modules, several at once, and says where their time went.

python3 tests/http/runner.py [ONLY [SKIP]]: takes tests/http/test_*.py, keeps the modules whose file
name matches one of the globs of ONLY (space-separated; default test_*.py) and none of SKIP's (a SKIP
entry MODULE.CLASS, e.g. test_lifecycle.Threads, leaves out that class of a module kept; an ONLY entry
MODULE.CLASS runs that class of the module and, of that module, only the classes so named), and runs
them in HTTP_JOBS worker processes (default: the cores, at least 2; 1 runs them one after another).
Each worker starts a daemon of its own on the embedded default (EMBEDSCOPE_BIN, a free loopback port,
a TMPDIR of its own) -- the "shared daemon" of the modules it runs, EMBEDSCOPE_URL to them -- and takes
the next module from the queue, slowest first (the last run's times in BUILD/http-times.json, else the
largest files first), until none is left; then it stops its daemon with SIGTERM and requires exit status 0
and no sanitizer report in its log (two checks per worker). A module runs whole in one worker (its class
and module fixtures torn down at its end), so a module never shares its daemon with a module running at
the same time; the modules that start daemons of their own give each its own port and directory.

Many modules wait much of their time (on their daemons, sockets, deadlines, polls), so two workers keep
a core busy that one would leave idle; each worker's shared daemon costs a start of the embedded default
(its generated baselines, the cost model's calibration, the warm list: seconds of CPU), so not many more.

Each module's verbose unittest output is printed whole when it ends, and the output ends with
unittest's own "Ran N tests" and "OK" / "FAILED (...)" lines, which tests/http/run.sh counts.
Each module is timed: wall seconds, CPU seconds of the test process and the daemons it started itself,
CPU seconds of its worker's shared daemon; then tables, slowest first, of the modules and of the slowest
tests (wall and CPU seconds), on lines that start with "time:". CPU seconds are the figure to compare on
a loaded machine; the stage's line counts everything, the shared daemons' starts included.
"""
import fnmatch
import glob
import io
import json
import os
import re
import selectors
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
TICKS = os.sysconf("SC_CLK_TCK")
HANG_S = 600   # a guard against a hang (httpkit.HANG_S), never a measure of speed


def proc_cpu(pid):
    """User+system CPU seconds of process pid so far (0 when unknown or gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError, TypeError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS   # utime, stime: fields 14 and 15 of stat


def own_cpu():
    """User+system CPU seconds of this process and of the children it waited for."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class TimedResult(unittest.TextTestResult):
    """Records each test's wall and CPU seconds (this process and the children it waited for)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.test_seconds = []

    def startTest(self, test):
        self._started, self._cpu = time.monotonic(), own_cpu()
        super().startTest(test)

    def stopTest(self, test):
        super().stopTest(test)
        self.test_seconds.append((time.monotonic() - self._started, own_cpu() - self._cpu, test.id()))


# ---------------------------------------------------------------------------------------------- worker

def start_daemon(tmp):
    """The worker's shared daemon: the embedded default on a free loopback port, with the tests' cost rates
    and OpenBLAS threads (httpkit.TEST_COST_RATES, TEST_BLAS_THREADS say why; test_blas.Report checks the
    shipped "auto" policy on a daemon of its own). (proc, url, log path)."""
    log_path = os.path.join(tmp, "daemon.log")
    env = dict(os.environ, TMPDIR=tmp)
    for v in ("EMBEDSCOPE_URL", "EMBEDSCOPE_PID"):
        env.pop(v, None)
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([os.environ["EMBEDSCOPE_BIN"], "--listen", "127.0.0.1:0",
                                 "--cost-rates", os.environ["EMBEDSCOPE_TEST_COST_RATES"],
                                 "--blas-threads", os.environ["EMBEDSCOPE_TEST_BLAS_THREADS"]],
                                stdout=log, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + HANG_S
    while time.monotonic() < deadline:
        with open(log_path, errors="replace") as f:
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", f.read())
        if m:
            return proc, "http://127.0.0.1:%s" % m.group(1), log_path
        if proc.poll() is not None:
            break
        time.sleep(0.02)
    proc.kill()
    proc.wait()
    with open(log_path, errors="replace") as f:
        raise RuntimeError("the shared daemon did not start (exit %s); its log:\n%s" % (proc.returncode, f.read()))


def wait_ready(url):
    import urllib.request
    deadline = time.monotonic() + HANG_S
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/readyz", timeout=HANG_S) as r:
                if r.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.05)
    return False


def without_classes(suite, classes):
    """suite less the tests whose class is named in classes: "MODULE.CLASS" leaves that class out;
    "+MODULE.CLASS" keeps, of MODULE, only the classes so named."""
    skip = {c for c in classes if not c.startswith("+")}
    only = {c[1:] for c in classes if c.startswith("+")}
    kept = unittest.TestSuite()
    for t in suite:
        if isinstance(t, unittest.TestSuite):
            kept.addTest(without_classes(t, classes))
            continue
        name = "%s.%s" % (type(t).__module__, type(t).__name__)
        module_limited = any(c.split(".")[0] == type(t).__module__ for c in only)
        if name not in skip and (not module_limited or name in only):
            kept.addTest(t)
    return kept


def run_module(name, classes=()):
    """Runs one module whole (less the classes CLASSES leaves out: without_classes); returns its record (counts, output, times)."""
    out = io.StringIO()
    suite = without_classes(unittest.defaultTestLoader.loadTestsFromName(name), set(classes))
    # unittest's text result without its runner's summary: the parent prints one for all modules.
    result = TimedResult(unittest.runner._WritelnDecorator(out), True, 2)
    wall, cpu, dcpu = time.monotonic(), own_cpu(), proc_cpu(os.environ.get("EMBEDSCOPE_PID"))
    stdout, stderr = sys.stdout, sys.stderr
    sys.stdout = sys.stderr = out   # a test's own prints land in its module's block
    try:
        unittest.registerResult(result)
        result.startTestRun()
        suite(result)
        result.stopTestRun()
        if result.errors or result.failures:
            result.printErrors()
    finally:
        sys.stdout, sys.stderr = stdout, stderr
    return {
        "module": name, "output": out.getvalue(), "ran": result.testsRun,
        "failures": len(result.failures), "errors": len(result.errors), "skipped": len(result.skipped),
        "expected_failures": len(result.expectedFailures),
        "unexpected_successes": len(result.unexpectedSuccesses),
        "wall": time.monotonic() - wall, "cpu": own_cpu() - cpu,
        "dcpu": proc_cpu(os.environ.get("EMBEDSCOPE_PID")) - dcpu, "tests": result.test_seconds,
    }


def worker(orders_fd, report_fd, number, classes=()):
    """Reads module names from orders_fd, runs each, writes one JSON record per line to report_fd
    (its stdin is /dev/null: nothing a test starts can read the orders)."""
    report = os.fdopen(report_fd, "w", buffering=1)
    orders = os.fdopen(orders_fd)

    def send(rec):
        report.write(json.dumps(rec) + "\n")

    tmp = tempfile.mkdtemp(prefix="embedscope-http-worker%d-" % number)
    try:
        proc, url, log_path = start_daemon(tmp)
    except Exception as e:
        send({"fatal": "worker %d: %s" % (number, e)})
        return 1
    ready = wait_ready(url)
    os.environ["EMBEDSCOPE_URL"], os.environ["EMBEDSCOPE_PID"] = url, str(proc.pid)
    sys.path.insert(0, HERE)
    from httpkit import SANITIZER_REPORT, keep_log  # after EMBEDSCOPE_URL: httpkit.BASE reads it once
    send({"check": "worker %d: shared daemon ready at %s" % (number, url), "ok": ready, "first": True})
    for line in iter(orders.readline, ""):
        name = line.strip()
        try:
            send(run_module(name, classes))
        except Exception:
            send({"module": name, "output": traceback.format_exc(), "ran": 1, "failures": 0, "errors": 1,
                  "skipped": 0, "expected_failures": 0, "unexpected_successes": 0, "wall": 0, "cpu": 0,
                  "dcpu": 0, "tests": []})
    dcpu = proc_cpu(proc.pid)
    proc.send_signal(signal.SIGTERM)
    try:
        rc = proc.wait(HANG_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = proc.wait()
    with open(log_path, errors="replace") as f:
        log = f.read()
    bad = SANITIZER_REPORT.search(log)
    kept = keep_log(log_path, "the shared daemon's log") if rc != 0 or bad else ""
    send({"check": "worker %d: SIGTERM: shared daemon exited %s" % (number, rc), "ok": rc == 0,
          "detail": kept if rc != 0 else ""})
    send({"check": "worker %d: no sanitizer report in the shared daemon's log" % number, "ok": not bad,
          "detail": log[max(0, bad.start() - 200):bad.start() + 6000] if bad else ""})
    send({"done": number, "dcpu": dcpu})
    subprocess.run(["rm", "-rf", tmp])
    return 0


# ---------------------------------------------------------------------------------------------- parent

def chosen(file, only, skip):
    """A module file named by ONLY (a glob, or a MODULE.CLASS entry of it) and not left out by SKIP's globs."""
    named = any(fnmatch.fnmatch(file, g) for g in only) or any(g.split(".")[0] + ".py" == file
                                                               for g in class_entries(only))
    return named and not any(fnmatch.fnmatch(file, g) for g in skip)


def class_entries(globs):
    """The MODULE.CLASS entries of a list of globs (a module's file name ends in .py)."""
    return [g for g in globs if "." in g and not g.endswith(".py")]


def class_filter(only, skip):
    """The worker's class filter (without_classes): SKIP's classes, and ONLY's as "+MODULE.CLASS"."""
    return class_entries(skip) + ["+" + g for g in class_entries(only)]


def times_file():
    build = os.environ.get("EMBEDSCOPE_BIN")
    return os.path.join(os.path.dirname(build), "http-times.json") if build else None


def slowest_first(names):
    """The last run's wall seconds per module when recorded, else the file's size (a rough stand-in)."""
    known = {}
    try:
        with open(times_file()) as f:
            known = json.load(f)
    except (OSError, TypeError, ValueError):
        pass
    size = {n: os.path.getsize(os.path.join(HERE, n + ".py")) for n in names}
    return sorted(names, key=lambda n: (n in known, known.get(n, 0), size[n]), reverse=True)


def main():
    only = sys.argv[1].split() if len(sys.argv) > 1 else ["test_*.py"]
    skip = sys.argv[2].split() if len(sys.argv) > 2 else []
    names = [os.path.basename(p)[:-3] for p in sorted(glob.glob(os.path.join(HERE, "test_*.py")))
             if chosen(os.path.basename(p), only, skip)]
    queue = slowest_first(names)
    os.environ.setdefault("EMBEDSCOPE_TEST_BLAS_THREADS", "1")   # httpkit.TEST_BLAS_THREADS says why
    os.environ.setdefault("EMBEDSCOPE_TEST_COST_RATES", "fixed")   # httpkit.TEST_COST_RATES says why
    jobs = int(os.environ.get("HTTP_JOBS") or max(2, len(os.sched_getaffinity(0))))
    jobs = max(1, min(jobs, len(queue)))
    started, cpu0 = time.monotonic(), own_cpu()

    sel = selectors.DefaultSelector()
    workers = []
    for i in range(jobs):
        orders_r, orders_w = os.pipe()
        report_r, report_w = os.pipe()
        p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", str(orders_r), str(report_w),
                              str(i), " ".join(class_filter(only, skip))], stdin=subprocess.DEVNULL,
                             pass_fds=(orders_r, report_w))
        os.close(orders_r)
        os.close(report_w)
        p.orders = os.fdopen(orders_w, "w")
        p.running = None
        workers.append(p)
        sel.register(os.fdopen(report_r), selectors.EVENT_READ, (i, p))

    def hand_out(p):
        p.running = None
        if p.orders.closed:
            return
        if queue:
            p.running = queue.pop(0)
            p.orders.write(p.running + "\n")
            p.orders.flush()
        else:
            p.orders.close()

    totals = dict(ran=0, failures=0, errors=0, skipped=0, expected_failures=0, unexpected_successes=0)
    modules, tests, checks = [], [], []
    shared_cpu = 0.0
    open_workers = len(workers)
    while open_workers:
        for key, _ in sel.select():
            i, p = key.data
            line = key.fileobj.readline()
            if not line:   # the worker ended: a module it was running never reported is an error
                sel.unregister(key.fileobj)
                key.fileobj.close()
                open_workers -= 1
                if getattr(p, "running", None):
                    checks.append((False, "worker %d ended while running %s (exit %s)" % (i, p.running, p.wait()), ""))
                    print("FAIL: " + checks[-1][1], flush=True)
                    p.running = None
                continue
            rec = json.loads(line)
            if "fatal" in rec:
                checks.append((False, rec["fatal"], ""))
                print("FAIL: " + rec["fatal"], flush=True)
                p.orders.close()
            elif "check" in rec:
                checks.append((rec["ok"], rec["check"], rec.get("detail", "")))
                print(("ok: " if rec["ok"] else "FAIL: ") + rec["check"], flush=True)
                if rec.get("detail"):
                    print("".join("    | " + l for l in rec["detail"].splitlines(True)), flush=True)
                if rec.get("first"):   # its daemon started: hand the worker its first module
                    hand_out(p)
            elif "done" in rec:
                shared_cpu += rec["dcpu"]
            else:
                sys.stdout.write(rec["output"])
                sys.stdout.flush()
                for k in totals:
                    totals[k] += rec[k]
                modules.append((rec["wall"], rec["cpu"], rec["dcpu"], rec["module"]))
                tests.extend(rec["tests"])
                hand_out(p)
    for p in workers:
        p.wait()
    wall, stage_cpu = time.monotonic() - started, own_cpu() - cpu0

    if queue:   # every worker ended (their daemons did not start): the modules left were never run
        checks.append((False, "never run (no worker left): " + " ".join(queue), ""))
        print("FAIL: " + checks[-1][1], flush=True)
    for ok, name, _ in checks:   # each check counts as a test of its own
        totals["ran"] += 1
        totals["failures"] += 0 if ok else 1
    print("-" * 70)
    print("Ran %d tests in %.3fs" % (totals["ran"], wall))
    print()
    extra = ["%s=%d" % (k.replace("_", " "), totals[k])
             for k in ("failures", "errors", "skipped", "expected_failures", "unexpected_successes") if totals[k]]
    bad = totals["failures"] + totals["errors"] + totals["unexpected_successes"]
    print(("FAILED" if bad else "OK") + (" (%s)" % ", ".join(extra) if extra else ""))

    rows = sorted(modules, reverse=True)
    print("time: module wall s, CPU s of the tests and their own daemons, CPU s of the shared daemon")
    for w, c, d, name in rows:
        print(f"time: {w:7.1f} {c:7.1f} {d:7.1f}  {name}")
    print(f"time: {sum(r[0] for r in rows):7.1f} {sum(r[1] for r in rows):7.1f} "
          f"{sum(r[2] for r in rows):7.1f}  all {len(rows)} modules")
    print(f"time: {wall:7.1f} {stage_cpu:7.1f} {shared_cpu:7.1f}  the stage, {jobs} workers at once "
          f"(CPU: everything it ran, the shared daemons included)")
    print("time: slowest tests, wall s, CPU s (the test process and the daemons it started)")
    for w, c, name in sorted(tests, reverse=True)[:12]:
        print(f"time: {w:7.1f} {c:7.1f}  {name}")
    print("time: costliest tests, CPU s")
    for w, c, name in sorted(tests, key=lambda t: t[1], reverse=True)[:12]:
        print(f"time: {w:7.1f} {c:7.1f}  {name}")
    try:
        known = {}
        try:
            with open(times_file()) as f:
                known = json.load(f)
        except (OSError, ValueError):
            pass
        known.update({name: round(w, 1) for w, _, _, name in modules})
        with open(times_file(), "w") as f:
            json.dump(known, f, indent=0, sort_keys=True)
    except (OSError, TypeError):
        pass
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        sys.exit(worker(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5].split()))
    sys.exit(main())
