"""Lazy re-exports (PEP 562) for the package and its wings.

The command line must start without JAX or Zarr, yet every wing re-exports names whose
modules import them. A package built with :func:`lazy_exports` imports the module behind
a name on first use and keeps the value, so ``from streamacc.store import open_target``
costs Zarr's import while ``from streamacc.store import CODECS`` does not.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, modules: Mapping[str, list[str]]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``, exporting ``modules[module]`` from each private module.

    ``modules`` maps a module relative to ``package`` (``"._target"``) to the names it exports.
    """
    where = {name: module for module, names in modules.items() for name in names}

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        setattr(sys.modules[package], name, value)  # later lookups skip this function
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *where})

    return __getattr__, __dir__
