"""A scan streamed from inside the caller's jitted program: the host object (``_stream``: :class:`Stream`), its
side of the callbacks and its writer threads (``_host``), the blocks' loop traced into the program (``_program``:
``pieces``, a block's rows as the pieces that cross), and what it needs of the trace (``_trace``).

These are the names the public face and the tests use.
"""

from ._program import pieces
from ._stream import Stream

__all__ = ["Stream", "pieces"]
