"""Lazy re-exports (PEP 562) for the package and its wings, each name listed once.

The command line must start without JAX or Zarr, yet every wing re-exports names whose
modules import them. A package's ``__init__.py`` lists its exports once, as the imports of
its ``if TYPE_CHECKING:`` block (``from ._target import open_target as open_target``),
which type checkers read; :func:`lazy_exports` reads the same block from the file and
imports the module behind a name on first use, keeping the value, so ``from
streamacc.store import open_target`` costs Zarr's import while ``from streamacc.store
import Target`` does not.
"""

from __future__ import annotations

import ast
import importlib
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["lazy_exports", "listed_exports"]


def listed_exports(init_file: str) -> dict[str, str]:
    """The names the ``if TYPE_CHECKING:`` block of ``init_file`` imports, each mapped to its relative module."""
    with open(init_file, encoding="utf-8") as source:
        tree = ast.parse(source.read(), init_file)
    where: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for statement in node.body:
                if not isinstance(statement, ast.ImportFrom) or statement.level == 0:
                    raise ImportError(f"{init_file}:{statement.lineno}: a lazy export is `from .module import N as N`")
                module = "." * statement.level + (statement.module or "")
                for alias in statement.names:
                    where[alias.asname or alias.name] = module
    return where


def lazy_exports(package: str, init_file: str) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """``__getattr__``, ``__dir__`` and ``__all__`` for ``package``, whose ``__init__.py`` is ``init_file``."""
    where = listed_exports(init_file)

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        setattr(sys.modules[package], name, value)  # later lookups skip this function
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *where})

    return __getattr__, __dir__, sorted(where)
