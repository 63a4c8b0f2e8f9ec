"""Typed errors. Everything the client raises about the daemon is an `EmbedscopeError`:

- a refusal of the daemon is its RFC 9457 problem document (application/problem+json), carried whole, as
  the class of its status (`BadRequestError` for 400, ...), also when it is a failed job's `error`;
- no answer at all is a `NetworkError` (connection refused, reset or cut in the middle of a reply), or a
  `ClientTimeoutError` when the daemon said nothing within the client's `timeout`; their `status` is None
  and the `requests` exception they wrap is their `__cause__`;
- a job cancelled before it finished (`DELETE /v1/jobs/{id}`, by this client or another) is a
  `JobCancelledError`."""
from typing import Any, Dict, Mapping, Optional, Type

import requests

Problem = Dict[str, Any]


class EmbedscopeError(Exception):
    """An answer that is not a success, or no answer. `problem` is the daemon's problem document
    (a dict: type, title, status, detail, instance, and param, limit, request_id when given; for an
    error without an answer, a document the client made: title and detail), `status` the HTTP status
    (None without an answer); `param` names the parameter, file or rule at fault."""

    retry_after: Optional[int] = None

    def __init__(self, status: Optional[int], problem: Optional[Mapping[str, Any]], url: Optional[str] = None):
        self.status = status
        self.problem: Problem = dict(problem or {})
        self.url = url
        detail = self.problem.get("detail") or self.problem.get("title") or (
            "HTTP %d" % status if status is not None else "no answer")
        super().__init__("%s %s: %s" % (status if status is not None else "-", self.slug or "error", detail))

    @property
    def slug(self) -> str:
        """The problem type's last segment, e.g. "limit-exceeded"."""
        return str(self.problem.get("type") or "").rsplit("/", 1)[-1]

    @property
    def detail(self) -> Optional[str]:
        return self.problem.get("detail")

    @property
    def param(self) -> Optional[str]:
        return self.problem.get("param")

    @property
    def request_id(self) -> Optional[str]:
        return self.problem.get("request_id")


class BadRequestError(EmbedscopeError):
    """400: a parameter, body or limit refused; `param` says which."""


class UnauthorizedError(EmbedscopeError):
    """401: a write without the right bearer token (Client(token=...))."""


class ForbiddenError(EmbedscopeError):
    """403: writes are disabled on this daemon (uploads.enabled), or a cross-site write."""


class NotFoundError(EmbedscopeError):
    """404: no such model, matrix, route or job (a finished job is kept limits.job_ttl_s)."""


class NotAcceptableError(EmbedscopeError):
    """406: the endpoint cannot answer in the format asked for."""


class ConflictError(EmbedscopeError):
    """409: e.g. writing into a configured (read-only) model."""


class PayloadTooLargeError(EmbedscopeError):
    """413: the upload is larger than uploads.max_body_bytes."""


class UnsupportedMediaTypeError(EmbedscopeError):
    """415: an upload body of a type the daemon does not read."""


class IncompatibleError(EmbedscopeError):
    """422: matrices that cannot be compared (shapes, axes)."""


class TooManyRequestsError(EmbedscopeError):
    """429: this client holds limits.max_jobs_per_client jobs; `retry_after` is when one is forgotten."""


class ServiceUnavailableError(EmbedscopeError):
    """503: busy (queue full), shutting down or not ready yet; `retry_after` is the server's hint in seconds."""


class TimeoutError(EmbedscopeError):  # noqa: A001 - the daemon's 504 (and the client's own timeout), not the builtin
    """504: the computation ran past limits.request_timeout_s. `ClientTimeoutError`, the client's own
    timeout, is one too: `except embedscope.TimeoutError` catches both."""


class InsufficientStorageError(EmbedscopeError):
    """507: user matrices would exceed uploads.max_total_bytes."""


class NetworkError(EmbedscopeError):
    """No answer: the connection was refused, reset or cut before the reply was whole (after the
    client's retries of an idempotent request)."""

    def __init__(self, detail: str, url: Optional[str] = None):
        super().__init__(None, {"title": type(self).__name__, "detail": detail}, url)


class ClientTimeoutError(NetworkError, TimeoutError):
    """The daemon sent nothing for the client's `timeout` seconds (a NetworkError and a TimeoutError)."""


class JobCancelledError(EmbedscopeError):
    """The job computing this request was cancelled (DELETE /v1/jobs/{id}) before it finished;
    `problem["job"]` is the job's last document."""


BY_STATUS: Dict[int, Type[EmbedscopeError]] = {
    400: BadRequestError, 401: UnauthorizedError, 403: ForbiddenError, 404: NotFoundError, 406: NotAcceptableError,
    409: ConflictError, 413: PayloadTooLargeError, 415: UnsupportedMediaTypeError, 422: IncompatibleError,
    429: TooManyRequestsError, 503: ServiceUnavailableError, 504: TimeoutError, 507: InsufficientStorageError}


def retry_after(response: requests.Response) -> Optional[int]:
    """The Retry-After header's seconds (RFC 9110 delay-seconds), None when absent or a date."""
    value = response.headers.get("Retry-After", "").strip()
    return int(value) if value.isdigit() else None


def error_from_problem(problem: Mapping[str, Any], url: Optional[str] = None) -> EmbedscopeError:
    """The typed exception of a problem document (e.g. a failed job's `error`)."""
    status = problem.get("status") if isinstance(problem.get("status"), int) else 500
    return BY_STATUS.get(status, EmbedscopeError)(status, problem, url)


def error_for(response: requests.Response) -> EmbedscopeError:
    """The typed exception of a failed requests.Response."""
    try:
        problem = response.json()
    except ValueError:
        problem = {"title": response.reason, "detail": response.text[:500]}
    if not isinstance(problem, dict):
        problem = {"detail": str(problem)[:500]}
    err = BY_STATUS.get(response.status_code, EmbedscopeError)(response.status_code, problem, response.url)
    err.retry_after = retry_after(response)
    return err
