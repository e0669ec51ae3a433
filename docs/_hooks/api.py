"""The API reference's checks: every public name documented, every parameter described, every example run.

The reference pages name what they document with mkdocstrings' ``::: identifier``
lines. The build refuses a public name (``streamacc.__all__``, ``streamacc.errors.__all__``)
that no page documents, a docstring without the numpydoc sections its kind needs, a
parameter or field the docstring does not describe, and an example (``>>>``) that fails.
The examples of the reference run in order, in one folder, as a reader working down the
pages would run them.
"""

from __future__ import annotations

import dataclasses
import doctest
import importlib
import inspect
import re
from collections.abc import Iterable
from pathlib import Path

from examples import ExampleError, _in_folder, fresh_jax

DIRECTIVE = re.compile(r"^:::[ \t]+(?P<name>[\w.]+)[ \t]*$", re.M)
SECTION = re.compile(r"^(?P<title>[A-Z][a-z]+)\n-{3,}$", re.M)
ENTRY = re.compile(r"^(?P<names>\*{0,2}\w+(?:, \*{0,2}\w+)*)(?: : .*)?$")


def documented(pages: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """``(identifier, page)`` for each ``::: identifier`` of the pages, in order."""
    return [(m["name"], where) for where, text in pages for m in DIRECTIVE.finditer(text)]


def resolve(identifier: str) -> object:
    """The object ``identifier`` names (``streamacc.errors.InputError``)."""
    module, _, attr = identifier.rpartition(".")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError):
        return importlib.import_module(identifier)


def public_names() -> list[str]:
    """Every name a user may import: the top level's and the errors module's (``streamacc.testing``, for tests,
    is not among them)."""
    import streamacc
    import streamacc.errors

    names = [f"streamacc.{n}" for n in streamacc.__all__ if n not in ("__version__", "errors")]
    return names + [f"streamacc.errors.{n}" for n in streamacc.errors.__all__]


def sections(doc: str) -> dict[str, list[str]]:
    """A numpydoc docstring's sections: title -> its lines."""
    found = list(SECTION.finditer(doc))
    return {
        m["title"]: doc[m.end() : found[i + 1].start() if i + 1 < len(found) else len(doc)].splitlines()
        for i, m in enumerate(found)
    }


def described(lines: list[str]) -> set[str]:
    """The names a Parameters or Attributes section describes (its unindented entry lines)."""
    names: set[str] = set()
    for line in lines:
        if line and not line[0].isspace():
            m = ENTRY.match(line.strip())
            if m:
                names.update(n.strip().lstrip("*") for n in m["names"].split(","))
    return names


def _parameters(obj: object) -> list[str]:
    try:
        signature = inspect.signature(obj)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return []
    return [p.name for p in signature.parameters.values() if p.name not in ("self", "cls")]


def _fields(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls) if not f.name.startswith("_")]


def problems(identifier: str, obj: object) -> list[str]:
    """What the docstring of ``obj`` lacks: sections its kind needs, parameters or fields it does not describe."""
    doc = inspect.getdoc(obj) or ""
    if not doc:
        return [f"{identifier} has no docstring"]
    found = sections(doc)
    if inspect.isclass(obj):
        need = ["Examples"]
        if dataclasses.is_dataclass(obj):
            need.insert(0, "Attributes")
        elif not issubclass(obj, BaseException) and _parameters(obj):
            need.insert(0, "Parameters")
    elif callable(obj):
        need = ["Parameters", "Returns", "Raises", "Examples"] if _parameters(obj) else ["Returns", "Examples"]
        if identifier.startswith("streamacc.errors."):
            need = [title for title in need if title != "Raises"]  # the helpers that build messages raise nothing
        if inspect.isgeneratorfunction(obj) or "Yields" in found:
            need[need.index("Returns")] = "Yields"
    else:
        return []
    out = [f"{identifier}: no {title} section" for title in need if title not in found]
    if "Parameters" in need and "Parameters" in found:
        missing = [p for p in _parameters(obj) if p not in described(found["Parameters"])]
        out += [f"{identifier}: parameter {p!r} is not described" for p in missing]
    if "Attributes" in need and "Attributes" in found:
        missing = [f for f in _fields(obj) if f not in described(found["Attributes"])]  # type: ignore[arg-type]
        out += [f"{identifier}: field {f!r} is not described" for f in missing]
    return out


def check_reference(pages: list[tuple[str, str]]) -> list[tuple[str, object]]:
    """Refuse a reference that leaves out a public name or a docstring that lacks a section or a parameter.

    Returns the documented objects, in page order.
    """
    names = documented(pages)
    objects, errors = [], []
    for name, where in names:
        try:
            obj = resolve(name)
        except (ImportError, AttributeError):
            errors.append(f"{where}: ::: {name} names nothing")
            continue
        objects.append((name, obj))
        errors += problems(name, obj)
    shown = {id(obj) for _, obj in objects}
    for name in public_names():
        if id(resolve(name)) not in shown:
            errors.append(f"{name} is public but no page documents it (add '::: {name}')")
    if errors:
        raise ExampleError("the API reference is incomplete:\n  " + "\n  ".join(errors))
    return objects


def run_doctests(objects: list[tuple[str, object]], folder: Path) -> int:
    """Run the ``>>>`` examples of ``objects`` (and their methods') in order in ``folder``; return how many ran."""
    import numpy as np

    import streamacc

    finder = doctest.DocTestFinder(recurse=True, exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    seen: set[str] = set()
    ran = 0
    with fresh_jax(), _in_folder(folder):
        for name, obj in objects:
            module = inspect.getmodule(obj)
            for test in finder.find(obj, name, module=module, globs={"streamacc": streamacc, "np": np}):
                if test.name in seen or not test.examples:
                    continue
                seen.add(test.name)
                out: list[str] = []
                result = runner.run(test, out=out.append, clear_globs=True)
                ran += result.attempted
                if result.failed:
                    raise ExampleError(f"the example of {test.name} failed:\n{''.join(out)}")
    return ran
