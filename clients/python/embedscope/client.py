"""The embedscope client: one object per daemon, one method per analysis.

Tables come as CSV (read by pandas into a DataFrame with its index) or, without pandas
or with as_="numpy", as NPY (a float64 ndarray): big arrays never go through JSON."""
import io
import json
import os
import time
import urllib.parse

import numpy as np
import requests

from .errors import EmbedscopeError, error_for, error_from_problem

try:  # optional: DataFrames
    import pandas as pd
except ImportError:  # pragma: no cover - depends on the environment
    pd = None

try:  # optional: a progress bar while a job runs
    from tqdm.auto import tqdm
except ImportError:  # pragma: no cover
    tqdm = None

DEFAULT_URL = os.environ.get("EMBEDSCOPE_URL", "http://127.0.0.1:8080")
SAFETENSORS_MAGIC_MAX = 100 * 1024 * 1024  # a safetensors header length is at most this


def _matrix_path(matrix):
    """'model/matrix' -> 'v1/models/model/matrices/matrix' (each part URL-quoted)."""
    model, sep, name = matrix.partition("/")
    if not sep or not model or not name:
        raise ValueError("a matrix is named 'model/matrix', not %r" % (matrix,))
    q = lambda s: urllib.parse.quote(s, safe="")  # noqa: E731
    return "v1/models/%s/matrices/%s" % (q(model), q(name))


def _params(params):
    """Query parameters without the Nones; booleans as the daemon spells them; lists joined by commas."""
    out = {}
    for k, v in params.items():
        if v is None:
            continue
        if isinstance(v, bool):
            v = "true" if v else "false"
        elif isinstance(v, (list, tuple)):
            v = ",".join(str(x) for x in v)
        out[k] = v
    return out


class Client:
    """A client of one embedscope daemon.

    >>> es = Client("http://127.0.0.1:8080")
    >>> es.pca("gpt2-small/wpe", k=3, rows="1:")          # a DataFrame indexed by row

    url: the daemon (default $EMBEDSCOPE_URL or http://127.0.0.1:8080); token: the
    uploads.token for writes; timeout: seconds per HTTP request; as_: "pandas" or
    "numpy", the default return type of tables ("pandas" when pandas is installed)."""

    def __init__(self, url=None, token=None, timeout=120, as_=None, session=None):
        self.url = (url or DEFAULT_URL).rstrip("/") + "/"
        self.timeout = timeout
        self.session = session or requests.Session()
        if token:
            self.session.headers["Authorization"] = "Bearer " + token
        if as_ not in (None, "pandas", "numpy"):
            raise ValueError("as_ is 'pandas' or 'numpy'")
        self.as_ = as_ or ("pandas" if pd is not None else "numpy")

    def __repr__(self):
        return "Client(%r)" % self.url.rstrip("/")

    def close(self):
        """Close the pooled connections (also at the end of a `with Client(...) as es:` block)."""
        self.session.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------------ transport

    def _request(self, method, path, params=None, **kw):
        """The response of one request; a job (202) is followed to its end; a problem raises."""
        url = urllib.parse.urljoin(self.url, path)
        r = self.session.request(method, url, params=_params(params or {}), timeout=self.timeout, **kw)
        if r.status_code == 202:
            self.wait(r)
            if method in ("GET", "HEAD"):  # the result is now computed: ask again
                r = self.session.request(method, url, params=_params(params or {}), timeout=self.timeout, **kw)
        if r.status_code >= 400:
            raise error_for(r)
        return r

    def get(self, path, **params):
        """The JSON document at path (relative to the daemon's root), e.g. get("v1")."""
        return self._request("GET", path, params).json()

    def table(self, path, params=None, table=None, as_=None):
        """One table of an analysis: a DataFrame (CSV, index column first) or an ndarray (NPY)."""
        as_ = as_ or self.as_
        params = dict(params or {}, table=table)
        if as_ == "pandas":
            if pd is None:
                raise ImportError("as_='pandas' needs pandas (Debian: python3-pandas)")
            r = self._request("GET", path, dict(params, format="csv"))
            df = pd.read_csv(io.StringIO(r.text), float_precision="round_trip")
            return df.set_index(df.columns[0])
        r = self._request("GET", path, dict(params, format="npy"))
        return np.load(io.BytesIO(r.content), allow_pickle=False)

    def analysis(self, name, matrix, table=None, as_=None, **params):
        """Any per-matrix analysis by name (pca, spectrum, cosine, vectors, periodicity, outliers,
        toeplitz, averaging, rows) as a table; every query parameter passes through."""
        return self.table(_matrix_path(matrix) + "/" + name, params, table, as_)

    def document(self, name, matrix, **params):
        """The full JSON answer of a per-matrix analysis (inputs echoed, solver, errors)."""
        return self.get(_matrix_path(matrix) + "/" + name, **params)

    # ------------------------------------------------------------------ catalogue

    def models(self, as_=None):
        """Every loaded matrix, one row each: id, model, name, shape, dtype, model_axis, items,
        d, bytes, source ("config" or "user"), sha256 (a DataFrame indexed by id, or a list of dicts)."""
        doc = self.get("v1/models")
        rows = []
        for m in doc["models"]:
            for x in m["matrices"]:
                rows.append({"id": x["id"], "model": m["name"], "matrix": x["name"], "rows": x["shape"][0],
                             "cols": x["shape"][1], "dtype": x["dtype"], "model_axis": x["model_axis"],
                             "items": x["items"], "d": x["d"], "bytes": x.get("bytes"),
                             "source": m.get("source"), "sha256": x["provenance"]["sha256"],
                             "description": x.get("description")})
        if (as_ or self.as_) == "pandas" and pd is not None:
            return pd.DataFrame(rows).set_index("id")
        return rows

    def matrix(self, matrix):
        """One matrix's description (shape, dtype, provenance)."""
        return self.get(_matrix_path(matrix))

    def rows(self, matrix, rows=None, as_=None, **params):
        """The selected items themselves, float64, in model orientation."""
        return self.analysis("rows", matrix, as_=as_, rows=rows, **params)

    # ------------------------------------------------------------------ analyses

    def pca(self, matrix, k=3, rows=None, table=None, as_=None, **params):
        """PCA coordinates (table "coords", rows x k) or the explained variance (table="variance")."""
        return self.analysis("pca", matrix, table, as_, k=k, rows=rows, **params)

    def spectrum(self, matrix, rows=None, as_=None, **params):
        """Singular values, variance ratios and their cumulative sums, one row per component."""
        return self.analysis("spectrum", matrix, None, as_, rows=rows, **params)

    def cosine(self, matrix, mode=None, row=None, rows=None, as_=None, **params):
        """Cosine similarity: of one row against the others (row=i), by offset (mode="offset") or the
        whole matrix (mode="matrix", bins=0 for full resolution)."""
        return self.analysis("cosine", matrix, None, as_, mode=mode, row=row, rows=rows, **params)

    def vectors(self, matrix, k=None, rows=None, table=None, as_=None, **params):
        """The top singular vectors (table "vectors") or values (table="singular_values")."""
        return self.analysis("vectors", matrix, table, as_, k=k, rows=rows, **params)

    def capture(self, a, b, k=None, as_=None, **params):
        """How much of b's spectrum a's top-k subspace captures (a, b: "model/matrix")."""
        return self.table("v1/capture", dict(params, a=a, b=b, k=k), None, as_)

    def overlap(self, a, b, as_=None, **params):
        """Overlaps of a's and b's singular vectors (a grid)."""
        return self.table("v1/overlap", dict(params, a=a, b=b), None, as_)

    def alignment(self, table=None, as_=None, **params):
        """Q/K/V/O alignment with a reference subspace (/v1/alignment; its parameters as keywords)."""
        return self.table("v1/alignment", params, table, as_)

    def alignment_layers(self, model, r, table=None, as_=None, **params):
        """The alignment of every layer of model with the reference r."""
        return self.table("v1/alignment/layers", dict(params, model=model, r=r), table, as_)

    def attention(self, table=None, as_=None, **params):
        """Positional-only attention per head (/v1/attention; its parameters as keywords)."""
        return self.table("v1/attention", params, table, as_)

    def compare(self, matrices, analysis, as_=None, **params):
        """One analysis of several matrices, stacked with a first column `matrix` (their position).
        rows, center and average take one value for all, or a list with one per matrix (None: the default)."""
        for name in ("rows", "center", "average"):
            if isinstance(params.get(name), (list, tuple)):  # per matrix: ';'-separated (a comma is a row union)
                params[name] = ";".join("" if v is None else str(v) for v in params[name])
        return self.table("v1/compare", dict(params, matrices=list(matrices), analysis=analysis), None, as_)

    # ------------------------------------------------------------------ your own matrices

    def upload(self, matrix, data, tensor=None, model_axis=None, description=None):
        """Store a matrix under a user model ("mymodel/name") and return its description.

        data: a 2-D numpy array (sent as .npy), a path to a .npy or .safetensors file
        (streamed; tensor= names the tensor of a safetensors file), or a dict, one
        matrix entry of the configuration's grammar (a generator or a view)."""
        params = {"tensor": tensor, "model_axis": model_axis, "description": description}
        if isinstance(data, dict):
            body, ctype = json.dumps(data).encode(), "application/json"
            return self._write(matrix, body, ctype, params)
        if isinstance(data, np.ndarray):
            buf = io.BytesIO()
            np.save(buf, np.ascontiguousarray(data), allow_pickle=False)
            return self._write(matrix, buf.getvalue(), "application/x-npy", params)
        path = os.fspath(data)
        with open(path, "rb") as f:
            return self._write(matrix, f, "application/octet-stream", params)

    def _write(self, matrix, body, ctype, params):
        r = self._request("PUT", _matrix_path(matrix), params, data=body, headers={"Content-Type": ctype})
        if r.status_code == 202:  # stored by a job, now finished
            return self.matrix(matrix)
        return r.json() if r.content else {}

    def delete(self, matrix):
        """Remove a user matrix (its model goes with its last matrix)."""
        self._request("DELETE", _matrix_path(matrix))

    # ------------------------------------------------------------------ jobs

    def jobs(self):
        """The computations running now (GET /v1/jobs)."""
        return self.get("v1/jobs")["jobs"]

    def job(self, job_id):
        """One job's state (GET /v1/jobs/{id})."""
        return self.get("v1/jobs/" + urllib.parse.quote(str(job_id), safe=""))

    def wait(self, accepted, poll=0.5, progress=True):
        """Follow a job to its end: accepted is a 202 response (its Location, or the job's id in
        its body) or a job id. Polls GET /v1/jobs/{id}, with a tqdm bar of its `fraction` when
        tqdm is installed; returns the last state; raises the job's problem if it failed."""
        url = self._job_url(accepted)
        bar = tqdm(total=1.0, unit="job", leave=False) if progress and tqdm is not None else None
        try:
            while True:
                r = self.session.get(url, timeout=self.timeout, allow_redirects=False)
                if r.status_code in (200, 201, 204, 303) and not self._running(r):
                    return r.json() if r.headers.get("Content-Type", "").startswith("application/json") else {}
                if r.status_code >= 400:
                    raise error_for(r)
                state = r.json() if r.content else {}
                if bar is not None and isinstance(state.get("fraction"), (int, float)):
                    bar.n = min(1.0, float(state["fraction"]))
                    bar.refresh()
                time.sleep(poll)
        finally:
            if bar is not None:
                bar.close()

    def _job_url(self, accepted):
        if isinstance(accepted, requests.Response):
            location = accepted.headers.get("Location")
            if location:
                return urllib.parse.urljoin(accepted.url, location)
            body = accepted.json() if accepted.content else {}
            accepted = body.get("id") or body.get("job", {}).get("id")
            if not accepted:
                raise EmbedscopeError(202, {"detail": "a 202 answer without a Location or a job id"}, None)
        return urllib.parse.urljoin(self.url, "v1/jobs/" + urllib.parse.quote(str(accepted), safe=""))

    @staticmethod
    def _running(r):
        """Is this job state still running (a JSON status queued/running/pending)?"""
        if not r.headers.get("Content-Type", "").startswith("application/json"):
            return False
        state = r.json()
        if state.get("status") in ("failed", "error") and isinstance(state.get("problem"), dict):
            raise error_from_problem(state["problem"], r.url)
        return state.get("status") in ("queued", "running", "pending", "accepted")
