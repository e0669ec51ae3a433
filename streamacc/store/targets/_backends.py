"""An object store's fsspec clients at either end of a process: the first question asked, the sessions closed last.

The first question: is the store there, and do its options make sense? Asked once per
store and process before anything else, so that a wrong bucket, an option the backend
does not take, an endpoint nobody answers at or a backend that is not installed fails at
once, in one line that says what to fix, instead of deep inside a write with the client
library's own words (``TypeError: AioSession.__init__() got an unexpected keyword
argument``) after its retries (14 s for a refused connection). On S3 the question is one
HEAD of the bucket, asked with two attempts and a 5 s connect timeout whatever the store
itself later uses.

The last: s3fs keeps one aiohttp session per cached filesystem. It closes a synchronous
instance's session when the instance is collected, but not an asynchronous one's (the
kind zarr's ``FsspecStore`` makes), and a session collected open prints ``Unclosed client
session``. A cluster worker that read or wrote S3 prints that when it shuts down, so
workers (and test sessions) call :func:`close_store_sessions` first.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
from typing import Any

from ...errors import InputError, NoOutputError, StoreError, arg, one_line
from ..lease import describe_store_failure, is_store_failure

__all__ = ["backend_missing", "check_store", "close_store_sessions"]

PROBE_CONFIG = {"retries": {"max_attempts": 2, "mode": "standard"}, "connect_timeout": 5}
"""botocore settings of the probe alone: a dead endpoint answers within seconds, not after every retry."""

_asked: set[str] = set()


S3_EXTRA = "pip install 'streamacc[s3]'"
"""What S3 needs, fsspec and s3fs, as the other extras are named."""


def backend_missing(url: str) -> StoreError:
    """The error for a URL whose fsspec backend is not installed, naming the package (or the extra) to install."""
    protocol = url.split("://", 1)[0]
    if protocol in ("s3", "s3a"):
        return StoreError(
            f"cannot open {url!r}: S3 is opened through s3fs and fsspec (the s3 extra), not installed here; {S3_EXTRA}"
        )
    try:
        from fsspec.registry import known_implementations
    except ImportError:
        return StoreError(
            f"cannot open {url!r}: URLs are opened through fsspec, which is not installed; {S3_EXTRA} for S3, or "
            f"pip install fsspec and the backend for {protocol}://"
        )
    known = known_implementations.get(protocol, {})
    package = str(known.get("class", "")).split(".", 1)[0]
    fix = f"pip install {package}" if package else "install the fsspec backend for it"
    return StoreError(f"cannot open {url!r}: no fsspec backend for {protocol}:// is installed; {fix}")


def _bad_option(url: str, exc: TypeError) -> InputError:
    found = re.search(r"keyword argument '(\w+)'", str(exc))
    name = f" {found.group(1)!r}" if found else ""
    return InputError(
        f"the storage option{name} is not one that the backend of {url} takes ({one_line(exc)}); "
        f"check {arg('storage_options')}"
    )


def _head_bucket(fs: Any, bucket: str, storage_options: dict[str, Any] | None) -> bool | None:
    """Whether an S3 bucket exists: True, False (it does not), or None (not allowed to ask)."""
    options = dict(storage_options or {})
    options["config_kwargs"] = {**options.get("config_kwargs", {}), **PROBE_CONFIG}
    options["skip_instance_cache"] = True  # a probe of its own, whatever the caller's caching
    probe = type(fs)(**options)
    probe.retries = 1
    try:
        probe.call_s3("head_bucket", Bucket=bucket)
    except FileNotFoundError:
        return False
    except PermissionError:
        return None  # a policy may allow writing objects without listing the bucket
    return True


def check_store(store: Any, url: str, storage_options: dict[str, Any] | None) -> None:
    """Ask the zarr ``FsspecStore`` at ``url`` whether its bucket exists, refusing with the fix otherwise."""
    fs = store.fs
    protocol = fs.protocol[0] if isinstance(fs.protocol, (tuple, list)) else fs.protocol
    bucket = store.path.split("/", 1)[0]
    key = json.dumps([protocol, bucket, storage_options], sort_keys=True, default=repr)
    if key in _asked or protocol not in ("s3", "s3a"):
        return
    try:
        found = _head_bucket(fs, bucket, storage_options)
    except TypeError as exc:
        raise _bad_option(url, exc) from None
    except Exception as exc:
        if not is_store_failure(exc):
            raise
        raise StoreError(
            f"cannot reach {url} ({describe_store_failure(exc)}); check the endpoint and credentials in "
            f"{arg('storage_options')} (and the environment), and the network"
        ) from None
    if found is False:
        raise NoOutputError(f"the bucket {bucket!r} of {url} does not exist; check the URL, or create the bucket first")
    _asked.add(key)


def close_store_sessions() -> int:
    """Close every cached s3fs instance's session and forget the instances; return how many were open."""
    s3fs = sys.modules.get("s3fs")
    if s3fs is None:
        return 0
    closed = 0
    for fs in list(s3fs.S3FileSystem._cache.values()):
        creator = getattr(fs, "_s3creator", None)
        if creator is None:
            continue
        with contextlib.suppress(Exception):
            if fs.asynchronous:  # zarr's instances: their session lives on zarr's event loop
                from ._zarrapi import sync

                sync(creator.__aexit__(None, None, None))
            else:
                s3fs.S3FileSystem.close_session(fs.loop, creator)
            closed += 1
        fs._s3 = fs._s3creator = None
    s3fs.S3FileSystem.clear_instance_cache()
    return closed
