"""embedscope: a Python client of the embedscope daemon.

    from embedscope import Client
    es = Client("http://127.0.0.1:8080")
    helix = es.pca("gpt2-small/wpe", k=3, rows="1:")    # pandas DataFrame, one row per position
"""
from .client import Client
from .errors import (BadRequestError, ClientTimeoutError, ConflictError, EmbedscopeError, ForbiddenError,
                     IncompatibleError, InsufficientStorageError, JobCancelledError, NetworkError, NotAcceptableError,
                     NotFoundError, PayloadTooLargeError, ServiceUnavailableError, TimeoutError, TooManyRequestsError,
                     UnauthorizedError, UnsupportedMediaTypeError)

__version__ = "0.1.0"
__all__ = ["Client", "EmbedscopeError", "BadRequestError", "UnauthorizedError", "ForbiddenError", "NotFoundError",
           "NotAcceptableError", "ConflictError", "PayloadTooLargeError", "UnsupportedMediaTypeError",
           "IncompatibleError", "TooManyRequestsError", "ServiceUnavailableError", "TimeoutError",
           "InsufficientStorageError", "NetworkError", "ClientTimeoutError", "JobCancelledError"]
