"""The ``streamacc`` command line: the parser and the library's arguments named as options (``_parser``),
safe arithmetic for numbers (``_expr``, never ``eval``), ``main`` (``_main``), a thin shell over the
library, and ``plot`` (``_plot``, the only module that imports matplotlib).

Importing it loads neither JAX nor Zarr: it imports ``streamacc.base`` and ``streamacc.recipes``
alone, and each command imports the wings it needs once it runs.
"""

from ._expr import parse_int, parse_number
from ._main import main
from ._parser import build_parser, cli_message, storage_options

__all__ = ["build_parser", "cli_message", "main", "parse_int", "parse_number", "storage_options"]
