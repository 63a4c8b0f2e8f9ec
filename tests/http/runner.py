"""Runs the HTTP test modules (unittest discover) and says where their time went.

python3 tests/http/runner.py [ONLY [SKIP]]: discovers tests/http/test_*.py, keeps the modules whose
file name matches one of the globs of ONLY (space-separated; default test_*.py) and none of SKIP's,
and runs them with unittest's verbose text runner, so the output
ends with unittest's own "Ran N tests" and "OK" / "FAILED (...)" lines, which tests/http/run.sh counts.
Each module runs as a whole (its class and module fixtures torn down at its end), and is timed:
wall seconds, CPU seconds of the test process and the daemons it started itself, and CPU seconds of
the shared daemon (EMBEDSCOPE_PID). Then a table, slowest first, of the modules and of the slowest
tests, on lines that start with "time:". CPU seconds are the figure to compare on a loaded machine.
"""
import fnmatch
import os
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
TICKS = os.sysconf("SC_CLK_TCK")


def daemon_cpu():
    """User+system CPU seconds of the shared daemon so far (0 when unknown or gone)."""
    pid = os.environ.get("EMBEDSCOPE_PID")
    if not pid:
        return 0.0
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS   # utime, stime: fields 14 and 15 of stat


def own_cpu():
    """User+system CPU seconds of this process and of the children it waited for."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def first_test(suite):
    for t in suite:
        if isinstance(t, unittest.TestSuite):
            found = first_test(t)
            if found is not None:
                return found
        else:
            return t
    return None


def module_name(suite):
    t = first_test(suite)
    return t.__class__.__module__ if t is not None else None


class TimedResult(unittest.TextTestResult):
    """Records each test's wall seconds."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.test_seconds = []

    def startTest(self, test):
        self._started = time.monotonic()
        super().startTest(test)

    def stopTest(self, test):
        super().stopTest(test)
        self.test_seconds.append((time.monotonic() - self._started, test.id()))


class TimedSuite(unittest.TestSuite):
    """Runs its module suites one after another, each as a top-level run, and times each."""

    def __init__(self, modules):
        super().__init__(modules)
        self.module_seconds = []

    def run(self, result, debug=False):
        for suite in self:
            name = module_name(suite)   # before the run, which empties the suite
            wall, cpu, dcpu = time.monotonic(), own_cpu(), daemon_cpu()
            suite.run(result)
            # The module's last class and the module were torn down at the end of its run: forget them,
            # or the next module's first test would tear them down again.
            result._previousTestClass = None
            self.module_seconds.append((time.monotonic() - wall, own_cpu() - cpu, daemon_cpu() - dcpu, name))
        return result


def report(suite, result, out):
    rows = sorted(suite.module_seconds, reverse=True)
    out.write("time: module wall s, CPU s of the tests and their own daemons, CPU s of the shared daemon\n")
    for wall, cpu, dcpu, name in rows:
        out.write(f"time: {wall:7.1f} {cpu:7.1f} {dcpu:7.1f}  {name}\n")
    out.write(f"time: {sum(r[0] for r in rows):7.1f} {sum(r[1] for r in rows):7.1f} "
              f"{sum(r[2] for r in rows):7.1f}  all {len(rows)} modules\n")
    out.write("time: slowest tests, wall s\n")
    for seconds, name in sorted(result.test_seconds, reverse=True)[:10]:
        out.write(f"time: {seconds:7.1f}  {name}\n")


def chosen(name, only, skip):
    """Whether module NAME (e.g. test_uploads) is run: it matches a glob of ONLY and none of SKIP.
    A module that does not import (a failing test of unittest.loader) is always run."""
    if name.startswith("unittest.loader"):
        return True
    file = name + ".py"
    return any(fnmatch.fnmatch(file, g) for g in only) and not any(fnmatch.fnmatch(file, g) for g in skip)


def main():
    only = sys.argv[1].split() if len(sys.argv) > 1 else ["test_*.py"]
    skip = sys.argv[2].split() if len(sys.argv) > 2 else []
    found = unittest.defaultTestLoader.discover(HERE, pattern="test_*.py", top_level_dir=HERE)
    suite = TimedSuite([s for s in found if module_name(s) and chosen(module_name(s), only, skip)])
    runner = unittest.TextTestRunner(stream=sys.stdout, verbosity=2, resultclass=TimedResult)
    result = runner.run(suite)
    sys.stdout.flush()
    report(suite, result, sys.stdout)
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
