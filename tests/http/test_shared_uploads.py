"""Three daemons (plain processes) on one uploads.dir and one cache_dir: 300
random PUT / DELETE / GET spread over them while a chaos thread kills random
daemons with SIGKILL at random moments and starts them again. Afterwards every
daemon lists the same catalogue (same body, same ETag); each matrix is in a
state its history allows (the last acknowledged write, or a write whose answer
was lost with its daemon: never a refused one, never a mix); every record
rebuilds and no file is left that no record names; and every number served
equals a fresh computation from the data (docs/operations.md, "The upload
directory")."""
import json
import math
import os
import random
import signal
import struct
import tempfile
import threading
import time
import unittest

from httpkit import DATA, SANITIZER_REPORT, Daemon, metrics, request

SEED = int(os.environ.get("EMBEDSCOPE_CHAOS_SEED", "20261126"))
# make test's ASan+UBSan run sets a shorter workload (the Makefile's HTTP_SAN_SHORT); the normal run, 300.
OPS = int(os.environ.get("EMBEDSCOPE_CHAOS_OPS", "300"))
KEYS = ["k%d" % i for i in range(9)]
ROWS, COLS = 5, 3


def npy_of(matrix):
    header = "{'descr': '<f8', 'fortran_order': False, 'shape': (%d, %d), }" % (len(matrix), len(matrix[0]))
    text = header + " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    data = b"".join(struct.pack("<%dd" % len(r), *r) for r in matrix)
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text.encode("latin1") + data


def singular_values(matrix):
    """Singular values of the column-centred matrix by one-sided (Hestenes) Jacobi, independent of the
    daemon's LAPACK and accurate to about eps x the largest, zeros included; largest first."""
    n, d = len(matrix), len(matrix[0])
    means = [sum(r[j] for r in matrix) / n for j in range(d)]
    cols = [[r[j] - means[j] for r in matrix] for j in range(d)]
    for _ in range(60):
        rotated = False
        for p in range(d):
            for q in range(p + 1, d):
                alpha = sum(x * x for x in cols[p])
                beta = sum(x * x for x in cols[q])
                gamma = sum(x * y for x, y in zip(cols[p], cols[q]))
                if abs(gamma) <= 1e-17 * math.sqrt(alpha * beta) or gamma == 0:
                    continue
                rotated = True
                zeta = (beta - alpha) / (2 * gamma)
                t = math.copysign(1.0, zeta) / (abs(zeta) + math.sqrt(1 + zeta * zeta))
                c = 1 / math.sqrt(1 + t * t)
                s = c * t
                cols[p], cols[q] = ([c * x - s * y for x, y in zip(cols[p], cols[q])],
                                    [s * x + c * y for x, y in zip(cols[p], cols[q])])
        if not rotated:
            break
    return sorted((math.sqrt(sum(x * x for x in col)) for col in cols), reverse=True)[:min(n, d)]


class Cluster:
    """Three daemons on one configuration file (replicas list its path); slot i can be killed and started
    again."""

    def __init__(self, config_path, n=3):
        self.args = ("--config", config_path)
        self.lock = threading.Lock()
        self.n = n
        self.daemons = [Daemon(None, args=self.args) for _ in range(n)]
        self.kills = 0
        self.reports = []  # sanitizer reports in the logs of killed daemons

    def base(self, i):
        with self.lock:
            return self.daemons[i].base

    def kill_and_restart(self, i):
        with self.lock:
            old = self.daemons[i]
        old.proc.send_signal(signal.SIGKILL)
        old.proc.wait()
        log = old.log()
        old.dir.cleanup()
        if SANITIZER_REPORT.search(log):
            self.reports.append(log[-4000:])
        fresh = Daemon(None, args=self.args)
        with self.lock:
            self.daemons[i] = fresh
            self.kills += 1

    def close(self):
        for d in self.daemons:
            d.close()


class History:
    """What may be in each key: the set of states its history allows. A state is None (absent) or a
    frozenset of the matrices it may hold (one for a file, those of its base's possible values for a view)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.allowed = {k: {None} for k in KEYS}
        self.ever = {k: set() for k in KEYS}  # every matrix a key may ever have held
        self.acked = self.refused = self.lost = 0

    def outcome(self, key, state, status):
        with self.lock:
            if status is None:  # the daemon died: the write may or may not have happened
                self.allowed[key].add(state)
                self.lost += 1
            elif status in (200, 201, 204):
                self.allowed[key] = {state}
                self.acked += 1
            elif status == 404 and state is None:  # DELETE of an absent matrix
                self.allowed[key] = {None}
            else:
                self.refused += 1
            if state is not None and status in (200, 201, None):
                self.ever[key] |= state


def call(base, path, **kw):
    """The status of a request, or None if the daemon vanished before answering."""
    try:
        r = request(path, base=base, timeout=30, **kw)
        return r.status, r
    except OSError:
        return None, None


class SharedUploads(unittest.TestCase):
    """The workload and its checks; tests/deploy/podman_chaos.py runs them on replicas under podman
    behind nginx (a cluster with n, base(i), kill_and_restart(i), kills and reports; its own send,
    write_base, read_bases and chaos)."""
    OPS = OPS
    AUTH = {}  # headers every write carries (the upload token)
    PAUSE = 0.12  # the longest pause before each request: the workload's spread over time

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="embedscope-shared-")
        keep, cache, bodies = (os.path.join(self.tmp.name, d) for d in ("keep", "cache", "bodies"))
        for d in (cache, bodies):
            os.mkdir(d)
        self.keep = keep
        config = {"models": {"c": {"matrices": {"pe": {"generator": "sinusoidal", "n_positions": 64,
                                                        "d_model": 16}}}},
                  "server": {"cache_dir": cache}, "uploads": {"dir": keep, "tmp_dir": bodies}}
        config_path = os.path.join(self.tmp.name, "config.json")
        with open(config_path, "w") as f:
            json.dump(dict(config, data_dir=DATA), f)
        self.cluster = Cluster(config_path)
        self.rng = random.Random(SEED)
        # a small pool of contents: the same bytes under several keys share one file
        self.pool = [tuple(tuple(float(self.rng.randint(-9, 9)) for _ in range(COLS)) for _ in range(ROWS))
                     for _ in range(6)]
        self.history = History()
        self.in_flight = None  # the slot a worker last sent a request to

    def send(self, base, path, headers=None, **kw):
        """call() with the write headers."""
        return call(base, path, headers=dict(self.AUTH, **(headers or {})), **kw)

    def write_base(self, slot):
        """Where the workload sends a request meant for slot."""
        return self.cluster.base(slot)

    def read_bases(self):
        """Every address whose answers the final checks compare."""
        return [self.cluster.base(i) for i in range(self.cluster.n)]

    def tearDown(self):
        self.cluster.close()
        self.tmp.cleanup()

    def worker(self, w, ops, failures):
        rng = random.Random(SEED * 31 + w)
        mine = KEYS[w::3]  # each key has one writer, so its history is a sequence
        for _ in range(ops):
            time.sleep(rng.uniform(0, self.PAUSE))  # spread over seconds, so that kills land among them
            key = rng.choice(mine)
            slot = rng.randrange(self.cluster.n)
            base = self.write_base(slot)
            self.in_flight = slot
            path = "/v1/models/s/matrices/" + key
            roll = rng.random()
            if roll < 0.45:
                matrix = rng.choice(self.pool)
                status, _ = self.send(base, path, method="PUT", body=npy_of(matrix),
                                 headers={"Content-Type": "application/x-npy"})
                self.history.outcome(key, frozenset([matrix]), status)
            elif roll < 0.65:
                target = rng.choice(KEYS)
                with self.history.lock:
                    candidates = frozenset(m[:3] for m in self.history.ever[target]) if target != key else None
                if not candidates:
                    continue
                entry = {"view": "s/" + target, "rows": [0, 3]}
                status, _ = self.send(base, path, method="PUT", body=json.dumps(entry),
                                 headers={"Content-Type": "application/json"})
                self.history.outcome(key, candidates, status)
            elif roll < 0.8:
                status, _ = self.send(base, path, method="DELETE")
                self.history.outcome(key, None, status)
            else:
                status, r = self.send(base, path + "/rows")
                if status not in (200, 404, None):
                    failures.append(("GET", key, status, r.body[:200]))

    def chaos(self, stop):
        """Every 0.3 to 1.2 s kill a daemon: half the time the one a request was just sent to, a few
        milliseconds later (often inside its write), else any."""
        rng = random.Random(SEED * 7)
        while not stop.is_set():
            if stop.wait(rng.uniform(0.3, 1.2)):
                break
            if rng.random() < 0.5:
                self.in_flight = None
                deadline = time.monotonic() + 1
                while self.in_flight is None and time.monotonic() < deadline:
                    time.sleep(0.0005)
                time.sleep(rng.uniform(0, 0.004))
                slot = self.in_flight if self.in_flight is not None else rng.randrange(3)
            else:
                slot = rng.randrange(3)
            self.cluster.kill_and_restart(slot)

    def settle(self, timeout=10):
        """Until every daemon lists the same /v1/models (body and ETag); returns the listing."""
        deadline = time.monotonic() + timeout
        while True:
            replies = [request("/v1/models", base=b) for b in self.read_bases()]
            bodies = {(r.body, r.header("ETag")) for r in replies}
            if len(bodies) == 1 or time.monotonic() > deadline:
                self.assertEqual(len(bodies), 1, "the daemons list different catalogues:\n%s"
                                 % "\n".join(r.body.decode()[:3000] for r in replies))
                return json.loads(replies[0].body)
            time.sleep(0.1)

    def test_kill_9_while_three_daemons_write(self):
        stop, failures = threading.Event(), []
        workers = [threading.Thread(target=self.worker, args=(w, self.OPS // 3, failures)) for w in range(3)]
        chaos = threading.Thread(target=self.chaos, args=(stop,))
        t0 = time.monotonic()
        chaos.start()
        for t in workers:
            t.start()
        for t in workers:
            t.join()
        stop.set()
        chaos.join()
        h = self.history
        print("  %d ops in %.1f s: %d acknowledged, %d refused, %d lost with their daemon; %d kills"
              % (self.OPS, time.monotonic() - t0, h.acked, h.refused, h.lost, self.cluster.kills))
        self.assertEqual(failures, [])
        self.assertEqual(self.cluster.reports, [])
        self.assertGreater(self.cluster.kills, 0)
        self.assertGreater(h.acked, self.OPS // 3)
        # a last write through daemon 0 collects what killed writers left; the others converge on it
        marker = "/v1/models/s/matrices/marker"
        self.assertEqual(self.send(self.cluster.base(0), marker, method="PUT", body=npy_of(self.pool[0]),
                                   headers={"Content-Type": "application/x-npy"})[0], 201)
        self.assertEqual(self.send(self.cluster.base(1), marker, method="DELETE")[0], 204)
        listing = self.settle()
        listed = {m["name"]: [x["name"] for x in m["matrices"]] for m in listing["models"]}.get("s", [])
        for key in KEYS:
            with self.subTest(key=key):
                self.check_key(key, key in listed)
        self.check_directory(listed)

    def check_key(self, key, listed):
        allowed = self.history.allowed[key]
        path = "/v1/models/s/matrices/" + key
        if not listed:
            self.assertIn(None, allowed, "%s vanished: an acknowledged write is lost" % key)
            for b in self.read_bases():
                self.assertEqual(request(path, base=b).status, 404)
            return
        rows = [request(path + "/rows", base=b).json()["values"] for b in self.read_bases()]
        for other in rows[1:]:
            self.assertEqual(rows[0], other)
        data = tuple(tuple(r) for r in rows[0])
        self.assertTrue(any(s is not None and data in s for s in allowed),
                        "%s holds data no allowed state has: %s" % (key, data))
        want = singular_values(rows[0])
        for b in self.read_bases():
            got = request(path + "/spectrum", base=b).json()["singular_values"]
            self.assertEqual(len(got), len(want))
            for a, b in zip(got, want):
                self.assertLessEqual(abs(a - b), 1e-12 * max(want[0], 1.0), (key, got, want))

    def check_directory(self, listed):
        records = os.path.join(self.keep, "records")
        names = sorted(os.listdir(records))
        self.assertEqual(names, sorted("s+%s.json" % k for k in listed))
        used = set()
        for name in names:
            with open(os.path.join(records, name)) as f:
                rec = json.load(f)
            while rec:
                if "file" in rec:
                    used.add(rec["file"])
                rec = rec.get("base")
        blobs = {n for n in os.listdir(self.keep) if len(n) == 64}
        self.assertEqual(blobs, used, "files no record names, or records naming absent files")
        self.assertEqual([n for n in os.listdir(self.keep) + names if n.startswith(".")], [])

    def test_changes_are_seen_within_2_s_and_listings_agree(self):
        put_at, seen_at = self.cluster.base(0), self.cluster.base(1)
        path = "/v1/models/s/matrices/fresh"
        t0 = time.monotonic()
        self.assertEqual(self.send(put_at, path, method="PUT", body=npy_of(self.pool[1]),
                              headers={"Content-Type": "application/x-npy"})[0], 201)
        while request(path, base=seen_at).status != 200:
            self.assertLess(time.monotonic() - t0, 2.0, "another daemon did not list the upload within 2 s")
            time.sleep(0.02)
        t0 = time.monotonic()
        self.assertEqual(self.send(seen_at, path, method="DELETE")[0], 204)
        while request(path, base=put_at).status != 404:
            self.assertLess(time.monotonic() - t0, 2.0, "another daemon still lists the matrix after 2 s")
            time.sleep(0.02)
        self.settle(timeout=2)
        self.assertGreaterEqual(metrics(seen_at)["embedscope_upload_dir_syncs_total"], 1)
        self.assertGreaterEqual(metrics(put_at)["embedscope_upload_dir_syncs_total"], 1)
        # the listing's ETag is the content's: one daemon's validates the other's copy
        etag = request("/v1/models", base=put_at).header("ETag")
        self.assertEqual(request("/v1/models", headers={"If-None-Match": etag}, base=seen_at).status, 304)


if __name__ == "__main__":
    unittest.main()
