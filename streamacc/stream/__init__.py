"""A scan streamed from inside the caller's jitted program: the host object (``_stream``: :class:`Stream`), its
side of the callbacks and its writer threads (``_host``), the blocks' loop traced into the program (``_program``:
``pieces``, a block's rows as the pieces that cross), and what it needs of the trace (``_trace``).

These are the names the public face and the tests use.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_face

if TYPE_CHECKING:
    from ._program import pieces as pieces
    from ._stream import Stream as Stream
else:  # type checkers read the imports above, and would take any name for one __getattr__ gives
    __getattr__, __dir__, __all__ = lazy_face(__name__, __file__)
