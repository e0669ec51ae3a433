"""The ``streamacc`` command line: the parser (``_parser``), safe arithmetic for numbers
(``_expr``, never ``eval``), the library's arguments named as options (``_spelling``),
and ``main`` (``_main``), a thin shell over the library.

Importing it loads neither JAX nor Zarr; commands import them once they need them.
"""

from __future__ import annotations

from ._expr import parse_int, parse_number
from ._main import main
from ._parser import build_parser, storage_options
from ._spelling import cli_message

__all__ = ["build_parser", "cli_message", "main", "parse_int", "parse_number", "storage_options"]
