"""Typed errors: every refusal of the daemon is an RFC 9457 problem document
(application/problem+json); the exception carries it whole."""


class EmbedscopeError(Exception):
    """An answer that is not a success. `problem` is the daemon's problem document
    (a dict: type, title, status, detail, instance, and param, limit, request_id when
    given), `status` the HTTP status; `param` names the parameter, file or rule at fault."""

    def __init__(self, status, problem, url=None):
        self.status = status
        self.problem = problem or {}
        self.url = url
        detail = self.problem.get("detail") or self.problem.get("title") or "HTTP %d" % status
        super().__init__("%d %s: %s" % (status, self.slug or "error", detail))

    @property
    def slug(self):
        """The problem type's last segment, e.g. "limit-exceeded"."""
        return (self.problem.get("type") or "").rsplit("/", 1)[-1]

    @property
    def detail(self):
        return self.problem.get("detail")

    @property
    def param(self):
        return self.problem.get("param")

    @property
    def request_id(self):
        return self.problem.get("request_id")


class BadRequestError(EmbedscopeError):
    """400: a parameter, body or limit refused; `param` says which."""


class UnauthorizedError(EmbedscopeError):
    """401: a write without the right bearer token (Client(token=...))."""


class ForbiddenError(EmbedscopeError):
    """403: writes are disabled on this daemon (uploads.enabled)."""


class NotFoundError(EmbedscopeError):
    """404: no such model, matrix, route or job."""


class NotAcceptableError(EmbedscopeError):
    """406: the endpoint cannot answer in the format asked for."""


class ConflictError(EmbedscopeError):
    """409: e.g. writing into a configured (read-only) model."""


class PayloadTooLargeError(EmbedscopeError):
    """413: the upload is larger than uploads.max_body_bytes."""


class UnsupportedMediaTypeError(EmbedscopeError):
    """415: an upload body of a type the daemon does not read."""


class TooManyRequestsError(EmbedscopeError):
    """429: this client holds limits.max_jobs_per_client jobs; `retry_after` is when one is forgotten."""

    retry_after = None


class ServiceUnavailableError(EmbedscopeError):
    """503: busy (queue full) or not ready yet; `retry_after` is the server's hint in seconds."""

    retry_after = None


class TimeoutError(EmbedscopeError):  # noqa: A001 - the daemon's 504, not the builtin
    """504: the computation ran past limits.request_timeout_s."""


class InsufficientStorageError(EmbedscopeError):
    """507: user matrices would exceed uploads.max_total_bytes."""


BY_STATUS = {400: BadRequestError, 401: UnauthorizedError, 403: ForbiddenError, 404: NotFoundError,
             406: NotAcceptableError, 409: ConflictError, 413: PayloadTooLargeError,
             415: UnsupportedMediaTypeError, 429: TooManyRequestsError, 503: ServiceUnavailableError, 504: TimeoutError,
             507: InsufficientStorageError}


def error_from_problem(problem, url=None):
    """The typed exception of a problem document (e.g. a failed job's)."""
    status = problem.get("status") if isinstance(problem.get("status"), int) else 500
    return BY_STATUS.get(status, EmbedscopeError)(status, problem, url)


def error_for(response):
    """The typed exception of a failed requests.Response."""
    try:
        problem = response.json()
    except ValueError:
        problem = {"title": response.reason, "detail": response.text[:500]}
    if not isinstance(problem, dict):
        problem = {"detail": str(problem)[:500]}
    err = BY_STATUS.get(response.status_code, EmbedscopeError)(response.status_code, problem, response.url)
    if response.status_code in (429, 503) and response.headers.get("Retry-After", "").isdigit():
        err.retry_after = int(response.headers["Retry-After"])
    return err
