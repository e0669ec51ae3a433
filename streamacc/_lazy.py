"""Lazy faces (PEP 562): a package's exports, each listed once, imported when first asked for.

``streamacc`` and each of its wings list what they export once, as the imports of an ``if
TYPE_CHECKING:`` block of their ``__init__.py`` (``from ._sink import ZarrSink as ZarrSink``),
which type checkers read; :func:`lazy_face` reads the same block from the file and gives the
package a ``__getattr__`` that imports the module behind a name when the name is first asked
for. So importing a wing imports none of its modules, and a reader that asks for
``streamacc.store.open_target`` imports what that name needs, not Zarr's sink or JAX.
"""

from __future__ import annotations

import ast
import importlib
import pathlib
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["lazy_face", "listed_exports"]


def listed_exports(init_file: str) -> dict[str, str]:
    """The names the ``if TYPE_CHECKING:`` block of ``init_file`` imports, each mapped to its relative module."""
    tree = ast.parse(pathlib.Path(init_file).read_text(encoding="utf-8"), init_file)
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


def lazy_face(
    package: str, init_file: str, *eager: str
) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """``__getattr__``, ``__dir__`` and ``__all__`` of ``package``, whose ``__init__.py`` is ``init_file``.

    Its exports are the imports of that file's ``if TYPE_CHECKING:`` block (:func:`listed_exports`)
    and the names in ``eager``, which the file imports itself. A listed name's module is imported
    when the name is first asked for (``from streamacc.store import open_target`` or
    ``streamacc.store.open_target``), and the value kept on the package, so that later lookups skip
    ``__getattr__``; ``__dir__`` and ``__all__`` are the exports, sorted.
    """
    where = listed_exports(init_file)
    names = sorted([*eager, *where])

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return list(names)

    return __getattr__, __dir__, names
