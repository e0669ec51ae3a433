"""Run by each worker process of a local cluster as it starts (a dask preload): ignore Ctrl-C.

A terminal sends Ctrl-C to every process in its foreground group, the workers of a
``--workers`` cluster included; the driver alone should react, by closing them in order.
Workers started while the driver's main thread ignores SIGINT inherit that; but the
command line runs its work on another thread (its main thread takes the signals), so the
workers ignore it themselves, here, from their first moments on.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

__all__ = ["dask_setup"]


def dask_setup(worker: Any) -> None:
    """Ignore SIGINT in this worker process (only the main thread may set a handler)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
