"""A full disk injected at one write of the streamacc command line: a test helper.

    python tests/faultrun.py chunk N    write OUT ...   # the N-th chunk the zarr LocalStore writes fails
    python tests/faultrun.py manifest N write OUT ...   # the N-th manifest write fails half way through
    python tests/faultrun.py complete 0 write OUT ...   # SIGKILLed once the manifest says complete
    python tests/faultrun.py pause N    write URL ...   # SIGSTOPs itself at the N-th lease check of its store writes
    python tests/faultrun.py die N      write OUT ...   # SIGKILLed at its N-th store write, as dies_at counts them
    python tests/faultrun.py die-in-chunk N materialize OUT ...  # SIGKILLed half way through its N-th data chunk
    python tests/faultrun.py carry N     write OUT ...   # SIGKILLed just before the carry kept at boundary N is written
    python tests/faultrun.py carry-written N write OUT ... # SIGKILLed just after it, before the record naming it

The first two raise ``OSError(ENOSPC, 'No space left on device')`` where a real full disk
would; the process then exits with the command's own exit code. The third kills the
process between the manifest's last save and the root metadata's refresh. The fourth
stops the process (SIGSTOP, as a debugger, a frozen VM or a suspended laptop would) just
before a write to an object store asks its lease whether it may write. The fifth kills
the process at a chosen store write (:func:`dies_at`'s count), before that write starts;
the sixth while a data chunk of a local output is half written into its temp file, which
stays. Tests use :func:`full_disk` and :func:`dies_at` in-process, which undo the fault
afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import itertools
import os
import signal
import sys
import threading
from collections.abc import Iterator

from zarr.core.sync import sync
from zarr.storage import LocalStore

from streamacc import testing
from streamacc.cli import main


def _full_disk() -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def fail_chunk(at: int) -> None:
    """The ``at``-th chunk (not metadata) written to a local folder raises ENOSPC.

    Data chunks are written to the file by the chunk writer itself (``write_new``), summary
    chunks through LocalStore.set: both count, in the order they are written.
    """
    real_set, real_new = LocalStore.set, testing.current("store.write_new")
    count = itertools.count(1)

    async def set(self, key, value):
        if not key.endswith("zarr.json") and next(count) == at:
            raise _full_disk()
        return await real_set(self, key, value)

    def write_new(path, data):
        if next(count) == at:
            raise _full_disk()
        return real_new(path, data)

    LocalStore.set = set
    testing.replace("store.write_new", write_new)


def fail_manifest(at: int) -> None:
    """The ``at``-th manifest write raises ENOSPC half way through its data (writes 1 and 2 create the run,
    k + 3 commits block k)."""
    real_write, real_write_all = testing.current("store.atomic_write"), testing.current("store.write_all")
    count, filling = itertools.count(1), set()

    def write_all(fd, view):
        if threading.get_ident() not in filling:
            return real_write_all(fd, view)
        os.write(fd, bytes(view[: len(view) // 2]))
        raise _full_disk()

    def atomic_write(path, data):
        if path.parent.name == "_streamacc" and path.name == "zarr.json" and next(count) == at:
            filling.add(threading.get_ident())  # this write only: the disk fills as it writes the manifest
            try:
                return real_write(path, data)
            finally:
                filling.discard(threading.get_ident())
        return real_write(path, data)

    testing.replace("store.write_all", write_all)
    testing.replace("store.atomic_write", atomic_write)


FULL_DISK_SEAMS = ("store.write_new", "store.write_all", "store.atomic_write")


@contextlib.contextmanager
def full_disk(kind: str, at: int) -> Iterator[None]:
    """Within this block, write number ``at`` of ``kind`` ('chunk' or 'manifest') finds the disk full."""
    saved = LocalStore.set, [testing.current(name) for name in FULL_DISK_SEAMS]
    {"chunk": fail_chunk, "manifest": fail_manifest}[kind](at)
    try:
        yield
    finally:
        LocalStore.set = saved[0]
        for name, value in zip(FULL_DISK_SEAMS, saved[1], strict=True):
            testing.replace(name, value)


class Killed(Exception):
    """The writer died before this write."""


def _loop_tasks() -> set[asyncio.Task[object]]:
    """The tasks on zarr's event loop (the writes of every zarr store streamacc opens run there)."""

    async def tasks() -> set[asyncio.Task[object]]:
        return asyncio.all_tasks() - {asyncio.current_task()}  # type: ignore[operator]

    return sync(tasks())


def _settle(before: set[asyncio.Task[object]]) -> None:
    """Let the tasks started on zarr's loop since ``before`` end: the writes gathered with the one that failed
    (zarr's ``create_array`` writes its parent group's document beside its own, by ``set_if_not_exists``, which
    the gate does not see) land now, while the writer is still dead, not in the middle of what a test does next
    (a resume that cleared the folder, then found the group made again)."""

    async def ended() -> None:
        started = asyncio.all_tasks() - before - {asyncio.current_task()}
        if started:
            await asyncio.wait(started, timeout=60)

    sync(ended())


@contextlib.contextmanager
def dies_at(n: int, seen: list[str] | None = None, *, kill: bool = False) -> Iterator[None]:
    """Within this block, store write number ``n`` (1-based) fails, and so does every one after it: the writer
    died there (nothing more reaches a store from a dead process).

    Counts every write and delete that reaches a store: a local output's files (streamacc's
    atomic writes and deletes, zarr's) and an object store's requests (through the fence).
    ``seen`` collects what each write was (``n=0``: none fails). With ``kill``, the process
    is SIGKILLed at write ``n`` instead.
    """
    from streamacc.store import DurableLocalStore, FencedStore, LocalTarget

    saved = (testing.current("store.atomic_write"), LocalTarget.delete, DurableLocalStore.set, DurableLocalStore.delete,
             FencedStore.set, FencedStore.delete)  # fmt: skip
    count, dead = itertools.count(1), []

    def gate(what: str) -> None:
        if seen is not None:
            seen.append(what)
        if dead or next(count) == n:
            if kill:
                os.kill(os.getpid(), signal.SIGKILL)
            dead.append(what)
            raise Killed(what)

    def atomic_write(path, data):
        gate(f"write {path.parent.name}/{path.name}")
        return saved[0](path, data)

    def delete(self, key):
        gate(f"delete {key}")
        return saved[1](self, key)

    def wrap(real, verb):
        async def call(self, key, *args):
            gate(f"{verb} {key}")
            return await real(self, key, *args)

        return call

    before = _loop_tasks()
    testing.replace("store.atomic_write", atomic_write)
    LocalTarget.delete = delete
    DurableLocalStore.set, DurableLocalStore.delete = wrap(saved[2], "set"), wrap(saved[3], "delete")
    FencedStore.set, FencedStore.delete = wrap(saved[4], "set"), wrap(saved[5], "delete")
    try:
        yield
    finally:
        _settle(before)
        testing.replace("store.atomic_write", saved[0])
        LocalTarget.delete, DurableLocalStore.set, DurableLocalStore.delete = saved[1:4]
        FencedStore.set, FencedStore.delete = saved[4:]


def kill_after_complete(_: int) -> None:
    """SIGKILL this process right after the manifest is saved complete, before the root metadata follows."""
    from streamacc.run import Output

    real_save = Output._save

    def _save(self, **changes):
        real_save(self, **changes)
        if changes.get("complete"):
            os.kill(os.getpid(), signal.SIGKILL)

    Output._save = _save


def kill_in_chunk(at: int) -> None:
    """SIGKILL this process half way through the ``at``-th data chunk it writes to a local folder (``write_new``).

    The chunk's temp file (``STEM.<32 hex digits>.partial``) holds half its bytes and stays,
    as a writer killed in the middle of a chunk leaves it; other writer threads are killed
    wherever they are.
    """
    real_new, real_write_all = testing.current("store.write_new"), testing.current("store.write_all")
    count, lock, dying = itertools.count(1), threading.Lock(), set()

    def write_all(fd, view):
        if threading.get_ident() in dying:
            os.write(fd, bytes(view[: max(1, len(view) // 2)]))
            os.kill(os.getpid(), signal.SIGKILL)
            threading.Event().wait()  # never goes on: the signal ends the process
        return real_write_all(fd, view)

    def write_new(path, data):
        with lock:
            if next(count) == at:
                dying.add(threading.get_ident())
        return real_new(path, data)

    testing.replace("store.write_all", write_all)
    testing.replace("store.write_new", write_new)


def kill_at_carry(boundary: int, *, written: bool) -> None:
    """SIGKILL this process at the carry kept at ``boundary``: just before it is written (the block's data are
    durable, its carry not), or (``written``) once it is durable, just before the record naming it is written."""
    from streamacc.record import Ledger

    real_write_carry, real_atomic = Ledger.write_carry, testing.current("store.atomic_write")
    kept: list[int] = []

    def write_carry(self, manifest, at, carry):
        if at == boundary and not written:
            os.kill(os.getpid(), signal.SIGKILL)
        kept.append(at)
        return real_write_carry(self, manifest, at, carry)

    def atomic_write(path, data):
        if written and kept and kept[-1] == boundary and path.parent.name.startswith("records_"):
            os.kill(os.getpid(), signal.SIGKILL)
        return real_atomic(path, data)

    Ledger.write_carry = write_carry
    testing.replace("store.atomic_write", atomic_write)


def pause_before_check(at: int) -> None:
    """SIGSTOP this process at the ``at``-th lease check made inside a write to the store.

    The store's writes are made one at a time here, and only the checks a write makes itself
    (before it starts and, on S3, as its request is sent; not one made elsewhere meanwhile,
    such as a commit's) can stop the process, so that when it stops no request is between
    its own check and its sending: a frozen process may land such a request late (the
    documented exception), which would make the outcome depend on timing.
    """
    import asyncio
    import contextvars
    import threading

    from streamacc.store import FencedStore, Lease

    real_check = Lease.check
    count = itertools.count(1)
    starting = contextvars.ContextVar("starting", default=False)  # inside a store write, before its request
    continued = threading.Event()
    signal.signal(signal.SIGCONT, lambda *_: continued.set())  # its handler runs on the main thread

    def check(self):
        if starting.get() and next(count) == at:
            # a process-directed SIGSTOP (os.kill) takes effect asynchronously: this thread could pass the
            # check and send its request before stopping; one aimed at this thread stops it on the spot,
            # and it goes on only once the test has continued the process
            signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)
            continued.wait(600)
        return real_check(self)

    Lease.check = check
    locks: dict[object, asyncio.Lock] = {}  # one per event loop (zarr's runs every store call)

    def one_at_a_time(method):
        async def serialized(self, *args):
            lock = locks.setdefault(asyncio.get_running_loop(), asyncio.Lock())
            async with lock:
                token = starting.set(True)
                try:
                    return await method(self, *args)
                finally:
                    starting.reset(token)

        return serialized

    for name in ("set", "set_if_not_exists", "_set_many", "delete", "delete_dir", "clear"):
        setattr(FencedStore, name, one_at_a_time(getattr(FencedStore, name)))


if __name__ == "__main__":
    kind, at, *argv = sys.argv[1:]
    sys.argv = ["streamacc", *argv]  # main() then runs as the program does, exits included
    if kind in ("chunk", "manifest"):
        with full_disk(kind, int(at)):
            sys.exit(main())
    if kind == "die":
        with dies_at(int(at), kill=True):
            sys.exit(main())
    if kind in ("carry", "carry-written"):
        kill_at_carry(int(at), written=kind == "carry-written")
    else:
        {"complete": kill_after_complete, "pause": pause_before_check, "die-in-chunk": kill_in_chunk}[kind](int(at))
    sys.exit(main())
