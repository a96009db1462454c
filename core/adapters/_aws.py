"""What an AWS call may raise, for the adapters to wrap into the project's own errors.

botocore raises two families. ``ClientError``: the service answered with an error (a code such as
``ConditionalCheckFailedException`` or ``QueueDoesNotExist`` in ``exc.response``). ``BotoCoreError``:
no answer came, after the SDK's own retries (``ConnectionError``: ``EndpointConnectionError``,
``ConnectTimeoutError``, ...; ``HTTPClientError``: ``ReadTimeoutError``, ``ConnectionClosedError``, ...),
or no credentials could be had (``NoCredentialsError``, ``CredentialRetrievalError``: on EC2 the
instance profile's credentials come over the network too). Every adapter catches :data:`AWS_ERRORS`, so
any of them becomes the same ``...Error`` its callers handle (logged and retried, a 503, one line); a
handler that branches on a service's error code reads it with :func:`error_code`, which is None for a
failure without an answer (the generic "could not reach the service" path). The rest of
``BotoCoreError`` (``ParamValidationError``, ``NoRegionError``, ...) is a bug or a misconfiguration of
the caller, not a failure of AWS: it is left to propagate, loudly.

Imported by ``functions`` and ``workers``. ``profiles`` does not import ``functions`` (it stays
importable on its own, botocore only inside its S3 adapter): ``profiles/s3store.py`` names the same
classes itself.
"""

from __future__ import annotations

from botocore.exceptions import (
    ClientError,
    ConnectionError,  # noqa: A004 - botocore's, not the builtin
    CredentialRetrievalError,
    HTTPClientError,
    NoCredentialsError,
)

__all__ = ["AWS_ERRORS", "error_code"]

#: a service's error answer, or no answer at all (network, timeout, credentials)
AWS_ERRORS: tuple[type[Exception], ...] = (
    ClientError,
    ConnectionError,
    HTTPClientError,
    NoCredentialsError,
    CredentialRetrievalError,
)


def error_code(exc: BaseException) -> str | None:
    """The service's error code of a ``ClientError`` (``"ConditionalCheckFailedException"``, ...);
    None for a ``BotoCoreError`` (the service was not reached) or a ``ClientError`` without one."""
    if not isinstance(exc, ClientError):
        return None
    code = exc.response.get("Error", {}).get("Code")
    return str(code) if code else None
