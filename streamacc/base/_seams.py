"""Seams: the names a wing lets a test replace, to inject a fault or shorten a wait.

A wing that has seams lists them in its own ``_seams.py`` as ``SEAMS``, a dict of
:class:`Seam` by name, and re-exports ``SEAMS`` from its ``__init__``; ``streamacc.testing``
replaces them by name. A seam knows every module attribute that holds its value (a function
imported into the module that calls it is held there too), so that a test replaces the
function where it is called and never reaches into a wing's private module itself.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Seam"]


class Seam:
    """One replaceable value of a wing: what it is, and the ``(owner, attribute)`` pairs that hold it.

    Parameters
    ----------
    about : str
        What the value is and how it is called, for a test's author.
    *sites : tuple of (object, str)
        Every module (or class) attribute that holds the value; the first holds it as the wing
        defines it, and all hold the same object.
    """

    def __init__(self, about: str, *sites: tuple[object, str]) -> None:
        if not sites:
            raise ValueError("a seam is held somewhere")
        self.about = about
        self.sites = sites
        self.original: Any = getattr(*sites[0])
        """The wing's own value, whatever a test has put in its place since."""
        for owner, attribute in sites[1:]:
            if getattr(owner, attribute) is not self.original:
                raise ValueError(f"{owner!r}.{attribute} does not hold the seam's value")

    def current(self) -> Any:
        """The value in place now."""
        return getattr(*self.sites[0])

    def replace(self, value: object) -> Any:
        """Put ``value`` in place at every site; returns the value it replaces."""
        previous = self.current()
        for owner, attribute in self.sites:
            setattr(owner, attribute, value)
        return previous
