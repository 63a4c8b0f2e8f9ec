"""The daemon's life cycle, on instances started by the tests themselves:
--help, start-up errors (one clear message naming the key path or file, exit
non-zero), --listen, /readyz 503 while the configured decompositions warm,
SIGTERM letting in-flight requests finish, the running and the queued
computation (exit 0), SIGINT (exit 0)."""
import hashlib
import http.client
import json
import os
import re
import signal
import socket
import stat
import subprocess
import tempfile
import time
import unittest

from httpkit import BIN, DATA, HANG_S, SYNC, Daemon, get_json, metrics, request, run_binary

SMALL_MODEL = {"m": {"matrices": {"pe": {"generator": "sinusoidal", "n_positions": 16, "d_model": 8}}}}
# 4096 x 768 seeded Gaussian: each decomposition takes about a second.
GAUSSIAN = {"b": {"matrices": {"g": {"generator": "gaussian", "rows": 4096, "cols": 768, "seed": 1}}}}


def error_lines(stderr):
    """The log lines at level error."""
    return [line for line in stderr.splitlines() if re.search(r"\berror\b", line)]


class CommandLine(unittest.TestCase):
    def test_help(self):
        rc, out, err = run_binary("--help")
        self.assertEqual(rc, 0, err)
        self.assertTrue(out.startswith("usage: embedscope"), out)
        for option in ("--config FILE", "--listen", "--threads", "--compute-threads", "--queue-limit",
                       "compute thread (default 64)", "--check-config", "--cost-rates calibrate|fixed",
                       "--blas-threads auto|N"):
            self.assertIn(option, out)

    def test_cost_rates_calibrated_by_default_and_fixed_on_request(self):
        """A daemon calibrates its cost model at start unless --cost-rates fixed (the test suite's
        daemons) says to keep the built-in rates."""
        for cost_rates, logged, absent in ((None, "cost model calibrated in", "fixed rates"),
                                           ("fixed", "cost model: fixed rates", "calibrated in")):
            with self.subTest(cost_rates=cost_rates):
                daemon = Daemon({"models": SMALL_MODEL}, cost_rates=cost_rates)
                log = daemon.close()
                self.assertIn(logged, log)
                self.assertNotIn(absent, log)

    def test_bad_command_lines(self):
        for args, words in ((["--bogus"], "--bogus"), (["--listen", "nope"], "--listen"),
                            (["--threads", "0"], "--threads"), (["--config"], "--config"), (["extra"], "extra"),
                            (["--compute-threads", "0"], "--compute-threads"), (["--queue-limit", "x"], "--queue-limit"),
                            (["--queue-limit", ""], "--queue-limit"), (["--cost-rates", "quick"], "--cost-rates"),
                            (["--blas-threads", "0"], "--blas-threads"), (["--blas-threads", "1025"], "--blas-threads"),
                            (["--blas-threads", "two"], "--blas-threads"), (["--blas-threads", ""], "--blas-threads")):
            with self.subTest(args):
                rc, out, err = run_binary(*args)
                self.assertNotEqual(rc, 0)
                self.assertIn(words, err)
                self.assertIn("embedscope --help", err)

    def test_check_config_of_the_embedded_default(self):
        rc, out, err = run_binary("--check-config")
        self.assertEqual(rc, 0, err)
        self.assertIn("embedded default is valid", out)


SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <printf.h>
#include <wchar.h>
/* What libquadmath's constructor does, through glibc's own function (the daemon's refuses). */
__attribute__((constructor)) static void register_q(void)
{
    int (*real)(const wchar_t *) = (int (*)(const wchar_t *))dlsym(RTLD_NEXT, "register_printf_modifier");
    if (real)
        real(L"Q");
}
"""


class PrintfHooks(unittest.TestCase):
    """src/http/printf_hooks.c refuses printf extensions so that glibc keeps its fast path; the daemon
    checks at start that the refusal held and warns when it did not. An LD_PRELOAD shim registers %Q
    with glibc's own function, as a library whose lookup bypassed the daemon's definitions would."""

    WARNING = "a printf extension is registered"

    def test_a_registered_extension_is_warned_about(self):
        if "libasan" in subprocess.run(["ldd", BIN], capture_output=True, text=True).stdout:
            self.skipTest("an LD_PRELOAD shim cannot come before the ASan runtime")
        with tempfile.TemporaryDirectory(prefix="embedscope-shim-") as tmp:
            with open(os.path.join(tmp, "shim.c"), "w") as f:
                f.write(SHIM)
            shim = os.path.join(tmp, "shim.so")
            subprocess.run(["cc", "-shared", "-fPIC", "-o", shim, os.path.join(tmp, "shim.c")], check=True)
            rc, out, err = run_binary("--check-config", env={"LD_PRELOAD": shim})
        self.assertEqual(rc, 0, err)
        self.assertIn(self.WARNING, err)
        rc, out, err = run_binary("--check-config")
        self.assertEqual(rc, 0, err)
        self.assertNotIn(self.WARNING, err)


class StartupErrors(unittest.TestCase):
    """Each bad configuration: exit 1 and one error line naming what is wrong."""

    def start_with(self, config_text):
        with tempfile.TemporaryDirectory(prefix="embedscope-httptest-") as tmp:
            path = os.path.join(tmp, "bad.json")
            with open(path, "w") as f:
                f.write(config_text if isinstance(config_text, str) else json.dumps(config_text))
            rc, out, err = run_binary("--config", path, "--listen", "127.0.0.1:0")
        self.assertEqual(rc, 1, err)
        lines = error_lines(err)
        self.assertEqual(len(lines), 1, err)
        self.assertNotIn("listening", err)
        return lines[0]

    def test_bad_values_name_the_key_path(self):
        cases = [({"server": {"threads": 0}, "models": SMALL_MODEL}, "server.threads"),
                 ({"limits": {"max_k": "many"}, "models": SMALL_MODEL}, "limits.max_k"),
                 ({"bogus": 1, "models": SMALL_MODEL}, "bogus"),
                 ({"models": {"m": {"matrices": {"pe": {"generator": "sinusoidal", "n_positions": 16,
                                                        "d_model": 7}}}}}, "models.m.matrices.pe.d_model"),
                 ({"models": SMALL_MODEL, "warm": [{"matrix": "m/pe", "center": "sideways"}]}, "warm[0].center"),
                 ({"models": SMALL_MODEL, "warm": [{"matrix": "m/nope", "center": "none"}]}, "warm[0]"),
                 ({"models": {}}, "models"),
                 ('{"models": {"m": {"matrices": {}}}, "models": {}}', "models")]
        for config, key in cases:
            with self.subTest(key):
                self.assertIn(key, self.start_with(config))

    def test_syntax_error_names_the_position(self):
        self.assertIn("line 1", self.start_with('{"models": '))

    def test_missing_matrix_file_names_the_file(self):
        line = self.start_with({"data_dir": DATA, "models": {"m": {"matrices": {"x": {"file": "nope/missing.npy"}}}}})
        self.assertIn("models.m.matrices.x.file", line)
        self.assertIn(os.path.join(DATA, "nope/missing.npy"), line)

    def test_wrong_tensor_in_a_real_file(self):
        line = self.start_with({"data_dir": DATA,
                                "models": {"m": {"matrices": {"x": {"file": "gpt2-small/wpe.npy", "tensor": "t"}}}}})
        self.assertIn("models.m.matrices.x.tensor", line)

    def test_missing_config_file_names_it(self):
        rc, out, err = run_binary("--config", "/nonexistent/embedscope.json")
        self.assertEqual(rc, 1)
        self.assertEqual(len(error_lines(err)), 1, err)
        self.assertIn("/nonexistent/embedscope.json", err)

    def test_address_in_use(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            s.listen()
            port = s.getsockname()[1]
            with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
                json.dump({"models": SMALL_MODEL}, f)
                f.flush()
                rc, out, err = run_binary("--config", f.name, "--listen", "127.0.0.1:%d" % port)
        self.assertEqual(rc, 1, err)
        # Issue 10: the log said "Failed to bind to port 0"; now the address and errno text.
        self.assertIn("127.0.0.1:%d" % port, err)
        self.assertIn("Address already in use", err)
        self.assertNotIn("port 0", err)


class Listen(unittest.TestCase):
    def test_listen_on_a_given_port(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        daemon = Daemon({"models": SMALL_MODEL}, listen="127.0.0.1:%d" % port)
        try:
            self.assertEqual(daemon.port, port)
            r, doc = get_json("/healthz", base="http://127.0.0.1:%d" % port)
            self.assertEqual((r.status, doc), (200, {"status": "ok"}))
            _, doc = get_json("/v1/models", base=daemon.base)
            self.assertEqual(doc["config"], daemon.config_path)
            self.assertEqual([m["name"] for m in doc["models"]], ["m"])
        finally:
            log = daemon.close(signal.SIGINT)
        self.assertIn("shutting down (Interrupt)", log)
        self.assertIn("loaded m/pe 16x8", log)
        self.assertIn("ready (0 decompositions warmed", log)


class Threads(unittest.TestCase):
    """HTTP threads follow the cores the daemon may use unless configured: 2, or
    1 under taskset -c 0; --threads and server.threads win; compute threads
    follow the cores too, and the BLAS threads ("auto") share them."""

    def threads_logged(self, config=None, args=(), prefix=()):
        daemon = Daemon(config, args=args, prefix=prefix, blas_threads=None)
        try:
            line = re.search(r"listening on \S+ \(http threads (\d+), compute threads (\d+) x blas threads "
                             r"(?:(\d+)|auto \((\d+) cores shared\))", daemon.log())
        finally:
            daemon.close()
        self.assertIsNotNone(line)
        http, compute, fixed, shared = line.groups()
        return int(http), int(compute), int(fixed) if fixed else "auto of %s" % shared

    def test_one_core(self):
        cpu = str(min(os.sched_getaffinity(0)))
        self.assertEqual(self.threads_logged(prefix=("taskset", "-c", cpu)), (1, 1, "auto of 1"))
        self.assertEqual(self.threads_logged(args=("--threads", "3"), prefix=("taskset", "-c", cpu))[0], 3)
        config = {"server": {"threads": 4}, "models": SMALL_MODEL}
        self.assertEqual(self.threads_logged(config, prefix=("taskset", "-c", cpu))[0], 4)

    def test_every_core(self):
        cores = len(os.sched_getaffinity(0))
        self.assertEqual(self.threads_logged(), (min(2, cores), cores, "auto of %d" % cores))

    def test_fixed_blas_threads(self):
        cores = len(os.sched_getaffinity(0))
        config = {"server": {"blas_threads": 1}, "models": SMALL_MODEL}
        self.assertEqual(self.threads_logged(config), (min(2, cores), cores, 1))


class Warming(unittest.TestCase):
    """A daemon warming three ~1 s decompositions: what it answered right after it started
    listening (recorded in setUpClass), then once ready."""

    @classmethod
    def setUpClass(cls):
        warm = [{"matrix": "b/g", "center": c} for c in ("none", "columns", "rows")]
        cls.daemon = Daemon({"models": GAUSSIAN, "warm": warm})
        cls.early_readyz = request("/readyz", base=cls.daemon.base)
        cls.early_healthz = request("/healthz", base=cls.daemon.base)
        cls.early_metrics = metrics(cls.daemon.base)

    @classmethod
    def tearDownClass(cls):
        log = cls.daemon.close()
        assert log.count("warmed b/g") == 3 and "ready (3 decompositions warmed" in log, log

    def test_readyz_is_503_problem_while_warming(self):
        r = self.early_readyz
        self.assertEqual(r.status, 503)
        self.assertEqual(r.header("Content-Type"), "application/problem+json")
        self.assertEqual(r.header("Cache-Control"), "no-store")
        doc = r.json()
        self.assertEqual((doc["type"], doc["status"], doc["instance"]), ("/problems/not-ready", 503, "/readyz"))
        self.assertTrue(doc["title"] and doc["detail"])
        self.assertEqual(self.early_healthz.status, 200)
        self.assertEqual(self.early_metrics["embedscope_ready"], 0)

    def test_not_ready_problem_carries_the_request_id(self):
        """The 503 document of /readyz carries the request id, like every other problem."""
        self.assertEqual(self.early_readyz.json().get("request_id"), self.early_readyz.header("X-Request-Id"))

    def test_ready_once_warm(self):
        self.daemon.wait_ready()
        self.assertEqual(get_json("/readyz", base=self.daemon.base)[1], {"status": "ready"})
        m = metrics(self.daemon.base)
        self.assertEqual((m["embedscope_ready"], m["embedscope_svd_computations_total"]), (1, 3))


class Signals(unittest.TestCase):
    SPECTRUM = "/v1/models/b/matrices/g/spectrum?center=none&rows="

    @staticmethod
    def wait_metrics(daemon, done, timeout=HANG_S):
        deadline = time.monotonic() + timeout
        while not done(metrics(daemon.base)):
            if time.monotonic() > deadline:
                raise AssertionError("metrics never satisfied the condition:\n" + daemon.log())
            time.sleep(0.005)

    def start_request(self, daemon, rows):
        """An uncached ~1 s decomposition on its own connection (the reply is read later), answered
        synchronously however long a loaded machine makes it wait (Prefer: wait, not sync_seconds)."""
        conn = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=HANG_S)
        conn.request("GET", self.SPECTRUM + rows, headers=SYNC)
        return conn

    def test_sigterm_finishes_the_running_and_the_queued_job(self):
        """One compute thread: the first request computes, the second waits in the queue when SIGTERM
        arrives; both are answered in full, then the daemon exits 0."""
        daemon = Daemon({"models": GAUSSIAN}, args=("--threads", "4", "--compute-threads", "1"))
        try:
            running = self.start_request(daemon, "")
            self.wait_metrics(daemon, lambda m: m["embedscope_compute_jobs_running"] == 1)
            queued = self.start_request(daemon, "1:")
            self.wait_metrics(daemon, lambda m: m["embedscope_compute_queue_depth"] == 1)
            daemon.proc.send_signal(signal.SIGTERM)
            replies = []
            for conn in (running, queued):
                reply = conn.getresponse()
                replies.append((reply.status, reply.read()))
                conn.close()
        finally:
            log = daemon.close()
        self.assertEqual([status for status, _ in replies], [200, 200])
        s = json.loads(replies[0][1])["singular_values"]  # the generator's exact values scale * (j+1)^-decay
        self.assertEqual(len(s), 768)
        self.assertAlmostEqual(s[0], 1.0, places=9)
        self.assertAlmostEqual(s[99], 0.01, places=9)
        self.assertEqual(json.loads(replies[1][1])["input"]["matrix"]["rows"], "1:4096")
        self.assertIn("shutting down (Terminated)", log)
        self.assertLess(log.index("shutting down"), log.rindex("GET " + self.SPECTRUM + "1: 200"))
        self.assertIn("stopped", log)

    def test_sigint_exits_0_and_refuses_new_connections(self):
        daemon = Daemon({"models": SMALL_MODEL})
        port = daemon.port
        log = daemon.close(signal.SIGINT)
        self.assertIn("shutting down (Interrupt)", log)
        with self.assertRaises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()


if __name__ == "__main__":
    unittest.main()


class FifosInUploadsDir(unittest.TestCase):
    def test_fifo_as_the_uploads_manifest_is_refused_at_once(self):
        """A FIFO as uploads.dir/manifest.json: the start fails at once naming it (the uploads it
        should list cannot be restored), never waiting for a writer."""
        with tempfile.TemporaryDirectory(prefix="embedscope-fifo-") as tmp:
            uploads = os.path.join(tmp, "uploads")
            os.mkdir(uploads)
            os.mkfifo(os.path.join(uploads, "manifest.json"))
            config = os.path.join(tmp, "config.json")
            with open(config, "w") as f:
                json.dump({"data_dir": DATA, "uploads": {"dir": uploads},
                           "models": {"m": {"matrices": {"pe": {"generator": "sinusoidal", "n_positions": 8,
                                                                "d_model": 4}}}}}, f)
            # a blocking open would never return: run_binary's limit (HANG_S) fails it, no clock needed
            rc, out, err = run_binary("--config", config, "--listen", "127.0.0.1:0")
        self.assertNotEqual(rc, 0)
        self.assertIn("manifest.json: not a regular file", err)

    def test_fifos_in_the_uploads_directory_never_block(self):
        """A FIFO as a record or as the generation counter: the daemon starts and stops at once, skips
        the record with a warning, and a write answers (refused: the counter cannot be written) instead
        of waiting for a reader."""
        with tempfile.TemporaryDirectory(prefix="embedscope-fifo-") as tmp:
            uploads = os.path.join(tmp, "uploads")
            os.makedirs(os.path.join(uploads, "records"))
            os.mkfifo(os.path.join(uploads, "records", "m+x.json"))
            os.mkfifo(os.path.join(uploads, "generation"))
            t0 = time.monotonic()
            d = Daemon({"data_dir": DATA, "uploads": {"dir": uploads},
                        "models": {"m": {"matrices": {"pe": {"generator": "sinusoidal", "n_positions": 8,
                                                             "d_model": 4}}}}})
            d.wait_ready()
            ready = time.monotonic() - t0
            r = request("/v1/models/u/matrices/g", method="PUT", headers={"Content-Type": "application/json"},
                        body=json.dumps({"generator": "sinusoidal", "n_positions": 8, "d_model": 4}).encode(),
                        base=d.base)
            t1 = time.monotonic()
            log = d.close()
            print("  FIFOs in uploads.dir: ready in %.1f s, a write answered %d, stopped in %.1f s" %
                  (ready, r.status, time.monotonic() - t1))
        # a blocked open never returns: HANG_S tells a hang from a loaded machine's slow start (a 20 s
        # bound failed at load 40 with nothing blocked)
        self.assertLess(ready, HANG_S)
        self.assertLess(time.monotonic() - t1, HANG_S)
        self.assertEqual(r.status, 500, r.body)
        self.assertEqual(json.loads(r.body)["type"], "/problems/internal-error")
        self.assertRegex(log, r"record .*m\+x\.json skipped \(.*not a regular file")


class WarmRestart(unittest.TestCase):
    """server.cache_dir keeps converted copies of the configured tensors: a restart
    with unchanged data files maps them (the log says so) and answers byte for
    byte as before; a changed file is read and hashed again; a corrupt copy is
    logged, deleted and rebuilt, never served."""

    ROWS = "/v1/models/m/matrices/%s/rows?rows=0:4&format=npy"

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory(prefix="embedscope-warm-")
        self.data = os.path.join(self.dir.name, "data")
        os.mkdir(self.data)
        for name in ("wpe.npy", "h0_c_proj.npy"):
            with open(os.path.join(DATA, "gpt2-small", name), "rb") as f, \
                    open(os.path.join(self.data, name), "wb") as g:
                g.write(f.read())
        self.cache = os.path.join(self.dir.name, "cache")
        time.sleep(2.2)  # older than the settle time (ES_TC_SETTLE_NS): their stamps may be recorded

    def tearDown(self):
        self.dir.cleanup()

    def run_once(self):
        """(log, {matrix: (sha256, rows body)}) of one start and stop."""
        config = {"data_dir": self.data, "server": {"cache_dir": self.cache},
                  "models": {"m": {"matrices": {"wpe": {"file": "wpe.npy"},
                                                "o": {"file": "h0_c_proj.npy", "model_axis": "columns"}}}}}
        d = Daemon(config)
        d.wait_ready()
        out = {}
        for name in ("wpe", "o"):
            out[name] = (get_json("/v1/models/m/matrices/" + name, base=d.base)[1]["provenance"]["sha256"],
                         request(self.ROWS % name, base=d.base).body)
        return d.close(), out

    def cache_files(self, suffix):
        return sorted(f for f in os.listdir(self.cache) if f.endswith(suffix))

    def test_restart_maps_copies_and_rereads_changed_files(self):
        log, first = self.run_once()
        self.assertNotIn("converted copy", log)
        # float32 sources: their copies are floats (.f32), not doubles, 4 bytes an element
        self.assertEqual((len(self.cache_files(".f32")), len(self.cache_files(".tensor"))), (2, 2))
        self.assertEqual(self.cache_files(".f64"), [])
        sizes = sorted(os.path.getsize(os.path.join(self.cache, n)) for n in self.cache_files(".f32"))
        self.assertEqual([s - s % 4096 for s in sizes], [768 * 768 * 4, 1024 * 768 * 4])
        log, again = self.run_once()
        self.assertEqual(log.count("(its converted copy in cache_dir)"), 2, log)
        self.assertEqual(again, first)
        # a different value, same size: the stamp changes, the file is read and hashed again
        path = os.path.join(self.data, "wpe.npy")
        with open(path, "r+b") as f:
            f.seek(-4, os.SEEK_END)
            f.write(b"\x00\x00\x80\x3f")
        log, changed = self.run_once()
        self.assertEqual(log.count("(its converted copy in cache_dir)"), 1, log)
        self.assertEqual(changed["o"], first["o"])
        self.assertNotEqual(changed["wpe"][0], first["wpe"][0])
        with open(path, "rb") as f:
            raw = f.read()
        self.assertEqual(changed["wpe"][0], hashlib.sha256(raw[len(raw) - 1024 * 768 * 4:]).hexdigest())

    def test_corrupt_copy_is_rebuilt_never_served(self):
        _, first = self.run_once()
        for name in self.cache_files(".f32"):
            p = os.path.join(self.cache, name)
            with open(p, "r+b") as f:
                f.seek(os.path.getsize(p) // 2)
                f.write(b"\xff\xff\xff\x7f")  # a NaN in the floats
        log, again = self.run_once()
        self.assertEqual(log.count("checksum mismatch"), 2, log)
        self.assertEqual(log.count("deleting it and reading the source again"), 2, log)
        self.assertNotIn("converted copy", log)
        self.assertEqual(again, first)
        log, third = self.run_once()  # rebuilt: mapped again
        self.assertEqual(log.count("(its converted copy in cache_dir)"), 2, log)
        self.assertEqual(third, first)

    SPECTRUM = "/v1/models/m/matrices/wpe/spectrum?center=columns"

    @staticmethod
    def numbers(reply):
        """A JSON answer without its input block (which says how the decomposition ran: its thread count
        may differ between two starts)."""
        doc = json.loads(reply.body)
        doc.pop("input", None)
        return doc

    def start(self):
        config = {"data_dir": self.data, "server": {"cache_dir": self.cache},
                  "models": {"m": {"matrices": {"wpe": {"file": "wpe.npy"},
                                                "o": {"file": "h0_c_proj.npy", "model_axis": "columns"}}}}}
        d = Daemon(config)
        d.wait_ready(timeout=HANG_S)
        return d

    def test_fifos_in_cache_dir_are_refused_at_once(self):
        """A FIFO in place of any file of cache_dir (a record, a converted copy, a decomposition) is
        refused at once, deleted and rebuilt: never opened for a read that waits for a writer."""
        d = self.start()
        want = (request(self.ROWS % "wpe", base=d.base).body, self.numbers(request(self.SPECTRUM, base=d.base)))
        d.close()
        looked_up = self.cache_files(".tensor") + self.cache_files(".svd")  # a refused record hides its copy
        names = looked_up + self.cache_files(".f32")
        self.assertEqual(len(self.cache_files(".svd")), 1)
        for name in names:
            os.unlink(os.path.join(self.cache, name))
            os.mkfifo(os.path.join(self.cache, name))
        t0 = time.monotonic()
        d = self.start()
        got = (request(self.ROWS % "wpe", base=d.base, timeout=HANG_S).body,
               self.numbers(request(self.SPECTRUM, base=d.base, timeout=HANG_S)))
        t1 = time.monotonic()
        log = d.close()
        print("  FIFOs in cache_dir: ready and answered in %.1f s, stopped in %.1f s" % (t1 - t0, time.monotonic() - t1))
        self.assertLess(time.monotonic() - t1, HANG_S)
        self.assertEqual(got, want)
        self.assertEqual(log.count("not a regular file"), len(looked_up), log)
        for name in names:
            self.assertFalse(stat.S_ISFIFO(os.stat(os.path.join(self.cache, name)).st_mode), name)

    def test_copies_truncated_or_edited_under_a_running_daemon(self):
        """The converted copies are read into the daemon's own read-only memory once verified, never
        mapped: truncating one (a SIGBUS under a map) or editing one in place while the daemon runs
        changes no answer, and the next start finds the damage by its checksum and rebuilds."""
        self.start().close()
        d = self.start()  # from the copies
        want = (request(self.ROWS % "wpe", base=d.base).body, request(self.ROWS % "o", base=d.base).body)
        wpe_copy, o_copy = sorted(self.cache_files(".f32"), key=lambda n: os.path.getsize(os.path.join(self.cache, n)),
                                  reverse=True)
        os.truncate(os.path.join(self.cache, wpe_copy), 4096)
        with open(os.path.join(self.cache, o_copy), "r+b") as f:
            f.seek(4096)
            f.write(b"\x00\x00\x80\x7f" * 1024)  # infinities over the first rows
        got = (request(self.ROWS % "wpe", base=d.base).body, request(self.ROWS % "o", base=d.base).body)
        spectrum = request(self.SPECTRUM, base=d.base, timeout=HANG_S)
        log = d.close()
        self.assertEqual(got, want)
        self.assertEqual(spectrum.status, 200, spectrum.body[:300])
        self.assertIn("(its converted copy in cache_dir)", log)
        d = self.start()
        again = (request(self.ROWS % "wpe", base=d.base).body, request(self.ROWS % "o", base=d.base).body)
        log = d.close()
        self.assertEqual(again, want)
        self.assertEqual(log.count("deleting it and reading the source again"), 2, log)
