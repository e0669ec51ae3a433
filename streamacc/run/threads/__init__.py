"""Work on threads: signals that always end a run promptly (``_interrupt``), the bounded
pipeline that commits in production order (``_pipeline``), and signals noticed while the main
thread is inside XLA (``_wakeup``).

These are the names the other rooms and wings use; each is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...base import lazy_exports

if TYPE_CHECKING:
    from ._interrupt import (
        STOP as STOP,
        Interrupted as Interrupted,
        Terminated as Terminated,
        check_stop as check_stop,
        interruptible as interruptible,
        on_own_thread as on_own_thread,
        run_interruptibly as run_interruptibly,
    )
    from ._pipeline import run_ordered as run_ordered
    from ._wakeup import SignalWatch as SignalWatch

__getattr__, __dir__, __all__ = lazy_exports(__name__, __file__)
