"""An exclusive writer lease on object storage: one writer at a time, and a dead writer's expires.

A local directory is locked with ``flock``, which the kernel drops when its holder dies.
An object store has nothing like it, so a writer holds a *lease*: the object
``<root>/_streamacc/lease/zarr.json``, a Zarr v3 group node (readers listing the
hierarchy see an ordinary empty group) whose attribute ``streamacc_lease`` is JSON text
naming the holder (host, boot id, pid), a random token, the ttl in seconds, a renewal
counter, and the expiry by the holder's clock (for people; see below).

Protocol on S3 (through s3fs; AWS, MinIO, R2 and moto's server support these headers):

- *Acquire*: ``PUT`` with ``If-None-Match: *``, which fails (412) if the lease exists.
- *Renew*: every ``ttl / 4`` seconds, ``PUT`` with ``If-Match: <the ETag it last
  wrote>``, so that a holder never overwrites a lease someone else took over (a renewal
  whose reply was lost is recognised by reading back its own token).
- *Expiry* is judged on the store's clock alone: the age of a lease is the ``Date`` header
  of the reply that read it minus the object's ``Last-Modified``, both stamped by the
  store, so the writers' clocks never enter. A lease is expired when its age exceeds its
  ttl plus 2 s (both stamps have whole-second resolution).
- *Take over* an expired lease: ``PUT`` with ``If-Match: <the ETag seen expired>``; of two
  racing takers only one matches. Every acquisition then reads the lease back after a
  short pause and keeps it only if its own token is there, which also settles races on
  stores whose conditional check is not atomic (moto's threaded server checks, then
  writes).
- *Release*: ``DELETE`` with ``If-Match``, so a lease lost meanwhile is left alone.

The holder counts its lease valid for ``3/4 ttl`` after *sending* its last successful
renewal (its own monotonic clock). Anyone else sees it expire no earlier than ``ttl``
after that renewal was *stored*, which is later, so the holder stops first and the last
``ttl / 4`` (15 s by default) covers a write in flight. :meth:`Lease.check`, called
before every write request (``_fence.py``), raises :class:`LockedError` once the lease
was taken over or could not be renewed in time (store unreachable), so a writer stops
before it writes anything more; :class:`LeaseView` does the same for cluster workers.

A new writer finding a live lease is refused at once with the holder's name. If the
holder ran on this machine (same host and boot id) and its process is gone, the new
writer waits for the lease to expire (at most one ttl) and takes it over, so a resume
right after a kill just works; a holder elsewhere cannot be known dead, so the error says
when its lease expires.

Stores without conditional writes: a lease on ``memory://`` lives in this process, and a
process-wide lock makes its read-check-write exact. Any other fsspec filesystem, and an
S3-compatible store found at acquisition to ignore ``If-None-Match``/``If-Match`` (it
accepts a create of an existing key) or to reject them, gets the same read-check-write
without that guarantee, plus a logged warning: the read-back still refuses a second
writer that starts after the first, but two started within moments of each other are not
reliably kept apart, and expiry is judged by the holder's written expiry against the
local clock (clocks must agree to within a few seconds).

The ttl is 60 s; ``STREAMACC_LEASE_SECONDS`` overrides it (at least 1 s; tests use 1 to
2 s). A writer killed on another machine blocks a resume for at most that long.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import secrets
import threading
import time
from pathlib import Path
from typing import Any

from ..errors import InputError, LockedError, arg
from ._fence import describe_store_failure
from ._leaseobject import CLOCK_SLACK, Conflict, Holder, LeaseObject, Seen, Unsupported, open_lease_object

__all__ = [
    "DEFAULT_LEASE_SECONDS",
    "LEASE_ENV",
    "LEASE_KEY",
    "MIN_LEASE_SECONDS",
    "Lease",
    "LeaseView",
    "lease_seconds",
]

log = logging.getLogger("streamacc")

LEASE_KEY = "_streamacc/lease/zarr.json"
"""Where the lease lives, relative to the output's root."""

LEASE_ENV = "STREAMACC_LEASE_SECONDS"
DEFAULT_LEASE_SECONDS = 60.0
MIN_LEASE_SECONDS = 1.0
"""Shorter leases leave no time to renew over a network (a renewal every quarter of it)."""
SETTLE_SECONDS = 0.2
"""Pause before reading back a lease just written, longer than a request's round trip."""


def lease_seconds() -> float:
    """The lease ttl: ``STREAMACC_LEASE_SECONDS`` if set, else 60."""
    raw = os.environ.get(LEASE_ENV, "").strip()
    if not raw:
        return DEFAULT_LEASE_SECONDS
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise InputError(f"{LEASE_ENV}={raw!r} is not a positive number of seconds; set e.g. {LEASE_ENV}=60")
    if value < MIN_LEASE_SECONDS:
        raise InputError(
            f"{LEASE_ENV}={raw!r} is shorter than {MIN_LEASE_SECONDS:g} s, too short to renew a lease over a network "
            f"(every quarter of it); set e.g. {LEASE_ENV}=60"
        )
    return value


def _process_gone(pid: int) -> bool:
    """Whether no live process has this pid here (a zombie counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    with contextlib.suppress(OSError, IndexError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] == "Z"
    return False


class Lease:
    """An exclusive writer lease on ``<root>/_streamacc/lease/zarr.json``, renewed in the background.

    Take it with :meth:`acquire` (or as a context manager), call :meth:`check` before every
    commit, and :meth:`release` it at the end.
    """

    def __init__(self, lease_object: LeaseObject, what: str, ttl: float, command: str | None = None) -> None:
        self._object = lease_object
        self.what = what
        self.ttl = ttl
        self.command = command or arg('mode', 'resume')
        self.token = secrets.token_hex(16)
        self._seq = 0
        self._version = ""
        self._valid_from = -math.inf
        self._lost: str | None = None
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def _timeout(self) -> float:
        """Longest wait for one store request (aiohttp alone may wait forever for a 100-continue)."""
        return max(self.ttl / 4, 5.0)

    @classmethod
    def acquire(cls, fs: Any, root: str, what: str, *, ttl: float | None = None, command: str | None = None) -> Lease:
        """Take the lease of the output at ``root`` on filesystem ``fs``, or raise LockedError.

        ``what`` names the output in messages (its URL), ``command`` the option to rerun
        with once the other writer is gone (default: resume).
        """
        lease = cls(open_lease_object(fs, f"{root.rstrip('/')}/{LEASE_KEY}"), what, ttl or lease_seconds(), command)
        lease._take()
        lease._renew()  # acquisition took a few requests: start the validity afresh
        lease._thread = threading.Thread(target=lease._renew_loop, name="streamacc-lease", daemon=True)
        lease._thread.start()
        return lease

    def _body(self) -> bytes:
        return Holder.me(self.token, self.ttl, self._seq).to_bytes()

    def _take(self) -> None:
        obj, timeout = self._object, self._timeout
        for _ in range(8):  # each pass ends in success, an error, or a lease that changed meanwhile
            body, sent = self._body(), time.monotonic()
            try:
                obj.create(body, timeout)
            except Conflict:
                seen = obj.read(timeout)
                if seen is None:
                    continue  # released between our write and our read
                remaining = seen.remaining(self.ttl)
                if remaining > 0:
                    if not (seen.holder and seen.holder.on_this_machine() and _process_gone(seen.holder.pid)):
                        raise LockedError(self._held(seen, remaining)) from None
                    log.warning(
                        "%s: waiting %.0f s for the lease of %s (no longer running) to expire",
                        self.what,
                        remaining,
                        seen.holder,
                    )
                    time.sleep(remaining + 0.1)
                    continue
                body, sent = self._body(), time.monotonic()
                try:
                    obj.replace(body, seen.version, timeout)
                except Conflict:
                    continue  # renewed or taken over meanwhile: judge it afresh
            except Unsupported:
                log.warning("%s: the store rejects conditional writes; the writer lease is best effort", self.what)
                obj.conditional = False
                continue
            time.sleep(SETTLE_SECONDS)
            seen = obj.read(timeout)
            if seen is None or seen.holder is None or seen.holder.token != self.token:
                continue  # lost a race to another taker: judge what is there now
            self._version = obj.probe(body, seen.version, timeout)
            self._valid_from = sent
            return
        seen = obj.read(timeout)
        raise LockedError(self._held(seen, seen.remaining(self.ttl) if seen else self.ttl))

    def _held(self, seen: Seen | None, remaining: float) -> str:
        holder = seen.holder if seen else None
        if holder is not None and seen is not None and seen.age is None:
            when = f"at {holder.expires} by that writer's clock"
        else:
            when = f"in {max(remaining, 0):.0f} s"
        return (
            f"{self.what} is being written by {holder or 'another writer'} (its lease expires {when} unless "
            f"renewed); wait for it to finish or stop it, then rerun with {self.command}"
        )

    def _renew(self) -> bool:
        """Renew once; say whether it worked (a failure may pass: :meth:`check` tells when it is too late)."""
        sent = time.monotonic()
        self._seq += 1
        try:
            self._version = self._object.replace(self._body(), self._version, self._timeout)
        except Conflict:
            self._on_conflict()
            return False
        except Exception as exc:  # unreachable store, timeout
            self._error = exc
            return False
        self._valid_from, self._error = sent, None
        return True

    def _renew_loop(self) -> None:
        interval = self.ttl / 4
        wait = interval
        while not self._stop.wait(wait) and not self._lost:
            wait = interval if self._renew() else interval / 4

    def _on_conflict(self) -> None:
        """A renewal's condition failed: either our previous renewal landed unseen, or we lost the lease."""
        try:
            seen = self._object.read(self._timeout)
        except Exception as exc:
            self._error = exc
            return
        if seen is not None and seen.holder is not None and seen.holder.token == self.token:
            self._version = seen.version  # a renewal whose reply was lost: keep the older validity
            return
        taker = f"taken over by {seen.holder}" if seen and seen.holder else "deleted by someone else"
        self._lost = (
            f"{self.what}: this writer's lease was {taker}, so it stopped before committing more steps; "
            f"let the other writer finish, or stop it and rerun with {arg('mode', 'resume')}"
        )

    def check(self) -> None:
        """Raise LockedError if the lease is lost or cannot be trusted to last through a commit."""
        if self._lost:
            raise LockedError(self._lost)
        silent = time.monotonic() - self._valid_from
        if self._unanswered():
            why = f" ({describe_store_failure(self._error)})" if self._error is not None else ""
            raise LockedError(
                f"{self.what}: could not renew the writer lease for {silent:.0f} s{why}, so it stopped before "
                f"committing more steps; rerun with {arg('mode', 'resume')} once the store is reachable"
            )

    def _unanswered(self) -> bool:
        """Whether the store has let the lease go unrenewed past the point where the writer stops."""
        return time.monotonic() - self._valid_from > self.ttl * 3 / 4

    def release(self) -> None:
        """Stop renewing and delete the lease if it is still this writer's; failures only log.

        A store that let the lease go unrenewed (it does not answer) is not asked again: the
        writer stops at once, and the lease expires by itself.
        """
        if self._stop.is_set():
            return
        self._stop.set()
        if self._unanswered():
            return  # the renewal in flight ends by its own timeout, on its own thread
        if self._thread is not None:
            self._thread.join()
        if self._lost:
            return
        try:
            self._object.delete(self._version, self._timeout)
        except Conflict:
            pass
        except Exception as exc:
            log.warning("%s: could not delete the writer lease (%s); it expires by itself", self.what, exc)

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class LeaseView:
    """A writer's lease as seen by a helper that writes for it (a cluster worker writing chunks).

    The helper holds no lease of its own. It may write while the lease object names the
    writer's token and, by the store's own clock, certainly stays the writer's for more
    than the writer's safety margin (a quarter of its ttl); it reads the lease again (one
    GET) when its last reading runs out, about every half ttl while the writer renews.
    Only clock rates matter, as for the writer: the reading's age comes from the store's
    stamps and is counted from when the request was sent.
    """

    def __init__(self, lease_object: LeaseObject, what: str, token: str) -> None:
        self._object = lease_object
        self.what = what
        self.token = token
        self._until = -math.inf

    @classmethod
    def follow(cls, fs: Any, root: str, what: str, token: str) -> LeaseView:
        return cls(open_lease_object(fs, f"{root.rstrip('/')}/{LEASE_KEY}"), what, token)

    def check(self) -> None:
        """Raise LockedError unless the writer's lease certainly lasts past this write."""
        if time.monotonic() < self._until:
            return
        sent = time.monotonic()
        try:
            seen = self._object.read(timeout=10.0)
        except Exception as exc:
            raise LockedError(
                f"{self.what}: a worker could not read the writer lease ({describe_store_failure(exc)}), so it "
                f"stopped before writing; rerun with {arg('mode', 'resume')} once the store is reachable"
            ) from None
        if seen is None or seen.holder is None or seen.holder.token != self.token:
            raise LockedError(
                f"{self.what}: the writer's lease was taken over or released, so a worker stopped before writing; "
                f"let the other writer finish, or stop it and rerun with {arg('mode', 'resume')}"
            )
        ttl = seen.holder.ttl
        self._until = sent + seen.remaining(ttl) - CLOCK_SLACK - ttl / 4
        if time.monotonic() >= self._until:
            raise LockedError(
                f"{self.what}: the writer's lease was not renewed in time, so a worker stopped before writing; "
                f"rerun with {arg('mode', 'resume')}"
            )
