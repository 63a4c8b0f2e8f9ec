"""Every analysis route of `embedscope --dump-api`, asked through the Python client (clients/python) as a
job, gives its synchronous answer bit for bit (issue 28 §1).

Three daemons on the same configuration (the shipped models the descriptors' typical requests name,
one BLAS thread so that two computations of a request sum alike):
- `sync` answers every typical request synchronously (`Prefer: wait`, read raw: the reference);
- `prefer` is asked by a Client(respond_async=True): every request carries `Prefer: respond-async`,
  so each one must become a job (202), which the client follows (Retry-After, the job's Location, its
  303) to the result;
- `tiny` has limits.sync_seconds = 1e-6: the client asks plainly and the daemon turns what it computes
  into jobs by itself.
Each typical request is compared in JSON (parsed; only the cost model's predictions left out), in NPY (the array, bit for bit) and in CSV (the DataFrame, exactly, when pandas
is installed)."""
import concurrent.futures
import io
import json
import os
import sys
import unittest
import urllib.parse

import numpy as np

from httpkit import DATA, ROOT, Daemon, api_dump, example_path, request

CLIENT = os.path.join(ROOT, "clients", "python")
embedscope = None  # the checkout's client, imported by setUpModule (test_client.py checks the pip-installed one)

try:
    import pandas as pd
except ImportError:  # make test installs python3-pandas; without it the CSV comparison is left out
    pd = None

GENEROUS = 300


def setUpModule():
    global embedscope
    for name in [m for m in sys.modules if m == "embedscope" or m.startswith("embedscope.")]:
        del sys.modules[name]  # another module's install
    sys.path.insert(0, CLIENT)
    import embedscope as client
    embedscope = client
    assert embedscope.__file__.startswith(CLIENT), embedscope.__file__


def tearDownModule():
    sys.path.remove(CLIENT)
    for name in [m for m in sys.modules if m == "embedscope" or m.startswith("embedscope.")]:
        del sys.modules[name]
WORKERS = 6


def config(**limits):
    with open(os.path.join(ROOT, "config", "embedscope.json")) as f:
        shipped = json.load(f)
    models = {m: shipped["models"][m] for m in ("gpt2-small", "openai-gpt", "sinusoidal")}
    return {"data_dir": DATA, "server": {"blas_threads": 1},
            "limits": dict({"max_jobs_per_client": 100000, "request_timeout_s": GENEROUS}, **limits),
            "models": models}


PREDICTIONS = ("predicted_seconds", "predicted_bytes")


def without_predictions(doc):
    """The document without the cost model's predictions (`input.cost`), which depend on each daemon's
    calibration at start and on what its caches hold when the request comes (a decomposition computed
    already needs no memory for one)."""
    if isinstance(doc, dict):
        return {k: without_predictions(v) for k, v in doc.items() if k not in PREDICTIONS}
    if isinstance(doc, list):
        return [without_predictions(v) for v in doc]
    return doc


def typical_requests():
    """(name, path, {param: value}) of every analysis' typical request (its descriptor's examples)."""
    out = []
    for a in api_dump()["analyses"]:
        path = example_path(a["route"], "")
        params = dict(urllib.parse.parse_qsl(a["examples"]["query"], keep_blank_values=True))
        out.append((a["name"], path, params))
    return out


FORMATS = ("json", "npy") + (("csv",) if pd is not None else ())


def parse(fmt, body):
    if fmt == "json":
        return without_predictions(json.loads(body))
    if fmt == "npy":
        return np.load(io.BytesIO(body), allow_pickle=False)
    df = pd.read_csv(io.StringIO(body.decode()), float_precision="round_trip")
    return df.set_index(df.columns[0])


class EveryRouteAsAJob(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.daemons = {}
        for name, limits in (("sync", {}), ("prefer", {}), ("tiny", {"sync_seconds": 1e-6})):
            cls.daemons[name] = Daemon(config(**limits), start_timeout=GENEROUS)
        for d in cls.daemons.values():
            d.wait_ready(GENEROUS)
        cls.requests = typical_requests()
        cls.expected = {}
        for name, path, params in cls.requests:
            for fmt in FORMATS:
                query = urllib.parse.urlencode(dict(params, format=fmt))
                r = request(path + "?" + query, base=cls.daemons["sync"].base, timeout=GENEROUS,
                            headers={"Prefer": "wait=%d" % GENEROUS})
                assert r.status == 200, (path, query, r.status, r.body[:300])
                cls.expected[name, fmt] = parse(fmt, r.body)

    @classmethod
    def tearDownClass(cls):
        for d in cls.daemons.values():
            d.close()

    def ask(self, base, respond_async, name, path, params, fmt):
        """The client's answer to one request in fmt, and the job documents its progress showed."""
        shown = []
        with embedscope.Client(base, timeout=GENEROUS, respond_async=respond_async, progress=shown.append,
                               poll=0.2) as es:
            if fmt == "json":
                got = without_predictions(es.get(path.lstrip("/"), **params))
            else:
                got = es.table(path.lstrip("/"), params, as_="numpy" if fmt == "npy" else "pandas")
        return name, fmt, got, shown

    def run_all(self, daemon, respond_async):
        calls = [(name, path, params, fmt) for name, path, params in self.requests for fmt in FORMATS]
        # compare last: it keeps each matrix's reply under the analysis' own key, which would then answer
        # that analysis' request at once (a reply the daemon holds is no job, Prefer or not)
        phases = [[c for c in calls if c[0] != "compare"], [c for c in calls if c[0] == "compare"]]
        results = []
        with concurrent.futures.ThreadPoolExecutor(WORKERS) as pool:
            for phase in phases:
                futures = [pool.submit(self.ask, self.daemons[daemon].base, respond_async, *c) for c in phase]
                results += [f.result() for f in futures]
        jobs = 0
        for name, fmt, got, shown in results:
            with self.subTest(daemon, analysis=name, format=fmt):
                want = self.expected[name, fmt]
                if fmt == "json":
                    self.assertEqual(got, want)
                elif fmt == "npy":
                    self.assertEqual((got.dtype, got.shape), (want.dtype, want.shape))
                    self.assertEqual(got.tobytes(), want.tobytes())
                else:
                    pd.testing.assert_frame_equal(got, want, check_exact=True)
                if shown:
                    jobs += 1
                    self.assertEqual(shown[-1]["state"], "done", shown[-1])
                    self.assertEqual(shown[-1]["progress"]["fraction"], 1.0)
                    # in order (a 202 can already say done: the client then fetches the result at once)
                    order = [("queued", "running", "done").index(s["state"]) for s in shown]
                    self.assertEqual(order, sorted(order), shown)
        return len(calls), jobs

    def test_every_route_forced_async_gives_the_synchronous_answer(self):
        calls, jobs = self.run_all("prefer", True)
        print("  Prefer: respond-async: %d requests (%d analyses x %s), %d became jobs"
              % (calls, len(self.requests), "/".join(FORMATS), jobs))
        self.assertEqual(jobs, calls, "every request asked with Prefer: respond-async must be a job")
        self.assertGreaterEqual(len(self.requests), 19)

    def test_every_route_on_a_tiny_sync_window_gives_the_synchronous_answer(self):
        calls, jobs = self.run_all("tiny", False)
        print("  sync_seconds 1e-6: %d requests, %d became jobs" % (calls, jobs))
        # what the daemon predicted or found longer than a microsecond became a job; at least the requests
        # that decompose (their exact SVD) do, on any machine
        self.assertGreater(jobs, 0)


if __name__ == "__main__":
    unittest.main()
