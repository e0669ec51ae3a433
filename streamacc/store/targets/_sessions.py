"""Close the HTTP sessions that fsspec filesystems keep open, before a process ends.

s3fs keeps one aiohttp session per cached filesystem. It closes a synchronous instance's
session when the instance is collected, but not an asynchronous one's (the kind zarr's
``FsspecStore`` makes), and a session collected open prints ``Unclosed client session``.
A cluster worker that read or wrote S3 prints that when it shuts down, so workers (and
test sessions) call :func:`close_store_sessions` first.
"""

from __future__ import annotations

import contextlib
import sys

__all__ = ["close_store_sessions"]


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
