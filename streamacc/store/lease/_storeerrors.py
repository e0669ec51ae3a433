"""Which exceptions mean "the store failed", for the writer's "N of M steps committed" message.

A local disk reports failures as :class:`OSError`, and s3fs translates the S3 errors it
understands into ``OSError`` subclasses too (``FileNotFoundError`` for a missing bucket,
``PermissionError`` for a denied request, ``FileExistsError`` for a failed
``If-None-Match``). But an unreachable or dying endpoint reaches the caller untranslated:
botocore's ``EndpointConnectionError`` and ``ConnectionClosedError`` derive from
``BotoCoreError``, a plain ``Exception``; an error code s3fs does not know stays a
``ClientError``; and aiohttp's ``ClientError`` family is ``Exception`` too, except
``ClientOSError``. Other fsspec backends raise their HTTP libraries' own classes.

Classes are recognised only from modules already imported: an exception cannot be an
instance of a class that was never loaded, so nothing is imported here to check.
"""

from __future__ import annotations

import sys

__all__ = ["describe_store_failure", "is_store_failure"]

_FOREIGN_FAILURES = (
    ("botocore.exceptions", "BotoCoreError"),  # EndpointConnectionError, ReadTimeoutError, NoCredentialsError...
    ("botocore.exceptions", "ClientError"),  # a service error s3fs did not translate
    ("aiohttp", "ClientError"),  # ServerDisconnectedError, ClientPayloadError...
    ("urllib3.exceptions", "HTTPError"),
    ("gcsfs.retry", "HttpError"),
    ("azure.core.exceptions", "AzureError"),
)
"""(module, class) of failures that are not OSErrors, by the library that raises them."""


def _foreign_classes() -> tuple[type[BaseException], ...]:
    found = []
    for module_name, class_name in _FOREIGN_FAILURES:
        cls = getattr(sys.modules.get(module_name), class_name, None)
        if isinstance(cls, type) and issubclass(cls, BaseException):
            found.append(cls)
    return tuple(found)


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def is_store_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is the store failing (I/O, network, service, permissions), not a bug or an input.

    streamacc's own errors are not: they already carry their message. An exception group
    is a store failure when every exception in it is.
    """
    from ...errors import StreamaccError

    leaves = _leaves(exc)
    foreign = _foreign_classes()
    return all(not isinstance(leaf, StreamaccError) and isinstance(leaf, (OSError, *foreign)) for leaf in leaves)


def describe_store_failure(exc: BaseException, *, limit: int = 200) -> str:
    """One line saying what went wrong, for inside a sentence: the message, then the class if not built in.

    E.g. ``No space left on device``, ``Could not connect to the endpoint URL:
    "http://127.0.0.1:9000/bucket/out.zarr/zarr.json" (EndpointConnectionError)``.
    """
    exc = _leaves(exc)[0]
    text = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    text = " ".join(text.split())
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    name = type(exc).__name__
    if not text:
        return name
    return text if type(exc).__module__ == "builtins" else f"{text} ({name})"
