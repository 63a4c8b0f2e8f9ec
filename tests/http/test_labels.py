"""Labels and metadata of a matrix's items (the Projector's metadata TSV): from
the configuration, or PUT / GET / DELETE .../labels as TSV, CSV or JSON, checked
against the row count; returned by /rows, summarised in the catalogue, searched
by .../labels/search, and kept in uploads.dir like the matrices."""
import csv
import io
import json
import os
import re
import tempfile
import time
import unittest

from httpkit import Daemon, ProblemAssertions, metrics, query, request

GEN = json.dumps({"generator": "sinusoidal", "n_positions": 6, "d_model": 4}).encode()
JSON_T = {"Content-Type": "application/json"}
TSV_T = {"Content-Type": "text/tab-separated-values"}
CSV_T = {"Content-Type": "text/csv"}
MINE = "/v1/models/mine/matrices/pe"
WORDS = ["zero", "one", "two", "three", "four", "five"]
TSV = "word\tvalue\n" + "".join("%s\t%d\n" % (w, i * i) for i, w in enumerate(WORDS))


class Labels(ProblemAssertions):
    """A daemon with a configured labelled matrix and its own upload directory."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="embedscope-labels-")
        cls.store = os.path.join(cls.tmp.name, "store")
        cls.labels_file = os.path.join(cls.tmp.name, "pos.tsv")
        with open(cls.labels_file, "w") as f:  # one column: no header
            f.write("".join("p%d\n" % i for i in range(8)))
        cls.config = {
            "models": {"conf": {"matrices": {
                "pe": {"generator": "sinusoidal", "n_positions": 8, "d_model": 4, "labels": cls.labels_file}}}},
            "uploads": {"tmp_dir": cls.tmp.name, "dir": cls.store, "max_labels_bytes": 4096},
        }
        cls.daemon = Daemon(cls.config)
        cls.base = cls.daemon.base

    @classmethod
    def tearDownClass(cls):
        cls.daemon.close()
        cls.tmp.cleanup()

    def put(self, path, body, headers, status=None, base=None):
        r = request(path, method="PUT", body=body, headers=headers, base=base or self.base)
        if status:
            self.assertEqual(r.status, status, r.body[:400])
        return r

    def fresh_matrix(self):
        self.put(MINE, GEN, JSON_T)
        request(MINE + "/labels", method="DELETE", base=self.base)

    def catalogue_labels(self, model, matrix, base=None):
        doc = request("/v1/models", base=base or self.base).json()
        for m in doc["models"]:
            for x in m["matrices"]:
                if m["name"] == model and x["name"] == matrix:
                    return x["labels"]
        raise AssertionError("no %s/%s" % (model, matrix))

    # ------------------------------------------------------------ configuration

    def test_configured_labels_are_served_and_listed(self):
        got = request("/v1/models/conf/matrices/pe/labels", base=self.base).json()
        self.assertEqual(got["rows"], 8)
        self.assertEqual(got["columns"], {"label": ["p%d" % i for i in range(8)]})
        info = self.catalogue_labels("conf", "pe")
        self.assertEqual(info["columns"], [{"name": "label", "type": "categorical"}])
        self.assertEqual(info["rows"], 8)
        rows = request("/v1/models/conf/matrices/pe/rows?rows=5:8", base=self.base).json()
        self.assertEqual(rows["rows"], [5, 6, 7])
        self.assertEqual(rows["labels"], {"label": ["p5", "p6", "p7"]})

    def test_configured_model_labels_are_read_only(self):
        self.assert_problem("/v1/models/conf/matrices/pe/labels", 409, param="model", method="PUT",
                            body=b"x\n" * 8, headers=TSV_T)

    def test_a_configuration_with_the_wrong_row_count_is_refused_naming_the_key(self):
        bad = os.path.join(self.tmp.name, "short.tsv")
        with open(bad, "w") as f:
            f.write("a\nb\n")
        config = {"models": {"m": {"matrices": {
            "pe": {"generator": "sinusoidal", "n_positions": 8, "d_model": 4, "labels": bad}}}}}
        d = Daemon(config, wait=False)
        self.assertNotEqual(d.proc.wait(60), 0)
        log = d.log()
        d.dir.cleanup()
        self.assertIn("models.m.matrices.pe.labels", log)
        self.assertIn("2 rows of labels", log)
        self.assertIn("8 rows", log)

    # ------------------------------------------------------------ upload, read back

    def test_tsv_round_trip_in_every_format(self):
        self.fresh_matrix()
        r = self.put(MINE + "/labels", TSV.encode(), TSV_T, 200)
        info = r.json()
        self.assertEqual(info["columns"], [{"name": "word", "type": "categorical"},
                                           {"name": "value", "type": "numeric"}])
        self.assertEqual(info, self.catalogue_labels("mine", "pe"))
        got = request(MINE + "/labels", base=self.base).json()
        self.assertEqual(got["columns"]["word"], WORDS)
        self.assertEqual(got["columns"]["value"], [i * i for i in range(6)])
        self.assertEqual(got["numeric"], ["value"])
        tsv = request(MINE + "/labels?format=tsv", base=self.base)
        self.assertEqual(tsv.body.decode(), TSV)
        self.assertTrue(tsv.header("Content-Type").startswith("text/tab-separated-values"))
        by_accept = request(MINE + "/labels", headers={"Accept": "text/csv"}, base=self.base)
        self.assertTrue(by_accept.header("Content-Type").startswith("text/csv"))
        rows = list(csv.reader(io.StringIO(by_accept.body.decode())))
        self.assertEqual(rows[0], ["word", "value"])
        self.assertEqual([r[0] for r in rows[1:]], WORDS)

    def test_csv_quotes_and_json_values(self):
        self.fresh_matrix()
        text = 'name,note\r\n"a,b",x\r\n"say ""hi""",y\r\n"two\nlines",z\r\nd,\r\ne,w\r\nf,v\r\n'
        self.put(MINE + "/labels", text.encode(), CSV_T, 200)
        got = request(MINE + "/labels", base=self.base).json()["columns"]
        self.assertEqual(got["name"], ["a,b", 'say "hi"', "two\nlines", "d", "e", "f"])
        self.assertEqual(got["note"], ["x", "y", "z", "", "w", "v"])
        back = request(MINE + "/labels?format=csv", base=self.base).body.decode()
        self.assertEqual(list(csv.reader(io.StringIO(back))), [["name", "note"]] + [list(r) for r in
                                                                                 zip(got["name"], got["note"])])
        body = {"columns": {"tok": ["a", "b", "c", "d", "e", "f"], "freq": [1, 2.5, 3, None, 5, 6]}}
        self.put(MINE + "/labels", json.dumps(body).encode(), JSON_T, 200)
        got = request(MINE + "/labels", base=self.base).json()
        self.assertEqual(got["columns"]["freq"], ["1", "2.5", "3", "", "5", "6"])  # an empty cell: categorical
        self.assertEqual(got["numeric"], [])

    def test_rows_return_the_selected_labels(self):
        self.fresh_matrix()
        before = request(MINE + "/rows?rows=1:3", base=self.base).json()
        self.assertNotIn("labels", before)
        self.put(MINE + "/labels", TSV.encode(), TSV_T, 200)
        rows = request(MINE + "/rows?rows=4,1,5", base=self.base).json()
        self.assertEqual(rows["rows"], [4, 1, 5])
        self.assertEqual(rows["labels"], {"word": ["four", "one", "five"], "value": ["16", "1", "25"]})

    # ------------------------------------------------------------ refusals

    def test_wrong_row_count_names_the_counts(self):
        self.fresh_matrix()
        _, doc = self.assert_problem(MINE + "/labels", 400, param="body", method="PUT",
                                     body=b"a\nb\nc\n", headers=TSV_T)
        self.assertIn("3 rows of labels", doc["detail"])
        self.assertIn("6 rows", doc["detail"])
        _, doc = self.assert_problem(MINE + "/labels", 400, param="body", method="PUT",
                                     body=json.dumps({"columns": {"a": [1, 2]}}).encode(), headers=JSON_T)
        self.assertIn("6 values", doc["detail"])

    def test_ragged_lines_and_bad_text_name_the_line(self):
        self.fresh_matrix()
        ragged = "w\tv\n" + "a\t1\n" * 2 + "b\n" + "c\t1\n" * 3
        _, doc = self.assert_problem(MINE + "/labels", 400, param="body", method="PUT",
                                     body=ragged.encode(), headers=TSV_T)
        self.assertIn("line 4", doc["detail"])
        _, doc = self.assert_problem(MINE + "/labels", 400, param="body", method="PUT",
                                     body=b"a\nb\n\xff\nd\ne\nf\n", headers=TSV_T)
        self.assertIn("line 3", doc["detail"])
        self.assertIn("UTF-8", doc["detail"])
        _, doc = self.assert_problem(MINE + "/labels", 400, param="body", method="PUT",
                                     body=b'a,b\n"open,1\n', headers=CSV_T)
        self.assertIn("line 2", doc["detail"])
        dup = "x\tx\n" + "1\t2\n" * 6
        self.assert_problem(MINE + "/labels", 400, param="body", method="PUT", body=dup.encode(), headers=TSV_T)

    def test_type_size_and_missing_matrix(self):
        self.fresh_matrix()
        self.assert_problem(MINE + "/labels", 415, param="Content-Type", method="PUT", body=b"x",
                            headers={"Content-Type": "application/x-npy"})
        self.assert_problem(MINE + "/labels", 413, method="PUT", body=b"x" * 5000, headers=TSV_T)
        self.assert_problem("/v1/models/mine/matrices/nope/labels", 404, param="matrix", method="PUT",
                            body=TSV.encode(), headers=TSV_T)
        self.assert_problem(MINE + "/labels?x=1", 400, param="x", method="PUT", body=TSV.encode(), headers=TSV_T)

    def test_delete_drops_them_and_a_replaced_matrix_loses_them(self):
        self.fresh_matrix()
        self.put(MINE + "/labels", TSV.encode(), TSV_T, 200)
        self.assertEqual(request(MINE + "/labels", method="DELETE", base=self.base).status, 204)
        self.assert_problem(MINE + "/labels", 404, param="labels")
        self.assert_problem(MINE + "/labels", 404, param="labels", method="DELETE")
        self.assertIsNone(self.catalogue_labels("mine", "pe"))
        self.put(MINE + "/labels", TSV.encode(), TSV_T, 200)
        self.put(MINE, GEN, JSON_T, 200)  # new rows: the old labels do not describe them
        self.assert_problem(MINE + "/labels", 404, param="labels")

    def test_writes_are_allowed_on_labels_and_search_is_read_only(self):
        r = request(MINE + "/labels", method="OPTIONS", base=self.base)
        self.assertEqual(r.header("Allow"), "GET, HEAD, OPTIONS, PUT, DELETE")
        r = request(MINE + "/labels/search", method="OPTIONS", base=self.base)
        self.assertEqual(r.header("Allow"), "GET, HEAD, OPTIONS")
        self.assert_problem(MINE + "/labels/search?q=a", 405, method="PUT", body=b"x", headers=TSV_T)

    # ------------------------------------------------------------ search

    def test_search_substring_and_regex(self):
        self.fresh_matrix()
        self.put(MINE + "/labels", TSV.encode(), TSV_T, 200)
        got = request(MINE + "/labels/search?q=o", base=self.base).json()
        want = [i for i, w in enumerate(WORDS) if "o" in w]
        self.assertEqual(got["rows"], want)
        self.assertEqual(got["labels"], [WORDS[i] for i in want])
        self.assertEqual((got["total"], got["truncated"], got["column"]), (len(want), False, "word"))
        got = request(MINE + "/labels/search?q=^t&regex=1&limit=1", base=self.base).json()
        self.assertEqual((got["rows"], got["total"], got["truncated"]), ([2], 2, True))
        got = request(MINE + "/labels/search?q=^(1|9)$&regex=1&column=value", base=self.base).json()
        self.assertEqual(got["rows"], [1, 3])
        self.assert_problem(MINE + "/labels/search?q=(&regex=1", 400, param="q")
        got = request(MINE + "/labels/search" + query(q="(e)\\1", regex=1), base=self.base).json()
        self.assertEqual(got["rows"], [3])  # three: back-references are allowed (PCRE2's limits bound them)
        self.assert_problem(MINE + "/labels/search?q=" + "a" * 300, 400, param="q")
        self.assert_problem(MINE + "/labels/search", 400, param="q")
        self.assert_problem(MINE + "/labels/search?q=a&column=nope", 400, param="column")
        self.assert_problem(MINE + "/labels/search?q=a&limit=0", 400, param="limit")

    # ------------------------------------------------------------ durability

    def test_labels_survive_a_restart_and_reach_another_daemon(self):
        self.fresh_matrix()
        r = self.put(MINE + "/labels", TSV.encode(), TSV_T, 200)
        sha = r.json()["sha256"]
        self.assertIn(sha, os.listdir(self.store))
        other = Daemon(self.config)  # a second daemon on the same directory
        try:
            self.assertEqual(request(MINE + "/labels?format=tsv", base=other.base).body.decode(), TSV)
            self.put(MINE + "/labels", TSV.replace("zero", "nil").encode(), TSV_T, 200, base=other.base)
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                if request(MINE + "/labels", base=self.base).json()["columns"]["word"][0] == "nil":
                    break
                time.sleep(0.1)
            self.assertEqual(request(MINE + "/labels", base=self.base).json()["columns"]["word"][0], "nil")
            self.assertNotIn(sha, os.listdir(self.store))  # the replaced labels' file is gone
            request(MINE, method="DELETE", base=other.base)
            blobs = [n for n in os.listdir(self.store) if re.fullmatch("[0-9a-f]{64}", n)]
            self.assertEqual(blobs, [])
        finally:
            other.close()


class LabelsWithToken(ProblemAssertions):
    """Labels are written under the same rules as matrices: the bearer token, and no anonymous
    write through a proxy."""

    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon({"models": {"conf": {"matrices": {"pe": {"generator": "sinusoidal", "n_positions": 4,
                                                                      "d_model": 2}}}},
                             "uploads": {"token": "s3cret"}})
        cls.base = cls.daemon.base

    @classmethod
    def tearDownClass(cls):
        cls.daemon.close()

    def test_writes_need_the_token(self):
        auth = {"Authorization": "Bearer s3cret"}
        r = request(MINE, method="PUT", body=GEN, headers=dict(JSON_T, **auth), base=self.base)
        self.assertEqual(r.status, 201, r.body[:300])
        self.assert_problem(MINE + "/labels", 401, param="Authorization", method="PUT", body=TSV.encode(),
                            headers=TSV_T)
        r = request(MINE + "/labels", method="PUT", body=TSV.encode(), headers=dict(TSV_T, **auth), base=self.base)
        self.assertEqual(r.status, 200, r.body[:300])
        self.assertEqual(request(MINE + "/labels/search?q=t", base=self.base).json()["rows"], [2, 3])  # reads: open
        self.assert_problem(MINE + "/labels", 401, param="Authorization", method="DELETE")
        r = request(MINE + "/labels", method="DELETE", headers=auth, base=self.base)
        self.assertEqual(r.status, 204)


class LabelsBehindAProxy(ProblemAssertions):
    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon({"models": {"conf": {"matrices": {"pe": {"generator": "sinusoidal", "n_positions": 4,
                                                                      "d_model": 2}}}}})
        cls.base = cls.daemon.base

    @classmethod
    def tearDownClass(cls):
        cls.daemon.close()

    def test_anonymous_writes_through_a_proxy_are_refused(self):
        self.assertEqual(request(MINE, method="PUT", body=GEN, headers=JSON_T, base=self.base).status, 201)
        self.assert_problem(MINE + "/labels", 403, param="uploads.token", method="PUT", body=TSV.encode(),
                            headers=dict(TSV_T, **{"X-Forwarded-For": "203.0.113.9"}))


class SearchThatCannotBeBlownUp(ProblemAssertions):
    """Patterns that backtrack without end on glibc's regexec (19 s and +1 GB for the nested one; minutes
    for alternated repetitions on 60 KB cells, unstoppable) are refused with a 400 naming the limit, or
    answered, at once and without memory growth: PCRE2 with match, depth and heap limits bounding each
    cell, on the compute pool."""

    CELL = 60000

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="embedscope-search-")
        # a deadline far above what a bounded search takes even on a loaded machine, so that the old
        # engine fails here with a 504 rather than after minutes
        conf = {"conf": {"matrices": {"pe": {"generator": "sinusoidal", "n_positions": 8, "d_model": 4}}}}
        cls.daemon = Daemon({"models": conf, "uploads": {"tmp_dir": cls.tmp.name, "max_labels_bytes": 1 << 20},
                             "limits": {"request_timeout_s": 60}})
        cls.base = cls.daemon.base
        r = request(MINE, method="PUT", body=GEN, headers=JSON_T, base=cls.base)
        assert r.status in (200, 201), r.body[:300]
        cells = ["a" * cls.CELL] * 5 + ["a" * cls.CELL + "b"]
        r = request(MINE + "/labels", method="PUT", body="".join(c + "\n" for c in cells).encode(),
                    headers=TSV_T, base=cls.base)
        assert r.status == 200, r.body[:300]

    @classmethod
    def tearDownClass(cls):
        cls.daemon.close()
        cls.tmp.cleanup()

    def rss(self):
        return metrics(self.base)["process_resident_memory_bytes"]

    def search(self, pattern):
        return request(MINE + "/labels/search" + query(q=pattern, regex=1), base=self.base)

    def test_nested_counted_repetitions_are_refused(self):
        before = self.rss()
        _, doc = self.assert_problem(MINE + "/labels/search" + query(
            q="(((((a{1,10}){1,10}){1,10}){1,10}){1,10}){1,10}", regex=1), 400, param="q")
        self.assertIn("too large", doc["detail"])
        self.assertLess(self.rss() - before, 50e6)

    def test_backtracking_on_long_cells_is_bounded(self):
        before = self.rss()
        for pattern in ["(a|aa)*\\d", "(?:a|aa){0,12}\\d", "a.*\\d"]:
            _, doc = self.assert_problem(MINE + "/labels/search" + query(q=pattern, regex=1), 400, param="q")
            self.assertRegex(doc["detail"], "(match|depth|heap|stack) limit", pattern)
            self.assertIn("row 0", doc["detail"])
        r = self.search("(a|aa)*b")  # JIT sees that no b is in rows 0-4 (a result); the interpreter refuses
        if r.status == 200:
            self.assertEqual(r.json()["rows"], [5])
        else:
            self.assertEqual(r.status, 400, r.body[:300])
            self.assertIn("limit", r.json()["detail"])
        self.assertLess(self.rss() - before, 50e6)
        self.assertEqual(self.search("ab$").json()["rows"], [5])  # an ordinary pattern on the same cells

    def test_case_insensitive_search(self):
        got = request(MINE + "/labels/search" + query(q="AB", case="insensitive"), base=self.base).json()
        self.assertEqual(got["rows"], [5])
        got = request(MINE + "/labels/search" + query(q="A+B$", regex=1, case="insensitive"),
                      base=self.base).json()
        self.assertEqual(got["rows"], [5])
        self.assertEqual(request(MINE + "/labels/search" + query(q="AB"), base=self.base).json()["rows"], [])
        self.assert_problem(MINE + "/labels/search?q=a&case=upper", 400, param="case")


if __name__ == "__main__":
    unittest.main()
