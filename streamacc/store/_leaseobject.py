"""The lease object, and reading and conditionally writing it on each kind of store.

:mod:`._lease` holds the protocol; this module knows how a store does compare-and-set:
S3 (through s3fs) with ``If-None-Match``/``If-Match`` and the store's own timestamps, any
other fsspec filesystem by read, compare, write under a process-wide lock.
"""

from __future__ import annotations

import contextlib
import dataclasses
import email.utils
import hashlib
import json
import logging
import math
import os
import socket
import threading
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

__all__ = ["CLOCK_SLACK", "Conflict", "Holder", "LeaseObject", "Seen", "Unsupported", "open_lease_object"]

log = logging.getLogger("streamacc")

_T = TypeVar("_T")

CLOCK_SLACK = 2.0
"""Seconds added to a ttl before a lease counts as expired: HTTP dates have 1 s resolution."""


def _boot_id() -> str:
    with contextlib.suppress(OSError):
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    return ""


def _utc(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclasses.dataclass(frozen=True)
class Holder:
    """What a lease says about its holder."""

    host: str
    boot: str
    pid: int
    token: str
    ttl: float
    seq: int
    expires: str
    """Expiry by the holder's clock, ISO 8601 UTC: shown to people, trusted only where stated."""

    @classmethod
    def me(cls, token: str, ttl: float, seq: int) -> Holder:
        return cls(socket.gethostname(), _boot_id(), os.getpid(), token, ttl, seq, _utc(time.time() + ttl))

    def to_bytes(self) -> bytes:
        text = json.dumps(dataclasses.asdict(self), sort_keys=True)
        node = {"zarr_format": 3, "node_type": "group", "attributes": {"streamacc_lease": text}}
        return json.dumps(node, indent=2).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> Holder | None:
        """The holder a lease object names, or None when it is not a lease streamacc wrote."""
        try:
            fields = json.loads(json.loads(data)["attributes"]["streamacc_lease"])
            holder = cls(**{f.name: fields[f.name] for f in dataclasses.fields(cls)})
        except (ValueError, KeyError, TypeError):
            return None
        numbers_ok = isinstance(holder.pid, int) and isinstance(holder.ttl, int | float) and holder.ttl > 0
        return holder if numbers_ok and isinstance(holder.token, str) else None

    def __str__(self) -> str:
        return f"{self.host} pid {self.pid}"

    def on_this_machine(self) -> bool:
        return self.host == socket.gethostname() and self.boot == _boot_id()

    def expires_at(self) -> float:
        try:
            return datetime.strptime(self.expires, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
        except ValueError:
            return -math.inf


@dataclasses.dataclass(frozen=True)
class Seen:
    """One read of a lease object."""

    holder: Holder | None
    version: str
    """What a conditional write must match: the ETag, or a digest of the content."""
    age: float | None
    """Seconds since it was last written, by the store's clock; None where the store does not say."""

    def remaining(self, ttl: float) -> float:
        """Seconds until it counts as expired (<= 0: expired)."""
        ttl = self.holder.ttl if self.holder else ttl
        if self.age is not None:
            return ttl + CLOCK_SLACK - self.age
        if self.holder is None:
            return -math.inf  # unreadable and undatable: not a lease anyone holds
        return self.holder.expires_at() + CLOCK_SLACK - time.time()


class Conflict(Exception):
    """A conditional write or delete found the lease changed (or gone)."""


class Unsupported(Exception):
    """The store rejects conditional requests."""


class _S3LeaseObject:
    """The lease object on S3, through s3fs, with conditional requests."""

    def __init__(self, fs: Any, path: str) -> None:
        if fs.asynchronous:  # zarr's instance lives on zarr's event loop: use our own, synchronous one
            fs = type(fs)(**{**fs.storage_options, "asynchronous": False})
        self.fs = fs
        self.bucket, self.key, _ = fs.split_path(path)
        self.conditional = True

    def _call(self, fn: Callable[[], Awaitable[_T]], timeout: float) -> _T:
        from fsspec.asyn import sync

        result: _T = sync(self.fs.loop, fn, timeout=timeout)  # fsspec comes without type information
        return result

    def read(self, timeout: float) -> Seen | None:
        async def get() -> tuple[bytes, dict[str, Any]]:
            resp = await self.fs._call_s3("get_object", Bucket=self.bucket, Key=self.key)
            try:
                return await resp["Body"].read(), resp
            finally:
                resp["Body"].close()

        try:
            data, resp = self._call(get, timeout)
        except FileNotFoundError:
            return None
        age = None
        date = resp.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
        if date and resp.get("LastModified"):
            with contextlib.suppress(TypeError, ValueError):
                age = (email.utils.parsedate_to_datetime(date) - resp["LastModified"]).total_seconds()
        return Seen(Holder.from_bytes(data), resp["ETag"], age)

    def _put(self, data: bytes, timeout: float, **condition: str) -> str:
        if not self.conditional:
            condition = {}

        async def put() -> str:
            resp = await self.fs._call_s3("put_object", Bucket=self.bucket, Key=self.key, Body=data, **condition)
            etag: str = resp["ETag"]
            return etag

        try:
            return self._call(put, timeout)
        except Exception as exc:
            _raise_conditional(exc)
            raise

    def create(self, data: bytes, timeout: float) -> str:
        if self.read(timeout) is not None:  # before any write: a store may turn out to ignore If-None-Match
            raise Conflict
        return self._put(data, timeout, IfNoneMatch="*")

    def replace(self, data: bytes, version: str, timeout: float) -> str:
        if not self.conditional:
            seen = self.read(timeout)
            if seen is None or seen.version != version:
                raise Conflict
        return self._put(data, timeout, IfMatch=version)

    def _delete(self, timeout: float, **condition: str) -> None:
        async def delete() -> None:
            await self.fs._call_s3("delete_object", Bucket=self.bucket, Key=self.key, **condition)

        try:
            self._call(delete, timeout)
        except FileNotFoundError:
            pass
        except Exception as exc:
            _raise_conditional(exc)
            raise

    def delete(self, version: str, timeout: float) -> None:
        if self.conditional:
            try:
                return self._delete(timeout, IfMatch=version)
            except Unsupported:  # conditional deletes came to S3 later than conditional writes
                pass
        seen = self.read(timeout)
        if seen is not None:
            if seen.version != version:
                raise Conflict
            self._delete(timeout)

    def probe(self, data: bytes, version: str, timeout: float) -> str:
        """Check that the store honours both conditions; return the lease's version afterwards.

        Both probes rewrite the holder's own content, so a store that ignores them changes
        nothing but the lease's timestamp.
        """
        for condition in ({"IfNoneMatch": "*"}, {"IfMatch": '"streamacc-probe"'}):
            try:
                version = self._put(data, timeout, **condition)
            except Conflict:
                continue
            except Unsupported:
                pass
            self.conditional = False
            log.warning(
                "s3://%s/%s: the store ignores conditional writes (%s); the writer lease is best effort",
                self.bucket,
                self.key,
                next(iter(condition)),
            )
            break
        return version


def _raise_conditional(exc: BaseException) -> None:
    """Re-raise a failed precondition as Conflict and a rejected one as Unsupported."""
    cause = exc.__cause__ if exc.__cause__ is not None else exc
    response = getattr(cause, "response", None) or {}
    code = response.get("Error", {}).get("Code", "")
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    if isinstance(exc, FileExistsError) or code in ("PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey"):
        raise Conflict from exc
    if status in (409, 412):
        raise Conflict from exc
    if code == "NotImplemented" or status == 501:
        raise Unsupported from exc


_PLAIN_LOCK = threading.Lock()
"""Makes read-check-write atomic among the threads of this process (exact for memory://)."""


class _PlainLeaseObject:
    """The lease object on a filesystem without conditional writes: read, compare, write."""

    def __init__(self, fs: Any, path: str) -> None:
        self.fs = fs
        self.path = path
        self.conditional = "memory" in (fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,))
        if not self.conditional:
            log.warning("%s: %s has no conditional writes; the writer lease is best effort", path, type(fs).__name__)

    def read(self, timeout: float) -> Seen | None:
        try:
            data = self.fs.cat_file(self.path)
        except FileNotFoundError:
            return None
        return Seen(Holder.from_bytes(data), hashlib.sha256(data).hexdigest(), None)

    def _write(self, data: bytes, expect: str | None, timeout: float) -> str:
        with _PLAIN_LOCK:
            seen = self.read(timeout)
            if (seen.version if seen else None) != expect:
                raise Conflict
            self.fs.makedirs(self.path.rsplit("/", 1)[0], exist_ok=True)  # local files need the folders
            self.fs.pipe_file(self.path, data)
        return hashlib.sha256(data).hexdigest()

    def create(self, data: bytes, timeout: float) -> str:
        return self._write(data, None, timeout)

    def replace(self, data: bytes, version: str, timeout: float) -> str:
        return self._write(data, version, timeout)

    def delete(self, version: str, timeout: float) -> None:
        with _PLAIN_LOCK:
            seen = self.read(timeout)
            if seen is not None:
                if seen.version != version:
                    raise Conflict
                self.fs.rm_file(self.path)

    def probe(self, data: bytes, version: str, timeout: float) -> str:
        return version


LeaseObject = _S3LeaseObject | _PlainLeaseObject


def open_lease_object(fs: Any, path: str) -> LeaseObject:
    """The lease object at ``path`` on filesystem ``fs``, with the best compare-and-set the store has."""
    protocols = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
    if hasattr(fs, "_call_s3") and {"s3", "s3a"} & set(protocols):
        return _S3LeaseObject(fs, path)
    return _PlainLeaseObject(getattr(fs, "sync_fs", fs), path)  # zarr wraps synchronous filesystems: unwrap
