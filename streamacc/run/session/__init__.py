"""A run's session on its output (``_session``: :class:`RunSession`): the target, its writer lock, the progress
bar, the output opened, and what a failure is raised as, for each writer (``write``, ``Stream``,
``materialize``), which differ only in how their blocks arrive.

These are the names the other rooms use; each is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...base import lazy_exports

if TYPE_CHECKING:
    from ._session import RunSession as RunSession

__getattr__, __dir__, __all__ = lazy_exports(__name__, __file__)
