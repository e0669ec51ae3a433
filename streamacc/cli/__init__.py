"""The ``streamacc`` command line: the parser and the library's arguments named as options (``_parser``),
safe arithmetic for numbers (``_expr``, never ``eval``), ``main`` (``_main``), a thin shell over the
library, and ``plot`` (``_plot``, the only module that imports matplotlib).

Importing it loads none of its modules (its face is lazy, as every wing's); ``main`` imports
``streamacc.base`` and ``streamacc.recipes`` alone, neither JAX nor Zarr, and each command
imports the wings it needs once it runs.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_face

if TYPE_CHECKING:
    from ._expr import parse_int as parse_int, parse_number as parse_number
    from ._main import main as main
    from ._parser import build_parser as build_parser, cli_message as cli_message, storage_options as storage_options
else:  # type checkers read the imports above, and would take any name for one __getattr__ gives
    __getattr__, __dir__, __all__ = lazy_face(__name__, __file__)
