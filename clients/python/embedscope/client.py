"""The embedscope client: one object per daemon, one method per analysis.

Tables come as CSV (read by pandas into a DataFrame with its index) or, without pandas
or with as_="numpy", as NPY (a float64 ndarray): big arrays never go through JSON.
A request the daemon answers as a job (202 Accepted) is waited for, with its progress,
and returns what the synchronous answer would have."""
import io
import json
import os
import random
import time
import urllib.parse
from typing import IO, Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Union

import numpy as np
import requests

from .errors import (ClientTimeoutError, EmbedscopeError, JobCancelledError, NetworkError, error_for,
                     error_from_problem, retry_after)

try:  # optional: DataFrames
    import pandas as pd
except ImportError:  # pragma: no cover - depends on the environment
    pd = None

try:  # optional: a progress bar while a job runs
    from tqdm.auto import tqdm
except ImportError:  # pragma: no cover
    tqdm = None

DEFAULT_URL = os.environ.get("EMBEDSCOPE_URL", "http://127.0.0.1:8080")

# The job document as the daemon writes it (src/api/jobdoc.c's field table, `embedscope --dump-api`'s "job"):
# tests/http/test_client.py checks every name and state here against the dump.
JOB_LISTING = "requests"        # GET /v1/jobs' member listing the jobs
JOB_ID = "id"
JOB_STATE = "state"
JOB_URL = "url"                 # the request (path?query)
JOB_PROGRESS = "progress"       # an object: FRACTION, PASS
JOB_FRACTION = "fraction"
JOB_PASS = "pass"
JOB_RESULT = "result"           # done: the result's URL
JOB_ERROR = "error"             # failed: the problem document
JOB_RUNNING = ("queued", "running")
JOB_FINISHED = ("done", "failed", "cancelled")

Job = Dict[str, Any]
Table = Any  # a pandas.DataFrame or a numpy.ndarray
Progress = Union[bool, Callable[[Job], None]]
Params = Mapping[str, Any]

RETRY_STATUSES = (429, 503)
IDEMPOTENT = ("GET", "HEAD", "PUT", "DELETE", "OPTIONS")


def _matrix_path(matrix: str) -> str:
    """'model/matrix' -> 'v1/models/model/matrices/matrix' (each part URL-quoted)."""
    model, sep, name = matrix.partition("/")
    if not sep or not model or not name:
        raise ValueError("a matrix is named 'model/matrix', not %r" % (matrix,))

    def q(s: str) -> str:
        return urllib.parse.quote(s, safe="")
    return "v1/models/%s/matrices/%s" % (q(model), q(name))


def _params(params: Params) -> Dict[str, Any]:
    """Query parameters without the Nones; booleans as the daemon spells them; lists joined by commas."""
    out: Dict[str, Any] = {}
    for k, v in params.items():
        if v is None:
            continue
        if isinstance(v, bool):
            v = "true" if v else "false"
        elif isinstance(v, (list, tuple)):
            v = ",".join(str(x) for x in v)
        out[k] = v
    return out


def _is_json(r: requests.Response) -> bool:
    ctype = r.headers.get("Content-Type", "")
    return ctype.startswith("application/json") or ctype.startswith("application/problem+json")


class _Bar:
    """What a waiting call shows: a tqdm bar of the job's fraction (when tqdm is installed and progress is
    True), the caller's function of each job document (progress=callable), or nothing."""

    def __init__(self, progress: Progress, url: str):
        self.callback = progress if callable(progress) else None
        self.bar = None
        if progress is True and tqdm is not None:
            self.bar = tqdm(total=100, unit="%", desc=url.rsplit("/", 1)[-1].split("?")[0] or "job", leave=False)

    def show(self, job: Job) -> None:
        if self.callback is not None:
            self.callback(job)
        progress = job.get(JOB_PROGRESS) or {}
        fraction = progress.get(JOB_FRACTION)
        if self.bar is not None and isinstance(fraction, (int, float)):
            self.bar.n = int(round(100 * min(1.0, max(0.0, float(fraction)))))
            if progress.get(JOB_PASS):
                self.bar.set_postfix_str(str(progress[JOB_PASS]), refresh=False)
            self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class Client:
    """A client of one embedscope daemon.

    >>> es = Client("http://127.0.0.1:8080")
    >>> es.pca("gpt2-small/wpe", k=3, rows="1:")          # a DataFrame indexed by row

    url: the daemon (default $EMBEDSCOPE_URL or http://127.0.0.1:8080); token: the uploads.token for
    writes; timeout: seconds the daemon may stay silent on one HTTP request (ClientTimeoutError after;
    a job's computation is not bounded by it: it is polled); as_: "pandas" or "numpy", the default
    return type of tables ("pandas" when pandas is installed).

    Jobs: respond_async=True asks every analysis for a job (Prefer: respond-async); a 202 is waited for
    either way, polling its Location every `poll` seconds at most (or the Retry-After the daemon gives),
    showing progress (True: a tqdm bar when tqdm is installed; a function: called with each job
    document; False: nothing); Ctrl-C while waiting cancels the job (cancel_on_interrupt).

    Retries: an answer 503 (busy) or 429 (too many jobs), or a connection refused or cut, is retried
    at most `retries` times for a request that can be sent again (every method here but an upload
    streamed from a file), waiting the daemon's Retry-After (else `backoff` seconds doubling each time),
    as long as the waits add up to at most `max_retry_wait` seconds; then the error is raised."""

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None, timeout: float = 120,
                 as_: Optional[str] = None, session: Optional[requests.Session] = None, *,
                 respond_async: bool = False, progress: Progress = True, poll: float = 1.0,
                 cancel_on_interrupt: bool = True, retries: int = 3, backoff: float = 0.5,
                 max_retry_wait: float = 60.0):
        self.url = (url or DEFAULT_URL).rstrip("/") + "/"
        self.timeout = timeout
        self.session = session or requests.Session()
        if token:
            self.session.headers["Authorization"] = "Bearer " + token
        if as_ not in (None, "pandas", "numpy"):
            raise ValueError("as_ is 'pandas' or 'numpy'")
        self.as_ = as_ or ("pandas" if pd is not None else "numpy")
        self.respond_async = respond_async
        self.progress = progress
        self.poll = poll
        self.cancel_on_interrupt = cancel_on_interrupt
        self.retries = retries
        self.backoff = backoff
        self.max_retry_wait = max_retry_wait
        self.sleep: Callable[[float], None] = time.sleep  # every wait of the client (tests replace it)

    def __repr__(self) -> str:
        return "Client(%r)" % self.url.rstrip("/")

    def close(self) -> None:
        """Close the pooled connections (also at the end of a `with Client(...) as es:` block)."""
        self.session.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ transport

    def _send(self, method: str, url: str, params: Optional[Params] = None, replayable: bool = True,
              **kw: Any) -> requests.Response:
        """One exchange, retried on 503/429 and on a connection refused or cut (bounded, see Client);
        transport failures raised as NetworkError / ClientTimeoutError."""
        waited = 0.0
        for attempt in range(self.retries + 1):
            last = attempt == self.retries or not replayable or method not in IDEMPOTENT
            try:
                r = self.session.request(method, url, params=params, timeout=self.timeout, **kw)
            except requests.Timeout as e:
                raise ClientTimeoutError("no answer within %g s (Client timeout): %s" % (self.timeout, e),
                                         url) from e
            except requests.RequestException as e:
                delay = self.backoff * 2 ** attempt
                if last or waited + delay > self.max_retry_wait:
                    raise NetworkError("%s %s: %s" % (method, url, e), url) from e
            else:
                if r.status_code not in RETRY_STATUSES or last:
                    return r
                delay = retry_after(r)
                if delay is None:
                    delay = self.backoff * 2 ** attempt
                if waited + delay > self.max_retry_wait:
                    return r
            delay *= 1 + 0.1 * random.random()  # clients told the same Retry-After do not come back at once
            self.sleep(delay)
            waited += delay
        raise AssertionError("unreachable")  # pragma: no cover

    def _request(self, method: str, path: str, params: Optional[Params] = None,
                 headers: Optional[Mapping[str, str]] = None, replayable: bool = True,
                 **kw: Any) -> requests.Response:
        """The response of one request; a job (202) is followed to its result; a problem raises."""
        url = urllib.parse.urljoin(self.url, path)
        r = self._send(method, url, _params(params or {}), replayable, headers=dict(headers or {}), **kw)
        for _ in range(3):  # a kept result can expire between the 303 and its fetch: then it is a job again
            if r.status_code != 202 or not r.headers.get("Location"):
                break
            job = self._wait(r)
            r = self._send("GET", urllib.parse.urljoin(self.url, job[JOB_RESULT]))
        if r.status_code >= 400:
            raise error_for(r)
        return r

    def _analysis(self, path: str, params: Params) -> requests.Response:
        """A GET: a job when respond_async (which only computing requests become), waited for either way."""
        headers = {"Prefer": "respond-async"} if self.respond_async else {}
        return self._request("GET", path, params, headers)

    def get(self, path: str, **params: Any) -> Any:
        """The JSON document at path (relative to the daemon's root), e.g. get("v1") or
        get("v1/capture", a="gpt2-small/wpe", b="openai-gpt/wpe"): an analysis' whole answer."""
        return self._analysis(path, params).json()

    def table(self, path: str, params: Optional[Params] = None, table: Optional[str] = None,
              as_: Optional[str] = None) -> Table:
        """One table of an analysis: a DataFrame (CSV, index column first) or an ndarray (NPY)."""
        as_ = as_ or self.as_
        query = dict(params or {}, table=table)
        if as_ == "pandas":
            if pd is None:
                raise ImportError("as_='pandas' needs pandas (Debian: python3-pandas)")
            r = self._analysis(path, dict(query, format="csv"))
            df = pd.read_csv(io.StringIO(r.text), float_precision="round_trip")
            return df.set_index(df.columns[0])
        r = self._analysis(path, dict(query, format="npy"))
        return np.load(io.BytesIO(r.content), allow_pickle=False)

    def analysis(self, name: str, matrix: str, table: Optional[str] = None, as_: Optional[str] = None,
                 **params: Any) -> Table:
        """Any per-matrix analysis by name (pca, spectrum, cosine, vectors, periodicity, outliers,
        toeplitz, averaging, rows, neighbors, ...) as a table; every query parameter passes through."""
        return self.table(_matrix_path(matrix) + "/" + name, params, table, as_)

    def document(self, name: str, matrix: Optional[str] = None, **params: Any) -> Dict[str, Any]:
        """The full JSON answer of an analysis (inputs echoed, solver, errors): a per-matrix one by name
        ("pca", matrix "gpt2-small/wpe"), or, without a matrix, the route under v1 ("capture", a=..., b=...)."""
        path = _matrix_path(matrix) + "/" + name if matrix is not None else "v1/" + name
        return self._analysis(path, params).json()

    # ------------------------------------------------------------------ catalogue

    def models(self, as_: Optional[str] = None) -> Union[Table, List[Dict[str, Any]]]:
        """Every loaded matrix, one row each: id, model, name, shape, dtype, model_axis, items,
        d, bytes, source ("config" or "user"), sha256 (None while the daemon still computes it: a big
        float64 file entry is served before its hash is known; the provenance's sha256_state says so)
        (a DataFrame indexed by id, or a list of dicts)."""
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

    def matrix(self, matrix: str) -> Dict[str, Any]:
        """One matrix's description (shape, dtype, provenance)."""
        return self.get(_matrix_path(matrix))

    def rows(self, matrix: str, rows: Optional[str] = None, as_: Optional[str] = None, **params: Any) -> Table:
        """The selected items themselves, float64, in model orientation."""
        return self.analysis("rows", matrix, as_=as_, rows=rows, **params)

    # ------------------------------------------------------------------ analyses

    def pca(self, matrix: str, k: Optional[int] = 3, rows: Optional[str] = None, table: Optional[str] = None,
            as_: Optional[str] = None, **params: Any) -> Table:
        """PCA coordinates (table "coords", rows x k) or the explained variance (table="variance")."""
        return self.analysis("pca", matrix, table, as_, k=k, rows=rows, **params)

    def spectrum(self, matrix: str, rows: Optional[str] = None, as_: Optional[str] = None, **params: Any) -> Table:
        """Singular values, variance ratios and their cumulative sums, one row per component."""
        return self.analysis("spectrum", matrix, None, as_, rows=rows, **params)

    def cosine(self, matrix: str, mode: Optional[str] = None, row: Optional[int] = None, rows: Optional[str] = None,
               as_: Optional[str] = None, **params: Any) -> Table:
        """Cosine similarity: of one row against the others (row=i), by offset (mode="offset") or the
        whole matrix (mode="matrix", bins=0 for full resolution)."""
        return self.analysis("cosine", matrix, None, as_, mode=mode, row=row, rows=rows, **params)

    def vectors(self, matrix: str, k: Optional[int] = None, rows: Optional[str] = None, table: Optional[str] = None,
                as_: Optional[str] = None, **params: Any) -> Table:
        """The top singular vectors (table "vectors") or values (table="singular_values")."""
        return self.analysis("vectors", matrix, table, as_, k=k, rows=rows, **params)

    def capture(self, a: str, b: str, k: Optional[int] = None, as_: Optional[str] = None, **params: Any) -> Table:
        """How much of b's spectrum a's top-k subspace captures (a, b: "model/matrix")."""
        return self.table("v1/capture", dict(params, a=a, b=b, k=k), None, as_)

    def overlap(self, a: str, b: str, as_: Optional[str] = None, **params: Any) -> Table:
        """Overlaps of a's and b's singular vectors (a grid)."""
        return self.table("v1/overlap", dict(params, a=a, b=b), None, as_)

    def alignment(self, table: Optional[str] = None, as_: Optional[str] = None, **params: Any) -> Table:
        """Q/K/V/O alignment with a reference subspace (/v1/alignment; its parameters as keywords)."""
        return self.table("v1/alignment", params, table, as_)

    def alignment_layers(self, model: str, r: str, table: Optional[str] = None, as_: Optional[str] = None,
                         **params: Any) -> Table:
        """The alignment of every layer of model with the reference r."""
        return self.table("v1/alignment/layers", dict(params, model=model, r=r), table, as_)

    def attention(self, table: Optional[str] = None, as_: Optional[str] = None, **params: Any) -> Table:
        """Positional-only attention per head (/v1/attention; its parameters as keywords)."""
        return self.table("v1/attention", params, table, as_)

    def compare(self, matrices: Iterable[str], analysis: str, as_: Optional[str] = None, **params: Any) -> Table:
        """One analysis of several matrices, stacked with a first column `matrix` (their position).
        rows, center and average take one value for all, or a list with one per matrix (None: the default)."""
        for name in ("rows", "center", "average"):
            if isinstance(params.get(name), (list, tuple)):  # per matrix: ';'-separated (a comma is a row union)
                params[name] = ";".join("" if v is None else str(v) for v in params[name])
        return self.table("v1/compare", dict(params, matrices=list(matrices), analysis=analysis), None, as_)

    # ------------------------------------------------------------------ your own matrices

    def upload(self, matrix: str, data: Union[np.ndarray, str, "os.PathLike[str]", Dict[str, Any]],
               tensor: Optional[str] = None, model_axis: Optional[str] = None,
               description: Optional[str] = None) -> Dict[str, Any]:
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

    def _write(self, matrix: str, body: Union[bytes, IO[bytes]], ctype: str, params: Params) -> Dict[str, Any]:
        r = self._request("PUT", _matrix_path(matrix), params, headers={"Content-Type": ctype},
                          replayable=isinstance(body, bytes), data=body)
        return r.json() if r.content else {}

    def delete(self, matrix: str) -> None:
        """Remove a user matrix (its model goes with its last matrix)."""
        self._request("DELETE", _matrix_path(matrix))

    # ------------------------------------------------------------------ jobs

    def jobs(self, state: Union[None, str, Sequence[str]] = None) -> List[Job]:
        """This client's jobs (GET /v1/jobs' `requests`), newest first: running ones and finished ones
        until they expire; state= keeps those in a state or states ("running", ("queued", "running"))."""
        listing = self.get("v1/jobs")[JOB_LISTING]
        if state is None:
            return listing
        states = (state,) if isinstance(state, str) else tuple(state)
        return [j for j in listing if j.get(JOB_STATE) in states]

    def job(self, job_id: str) -> Job:
        """One job's document (GET /v1/jobs/{id}; a done job's too, not its result)."""
        r = self._send("GET", self._job_url(job_id), allow_redirects=False)
        if r.status_code >= 400:
            raise error_for(r)
        return r.json()

    def cancel(self, job_id: str) -> None:
        """Cancel a job (DELETE /v1/jobs/{id}): its computation stops at its next block."""
        r = self._send("DELETE", self._job_url(job_id))
        if r.status_code >= 400:
            raise error_for(r)

    def wait(self, accepted: Union[requests.Response, str], progress: Optional[Progress] = None) -> Job:
        """Follow a job to its end and return its last document (state "done"; `result` is the result's
        URL): accepted is a 202 response or a job id. Raises the job's problem as its typed error when
        it failed, JobCancelledError when it was cancelled."""
        if isinstance(accepted, requests.Response):
            return self._wait(accepted, progress)
        return self._wait(None, progress, self._job_url(accepted))

    def _job_url(self, job: Union[str, requests.Response]) -> str:
        if isinstance(job, requests.Response):
            if not job.headers.get("Location"):
                raise EmbedscopeError(job.status_code, {"detail": "a 202 answer without a Location"}, job.url)
            return urllib.parse.urljoin(job.url, job.headers["Location"])
        return urllib.parse.urljoin(self.url, "v1/jobs/" + urllib.parse.quote(str(job), safe=""))

    def _wait(self, accepted: Optional[requests.Response], progress: Optional[Progress] = None,
              url: Optional[str] = None) -> Job:
        """Poll a job (the 202 accepted, or its URL) until it is done: its last document."""
        url = url or self._job_url(accepted)
        job: Job = accepted.json() if accepted is not None and _is_json(accepted) else {}
        hint = retry_after(accepted) if accepted is not None else None
        delay = min(self.poll, 0.05)
        bar = _Bar(self.progress if progress is None else progress, job.get(JOB_URL) or url)
        try:
            while True:
                if job:
                    bar.show(job)
                    self._settled(job, url)
                    if job.get(JOB_STATE) == "done" and job.get(JOB_RESULT):  # e.g. a 202 done meanwhile
                        return job
                self.sleep(hint if hint is not None else delay)
                delay = min(self.poll, delay * 2)
                r = self._send("GET", url, allow_redirects=False)
                hint = retry_after(r)
                if r.status_code >= 400:
                    raise error_for(r)
                job = r.json()
                if r.status_code == 303:  # done: the Location is the result (the document says it too)
                    job.setdefault(JOB_RESULT, r.headers.get("Location"))
        except KeyboardInterrupt:
            if self.cancel_on_interrupt:
                try:
                    self.session.delete(url, timeout=min(self.timeout, 10))
                except requests.RequestException:
                    pass
            raise
        finally:
            bar.close()

    @staticmethod
    def _settled(job: Job, url: str) -> None:
        """Raise what a failed or cancelled job means (a done job answers 303, read by the caller)."""
        state = job.get(JOB_STATE)
        if state == "failed":
            problem = job.get(JOB_ERROR)
            if not isinstance(problem, dict):
                problem = {"status": 500, "title": "Job failed", "detail": "the job failed without a problem"}
            raise error_from_problem(problem, url)
        if state == "cancelled":
            raise JobCancelledError(None, {"title": "Job cancelled", "detail": "job %s was cancelled"
                                           % job.get(JOB_ID), "job": job}, url)
