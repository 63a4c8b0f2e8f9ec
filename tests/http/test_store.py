"""The upload directory (uploads.dir) under failure and abuse: a refused write
changes nothing (a full disk: 507, nothing half-kept, the old data kept),
views of user matrices keep the data they were made from across restarts,
anonymous writes stop at a proxy, generators count by the memory they take,
bodies being received share a cap, descriptions are bounded, stale temporary
files go at start (docs/operations.md, "The upload directory")."""
import hashlib
import json
import os
import socket
import struct
import subprocess
import tempfile
import time
import unittest

import requests

from httpkit import Daemon, ProblemAssertions, metrics, request, settled_hashes
from test_uploads import CONFIG, F8_2x3, JSON, NPY, SIX, npy_bytes, put


def sha_of(base, path):
    r = request(path, base=base)
    return r.json()["provenance"]["sha256"] if r.status == 200 else r.status


def names(base, model):
    models = {m["name"]: m for m in request("/v1/models", base=base).json()["models"]}
    return [x["name"] for x in models[model]["matrices"]] if model in models else None


def big_npy(rows, cols, value=1.0):
    return npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (%d, %d), }" % (rows, cols),
                     struct.pack("<d", value) * (rows * cols))


def peak_rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM")


class StoreDaemon(ProblemAssertions):
    """A daemon on CONFIG with uploads.dir in its own temporary directory."""

    uploads = {}
    limits = {}

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="embedscope-store-")
        self.keep = os.path.join(self.tmp.name, "keep")
        self.bodies = os.path.join(self.tmp.name, "bodies")
        os.mkdir(self.bodies)
        self.start()

    def config(self):
        return dict(CONFIG, limits=dict(CONFIG["limits"], **self.limits),
                    uploads=dict({"dir": self.keep, "tmp_dir": self.bodies}, **self.uploads))

    def start(self):
        self.daemon = Daemon(self.config())
        self.base = self.daemon.base

    def restart(self):
        self.assertEqual(self.daemon.stop(), 0)
        self.daemon.close()
        self.start()
        settled_hashes(self.base)  # restored content files are hashed again in the background

    def tearDown(self):
        self.daemon.close()
        self.tmp.cleanup()


class FullDisk(StoreDaemon):
    """uploads.dir on a 20 MiB tmpfs filled to the last byte: three refused PUTs, a DELETE, a restart."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="embedscope-store-")
        self.mnt = os.path.join(self.tmp.name, "mnt")
        os.mkdir(self.mnt)
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=20m", "tmpfs", self.mnt], capture_output=True)
        if r.returncode != 0:
            self.tmp.cleanup()
            self.skipTest("cannot mount a tmpfs here: %s" % r.stderr.decode().strip())
        self.keep = os.path.join(self.mnt, "keep")
        self.bodies = os.path.join(self.tmp.name, "bodies")
        os.mkdir(self.bodies)
        self.start()

    def tearDown(self):
        self.daemon.close()
        subprocess.run(["umount", self.mnt])
        self.tmp.cleanup()

    def fill(self):
        """Fill the tmpfs to the last byte (unbuffered writes, the last ones one byte each)."""
        fd = os.open(os.path.join(self.mnt, "filler"), os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            for size in (65536, 1):
                try:
                    while True:
                        os.write(fd, b"\0" * size)
                except OSError:
                    pass
        finally:
            os.close(fd)

    def test_refused_writes_change_nothing(self):
        old = npy_bytes(F8_2x3, SIX)
        self.assertEqual(put(self.base, "/v1/models/k/matrices/f1", old).status, 201)
        self.assertEqual(put(self.base, "/v1/models/k/matrices/other", big_npy(3, 2)).status, 201)
        old_sha = sha_of(self.base, "/v1/models/k/matrices/f1")
        listing = request("/v1/models", base=self.base).body
        self.fill()
        entry = json.dumps({"generator": "rope", "n_positions": 8, "d_model": 4})
        for path, body, headers in (("/v1/models/k/matrices/f1", big_npy(64, 64, 2.0), NPY),
                                    ("/v1/models/k/matrices/new1", big_npy(64, 64, 3.0), NPY),
                                    ("/v1/models/k/matrices/new2", entry, JSON)):
            r, doc = self.assert_problem(path, 507, slug="insufficient-storage", method="PUT", body=body,
                                         headers=headers)
            self.assertEqual(doc["limit"], "uploads.dir")
            self.assertNotIn(self.mnt, json.dumps(doc))
            # the live catalogue is unchanged
            self.assertEqual(sha_of(self.base, "/v1/models/k/matrices/f1"), old_sha)
            self.assertEqual(request("/v1/models", base=self.base).body, listing)
        self.assertIn(self.mnt, self.daemon.log())  # the operator's log names the path
        self.assertEqual(request("/v1/models/k/matrices/other", method="DELETE", base=self.base).status, 204)
        self.assertEqual(names(self.base, "k"), ["f1"])
        self.restart()
        self.assertEqual(sha_of(self.base, "/v1/models/k/matrices/f1"), old_sha)
        self.assertEqual(names(self.base, "k"), ["f1"])
        for gone in ("new1", "new2", "other"):
            self.assertEqual(request("/v1/models/k/matrices/" + gone, base=self.base).status, 404, gone)
        self.assertEqual(os.listdir(os.path.join(self.keep, "records")), ["k+f1.json"])
        blobs = [n for n in os.listdir(self.keep) if len(n) == 64]
        self.assertEqual(len(blobs), 1)  # f1's file; other's went with its record
        self.assertEqual([n for n in os.listdir(self.keep) if n.startswith(".")], [])
        # room again: the same PUT now succeeds
        os.unlink(os.path.join(self.mnt, "filler"))
        self.assertEqual(put(self.base, "/v1/models/k/matrices/f1", big_npy(64, 64, 2.0)).status, 200)


class Views(StoreDaemon):
    """A view keeps the data of its base as it was when the view was made."""

    def pca(self, path):
        r = request(path + "/pca?k=2", base=self.base)
        self.assertEqual(r.status, 200, r.body[:300])
        doc = r.json()
        return doc["input"]["matrix"]["sha256"], {k: v for k, v in doc.items() if k != "input"}

    def test_view_of_a_replaced_base_survives_a_restart(self):
        a = json.dumps({"generator": "sinusoidal", "n_positions": 16, "d_model": 8})
        b = json.dumps({"generator": "rope", "n_positions": 16, "d_model": 8, "base": 100})
        self.assertEqual(put(self.base, "/v1/models/v/matrices/base", a, JSON).status, 201)
        view = json.dumps({"view": "base", "rows": [0, 12], "description": "first 12"})
        self.assertEqual(put(self.base, "/v1/models/v/matrices/head", view, JSON).status, 201)
        before = self.pca("/v1/models/v/matrices/head")
        self.assertEqual(put(self.base, "/v1/models/v/matrices/base", b, JSON).status, 200)
        self.assertEqual(self.pca("/v1/models/v/matrices/head"), before)
        # a view of the view, made after the replacement, keeps the chain
        self.assertEqual(put(self.base, "/v1/models/w/matrices/top", json.dumps({"view": "v/head", "rows": [0, 6]}),
                             JSON).status, 201)
        top = self.pca("/v1/models/w/matrices/top")
        base_now = sha_of(self.base, "/v1/models/v/matrices/base")
        self.restart()
        self.assertEqual(self.pca("/v1/models/v/matrices/head"), before)
        self.assertEqual(self.pca("/v1/models/w/matrices/top"), top)
        self.assertEqual(sha_of(self.base, "/v1/models/v/matrices/base"), base_now)
        self.assertEqual(request("/v1/models/v/matrices/head", base=self.base).json()["description"], "first 12")

    def test_view_of_a_deleted_file_keeps_the_file(self):
        body = big_npy(6, 4, 0.5)[:-8 * 24] + struct.pack("<24d", *[(i * 7) % 11 - 5 for i in range(24)])
        r = put(self.base, "/v1/models/f/matrices/base", body)
        self.assertEqual(r.status, 201)
        blob = r.json()["provenance"]["file_sha256"]
        self.assertEqual(put(self.base, "/v1/models/f/matrices/view", json.dumps({"view": "f/base"}), JSON).status, 201)
        before = self.pca("/v1/models/f/matrices/view")
        self.assertEqual(request("/v1/models/f/matrices/base", method="DELETE", base=self.base).status, 204)
        self.assertIn(blob, os.listdir(self.keep))  # the view's record names it
        self.assertEqual(self.pca("/v1/models/f/matrices/view"), before)
        self.restart()
        self.assertEqual(self.pca("/v1/models/f/matrices/view"), before)
        self.assertEqual(request("/v1/models/f/matrices/base", base=self.base).status, 404)
        self.assertEqual(request("/v1/models/f/matrices/view", method="DELETE", base=self.base).status, 204)
        self.assertNotIn(blob, os.listdir(self.keep))  # no record names it any more

    def test_a_view_cannot_name_itself(self):
        for target in ("v/self", "self"):
            self.assert_problem("/v1/models/v/matrices/self", 400, param="view", method="PUT",
                                body=json.dumps({"view": target}), headers=JSON)
        entry = json.dumps({"generator": "rope", "n_positions": 8, "d_model": 4})
        self.assertEqual(put(self.base, "/v1/models/v/matrices/self", entry, JSON).status, 201)
        sha = sha_of(self.base, "/v1/models/v/matrices/self")
        r, doc = self.assert_problem("/v1/models/v/matrices/self", 400, param="view", method="PUT",
                                     body=json.dumps({"view": "v/self", "rows": [0, 4]}), headers=JSON)
        self.assertIn("itself", doc["detail"])
        self.assertEqual(sha_of(self.base, "/v1/models/v/matrices/self"), sha)


class DamagedContentFiles(StoreDaemon):
    """A content file (uploads.dir/<sha256>: an upload's bytes, or labels) is reused for the same content only
    when its size and sha256 match its name (issue 29 §6): a damaged or truncated one is written again, where
    trusting the name answered 201 and left a record naming bytes no restart could load."""

    BODY = big_npy(6, 4, 0.5)[:-8 * 24] + struct.pack("<24d", *[(i * 5) % 13 - 6 for i in range(24)])
    LABELS = "word\tkind\n" + "".join("w%d\tk%d\n" % (i, i % 2) for i in range(6))

    def damage(self, path, how):
        with open(path, "r+b") as f:
            if how == "truncated":
                f.truncate(os.path.getsize(path) // 2)
            else:  # the same size, one byte changed
                f.seek(os.path.getsize(path) - 3)
                byte = f.read(1)
                f.seek(-1, os.SEEK_CUR)
                f.write(bytes([byte[0] ^ 0x55]))

    def intact(self, name):
        with open(os.path.join(self.keep, name), "rb") as f:
            return hashlib.sha256(f.read()).hexdigest() == name

    def test_a_damaged_upload_file_is_written_again(self):
        for n, how in enumerate(("truncated", "changed")):
            with self.subTest(how):
                first, second = "/v1/models/d/matrices/a%d" % n, "/v1/models/d/matrices/b%d" % n
                r = put(self.base, first, self.BODY)
                self.assertEqual(r.status, 201, r.body[:300])
                blob = r.json()["provenance"]["file_sha256"]
                values = request(first + "/cosine?row=1", base=self.base).json()["similarity"]
                self.damage(os.path.join(self.keep, blob), how)
                self.assertFalse(self.intact(blob))
                self.assertEqual(put(self.base, second, self.BODY).status, 201)
                self.assertTrue(self.intact(blob), "the damaged file was reused")
                self.restart()
                for path in (first, second):
                    r = request(path + "/cosine?row=1", base=self.base)
                    self.assertEqual(r.status, 200, r.body[:300])
                    self.assertEqual(r.json()["similarity"], values)

    def test_damaged_labels_are_written_again(self):
        tsv = {"Content-Type": "text/tab-separated-values"}
        first, second = "/v1/models/d/matrices/l1", "/v1/models/d/matrices/l2"
        for path in (first, second):
            self.assertEqual(put(self.base, path, self.BODY).status, 201)
        r = request(first + "/labels", method="PUT", body=self.LABELS, headers=tsv, base=self.base)
        self.assertLess(r.status, 300, r.body[:300])
        records = os.path.join(self.keep, "records")
        name = {json.load(open(os.path.join(records, f))).get("labels") for f in os.listdir(records)} - {None}
        self.assertEqual(len(name), 1)
        name = name.pop()
        self.damage(os.path.join(self.keep, name), "changed")
        r = request(second + "/labels", method="PUT", body=self.LABELS, headers=tsv, base=self.base)
        self.assertLess(r.status, 300, r.body[:300])
        self.assertTrue(self.intact(name), "the damaged labels were reused")
        self.restart()
        for path in (first, second):
            r = request(path + "/labels", base=self.base)
            self.assertEqual(r.status, 200, r.body[:300])
            self.assertEqual(r.json()["columns"]["word"], ["w%d" % i for i in range(6)])


class Proxied(StoreDaemon):
    """Loopback and no token: anonymous writes only from clients with no proxy in front."""

    def test_writes_through_a_proxy_need_the_token(self):
        entry = json.dumps({"generator": "rope", "n_positions": 8, "d_model": 4})
        for header in ({"X-Forwarded-For": "203.0.113.7"}, {"Forwarded": "for=203.0.113.7"},
                       {"X-Real-IP": "203.0.113.7"}):
            r, doc = self.assert_problem("/v1/models/p/matrices/a", 403, param="uploads.token", method="PUT",
                                         body=entry, headers=dict(JSON, **header))
            self.assertIn("EMBEDSCOPE_UPLOAD_TOKEN", doc["detail"])
            self.assert_problem("/v1/models/p/matrices/a", 403, param="uploads.token", method="DELETE",
                                headers=header)
        self.assertEqual(request("/v1/models/p/matrices/a", base=self.base).status, 404)
        # reads through the proxy are unaffected; a direct client may write
        self.assertEqual(request("/v1/models", headers={"X-Forwarded-For": "203.0.113.7"}, base=self.base).status, 200)
        self.assertEqual(put(self.base, "/v1/models/p/matrices/a", entry, JSON).status, 201)


class ProxiedWithToken(StoreDaemon):
    uploads = {"token": "s3cret"}

    def test_the_token_opens_writes_through_a_proxy(self):
        entry = json.dumps({"generator": "rope", "n_positions": 8, "d_model": 4})
        headers = dict(JSON, **{"X-Forwarded-For": "203.0.113.7"})
        self.assert_problem("/v1/models/p/matrices/a", 401, param="Authorization", method="PUT", body=entry,
                            headers=headers)
        r = put(self.base, "/v1/models/p/matrices/a", entry, dict(headers, Authorization="Bearer s3cret"))
        self.assertEqual(r.status, 201)


class ProxiedExplicitlyOpen(StoreDaemon):
    uploads = {"enabled": True}

    def test_enabled_true_is_the_explicit_decision(self):
        entry = json.dumps({"generator": "rope", "n_positions": 8, "d_model": 4})
        r = put(self.base, "/v1/models/p/matrices/a", entry, dict(JSON, **{"X-Forwarded-For": "203.0.113.7"}))
        self.assertEqual(r.status, 201)


class GeneratorQuota(StoreDaemon):
    """A 61-byte body asking for 512 MiB of doubles is refused before anything is allocated."""

    uploads = {"max_total_bytes": 64 << 20}
    limits = {"max_generated_elements": 1 << 26}

    def test_generator_counts_by_the_memory_it_takes(self):
        body = json.dumps({"generator": "sinusoidal", "n_positions": 8192, "d_model": 8192}, separators=(",", ":"))
        self.assertLessEqual(len(body), 61)
        before = peak_rss_kib(self.daemon.proc.pid)
        for _ in range(3):
            r, doc = self.assert_problem("/v1/models/g/matrices/big", 507, slug="insufficient-storage",
                                         method="PUT", body=body, headers=JSON)
            self.assertEqual(doc["limit"], "uploads.max_total_bytes")
            self.assertIn("536870912 bytes", doc["detail"])
        grown = peak_rss_kib(self.daemon.proc.pid) - before
        self.assertLess(grown, 64 << 10, "peak RSS grew by %d KiB" % grown)
        small = json.dumps({"generator": "sinusoidal", "n_positions": 1024, "d_model": 1024})  # 8 MiB
        self.assertEqual(put(self.base, "/v1/models/g/matrices/small", small, JSON).status, 201)


class Descriptions(StoreDaemon):
    def test_descriptions_are_bounded(self):
        entry = {"generator": "rope", "n_positions": 8, "d_model": 4, "description": "x" * 4097}
        r, doc = self.assert_problem("/v1/models/d/matrices/a", 400, param="description", method="PUT",
                                     body=json.dumps(entry), headers=JSON)
        self.assertIn("4096", doc["detail"])
        entry["description"] = "x" * 4096
        self.assertEqual(put(self.base, "/v1/models/d/matrices/a", json.dumps(entry), JSON).status, 201)


class PendingBodies(StoreDaemon):
    uploads = {"max_pending_bytes": 1 << 20}

    def test_unfinished_bodies_share_a_cap(self):
        with socket.create_connection(("127.0.0.1", self.daemon.port), timeout=30) as s:
            s.sendall(b"PUT /v1/models/slow/matrices/x HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-npy\r\n"
                      b"Content-Length: 900000\r\n\r\n" + b"\0" * 800000)
            deadline = time.monotonic() + 30
            while metrics(self.base)["embedscope_upload_pending_bytes"] < 800000:  # taken in by the daemon
                self.assertLess(time.monotonic(), deadline)
                time.sleep(0.02)
            r, doc = self.assert_problem("/v1/models/b/matrices/x", 507, slug="insufficient-storage",
                                         method="PUT", body=b"\0" * 300000, headers=NPY)
            self.assertEqual(doc["limit"], "uploads.max_pending_bytes")

            # a body without an announced length stops at the cap as it grows (chunked)
            def chunks():
                for _ in range(4):
                    yield b"\0" * 100000
            r = requests.put(self.base + "/v1/models/c/matrices/x", data=chunks(), headers=NPY)
            self.assertEqual(r.status_code, 507, r.text[:300])
            self.assertEqual(r.json()["limit"], "uploads.max_pending_bytes")
        deadline = time.monotonic() + 30
        while metrics(self.base)["embedscope_upload_pending_bytes"] > 0:  # gone with its connection
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.02)
        self.assertEqual(put(self.base, "/v1/models/b/matrices/x", big_npy(100, 100)).status, 201)
        self.assertEqual(os.listdir(self.bodies), [])


class StaleFiles(StoreDaemon):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="embedscope-store-")
        self.keep = os.path.join(self.tmp.name, "keep")
        self.bodies = os.path.join(self.tmp.name, "bodies")
        os.makedirs(os.path.join(self.keep, "records"))
        os.mkdir(self.bodies)
        self.stale = [os.path.join(self.keep, ".tmp-abc123"), os.path.join(self.keep, "records", ".tmp-def456"),
                      os.path.join(self.keep, "ab" * 32), os.path.join(self.bodies, "embedscope-upload-Xy12Zq")]
        for path in self.stale:
            with open(path, "wb") as f:
                f.write(b"\0" * 1000)
        self.start()

    def test_stale_temporary_files_are_removed_at_start(self):
        for path in self.stale:
            self.assertFalse(os.path.exists(path), path)
        log = self.daemon.log()
        self.assertIn("removed the stale temporary file", log)
        self.assertIn("removed the unused file", log)


class LegacyManifest(StoreDaemon):
    """A directory written in the single-manifest format is turned into records, nothing lost."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="embedscope-store-")
        self.keep = os.path.join(self.tmp.name, "keep")
        self.bodies = os.path.join(self.tmp.name, "bodies")
        os.makedirs(self.keep)
        os.mkdir(self.bodies)
        import hashlib
        body = npy_bytes(F8_2x3, SIX)
        self.blob = hashlib.sha256(body).hexdigest()
        with open(os.path.join(self.keep, self.blob), "wb") as f:
            f.write(body)
        manifest = {"version": 1, "matrices": [
            {"model": "old", "matrix": "f", "description": "", "created": 1.7e9, "file": self.blob, "tensor": "",
             "model_axis": "rows"},
            {"model": "old", "matrix": "v", "description": "a view", "created": 1.7e9 + 1,
             "entry": {"view": "f", "rows": [0, 1], "description": "a view"}},
            {"model": "old", "matrix": "g", "description": "", "created": 1.7e9 + 2,
             "entry": {"generator": "rope", "n_positions": 8, "d_model": 4}}]}
        with open(os.path.join(self.keep, "manifest.json"), "w") as f:
            json.dump(manifest, f)
        self.start()

    def test_manifest_becomes_records(self):
        self.assertEqual(names(self.base, "old"), ["f", "g", "v"])
        self.assertEqual(request("/v1/models/old/matrices/v", base=self.base).json()["shape"], [1, 3])
        self.assertFalse(os.path.exists(os.path.join(self.keep, "manifest.json")))
        self.assertEqual(sorted(os.listdir(os.path.join(self.keep, "records"))),
                         ["old+f.json", "old+g.json", "old+v.json"])
        self.restart()
        self.assertEqual(names(self.base, "old"), ["f", "g", "v"])
        self.assertIn(self.blob, os.listdir(self.keep))


class UnbuildableRecord(StoreDaemon):
    """Another daemon's record this one cannot build (its file is unreadable here) is not served in the
    previous form: the matrix goes, with a warning, until a record it can build arrives."""

    def test_an_unbuildable_change_withdraws_the_old_matrix(self):
        self.assertEqual(put(self.base, "/v1/models/k/matrices/a", big_npy(3, 2)).status, 201)
        record = os.path.join(self.keep, "records", "k+a.json")
        with open(record) as f:
            rec = json.load(f)
        rec["file"] = "0" * 64  # a file this directory does not have
        with open(record + ".new", "w") as f:
            json.dump(rec, f)
        os.rename(record + ".new", record)
        generation = os.path.join(self.keep, "generation")
        with open(generation) as f:
            g = int(f.read())
        with open(generation, "w") as f:
            f.write("%020d\n" % (g + 1))
        deadline = time.monotonic() + 2
        while request("/v1/models/k/matrices/a", base=self.base).status != 404:
            self.assertLess(time.monotonic(), deadline, "the old matrix is still served")
            time.sleep(0.02)
        self.assertIn("k/a not restored", self.daemon.log())
        self.assertEqual(put(self.base, "/v1/models/k/matrices/a", big_npy(3, 2, 2.0)).status, 201)


if __name__ == "__main__":
    unittest.main()
