"""The machine a benchmark ran on, recorded beside its figures: cores, memory, load, versions, disk speed.

Figures on a shared 2-core machine move with its load and its host, so every result
file says what the machine was doing: the load average at the start and the end, and,
where a benchmark needs it, how fast its disk wrote fresh fsynced files in the same run
(:func:`disk_write`).
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
import threading
import time
from pathlib import Path

__all__ = ["disk_write", "load", "machine"]

MiB = 2**20


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("streamacc", "jax", "jaxlib", "numpy", "zarr", "numcodecs", "dask", "xarray"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            continue
    return out


def _git() -> str:
    try:
        here = Path(__file__).resolve().parent
        return subprocess.run(["git", "-C", str(here), "describe", "--always", "--dirty"], capture_output=True,
                              text=True, timeout=10).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return ""


def load() -> list[float]:
    """The 1-, 5- and 15-minute load averages (the machine has ``os.cpu_count()`` cores)."""
    return [round(x, 2) for x in os.getloadavg()]


def machine(disk: Path | None = None) -> dict:
    """Cores, memory, load, versions and git commit; with ``disk``, the free space of its file system."""
    with open("/proc/meminfo") as f:
        mem_kib = int(next(line for line in f if line.startswith("MemTotal")).split()[1])
    info = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "host": platform.node(),
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "memory_gib": round(mem_kib / 2**20, 1),
        "python": platform.python_version(),
        "versions": _versions(),
        "git": _git(),
        "load_start": load(),
    }
    if disk is not None:
        st = os.statvfs(disk if disk.exists() else disk.parent)
        info["disk_free_gib"] = round(st.f_bavail * st.f_frsize / 2**30, 1)
    return info


def _write_files(folder: Path, sizes: list[tuple[int, int]], buf: bytes) -> None:
    """Files ``floor-<i>`` of ``n`` bytes each (``sizes``: ``(i, n)``), each written from ``buf`` and fsynced."""
    for i, n in sizes:
        fd = os.open(folder / f"floor-{i:06d}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(buf)[:n]
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)


def disk_write(folder: Path, nbytes: int, file_bytes: int = 64 * MiB, writers: int = 1) -> dict:
    """Write ``nbytes`` into fresh files of ``file_bytes`` under ``folder``, each fsynced, then fsync the folder.

    The disk's floor for an output of that many bytes: incompressible bytes (so no file
    system compresses them), written with ``os.write`` from one buffer, files created
    afresh as a writer creates its chunks, by ``writers`` threads at once (file ``i`` by
    thread ``i % writers``): a virtual disk may write several streams faster than one.
    Returns seconds and GiB/s; the files are deleted afterwards (not timed).
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    buf = os.urandom(min(file_bytes, nbytes))
    sizes = [(i, min(len(buf), nbytes - start)) for i, start in enumerate(range(0, nbytes, len(buf)))]
    threads = [threading.Thread(target=_write_files, args=(folder, sizes[k::writers], buf)) for k in range(writers)]
    t0 = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    seconds = time.perf_counter() - t0
    for i, _ in sizes:
        (folder / f"floor-{i:06d}").unlink()
    return {"bytes": nbytes, "file_bytes": file_bytes, "files": len(sizes), "writers": writers, "seconds": seconds,
            "gib_per_s": nbytes / seconds / 2**30}  # fmt: skip
