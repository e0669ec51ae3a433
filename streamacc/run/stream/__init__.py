"""A scan streamed from inside the caller's jitted program: the host object (``_stream``: :class:`Stream`), its
side of the callbacks and its writer threads (``_host``), the blocks' loop traced into the program
(``_program``: ``pieces``, a block's rows as the pieces that cross), and its seams (``_seams``).

These are the names the other rooms and the public face use; each is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...base import lazy_exports

if TYPE_CHECKING:
    from ._program import pieces as pieces
    from ._stream import Stream as Stream

__getattr__, __dir__, __all__ = lazy_exports(__name__, __file__)
