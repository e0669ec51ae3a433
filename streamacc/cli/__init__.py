"""The ``streamacc`` command line: the parser (``_parser``), safe arithmetic for numbers
(``_expr``, never ``eval``), and ``main`` (``_main``), a thin shell over the library.

Importing it loads neither JAX nor Zarr; commands import them once they need them.
"""

from __future__ import annotations

from ._main import main

__all__ = ["main"]
