"""A griffe extension: Sphinx roles in docstrings (``:func:`write```) become links of the API reference.

The docstrings are numpydoc, and name other objects as numpydoc does (``:func:``,
``:class:``, ``:meth:``, ``:exc:``, ``:attr:``, ``:data:``, ``:mod:``, with ``~`` to show the
last name only). mkdocstrings renders Markdown, so each role becomes a cross-reference to
the page that documents the object it names, or plain code where no page documents it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:func|class|meth|exc|attr|data|mod|obj):`(?P<tilde>~?)(?P<target>[\w.]+)`")
DIRECTIVE = re.compile(r"^:::[ \t]+(?P<name>[\w.]+)[ \t]*$", re.M)
PAGES = Path(__file__).resolve().parents[1] / "reference" / "api"


def _documented() -> set[str]:
    return {m["name"] for page in PAGES.glob("*.md") for m in DIRECTIVE.finditer(page.read_text())}


class RolesToLinks(griffe.Extension):
    """Rewrite the roles of every docstring once the package is loaded."""

    def __init__(self) -> None:
        super().__init__()
        self.documented = _documented()

    def _resolve(self, target: str, obj: Any, loader: Any) -> str | None:
        """The documented identifier (or member of one) that ``target`` names, seen from ``obj``."""
        target = target.lstrip(".")
        scopes = ["", "streamacc.", "streamacc.errors."]
        parent = obj if obj.is_class else obj.parent
        while parent is not None:
            scopes.append(parent.path + ".")
            parent = parent.parent
        for scope in scopes:
            name = scope + target
            if name in self.documented:
                return name
            head, _, member = name.rpartition(".")
            if head in self.documented and member:
                try:
                    if member in loader.modules_collection[head].all_members:
                        return name
                except (KeyError, griffe.AliasResolutionError, griffe.CyclicAliasError):
                    continue
        return None

    def on_object(self, *, obj: Any, loader: Any, **kwargs: Any) -> None:
        if obj.docstring is None or ":" not in obj.docstring.value:
            return

        def link(m: re.Match[str]) -> str:
            target = m["target"]
            shown = target.rsplit(".", 1)[-1] if m["tilde"] else target
            identifier = self._resolve(target, obj, loader)
            return f"[`{shown}`][{identifier}]" if identifier else f"`{shown}`"

        obj.docstring.value = ROLE.sub(link, obj.docstring.value)
