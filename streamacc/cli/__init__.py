"""The ``streamacc`` command line: the parser (``_parser``), safe arithmetic for numbers
(``_expr``, never ``eval``), the library's arguments named as options (``_spelling``),
and ``main`` (``_main``), a thin shell over the library.

Importing it loads neither JAX nor Zarr; commands import them once they need them.
"""

from __future__ import annotations

from ._main import main
from ._spelling import cli_message

__all__ = ["cli_message", "main"]
