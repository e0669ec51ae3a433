"""A store wrapper whose copies over other stores share its state.

zarr makes a wrapper's copy over another store (``with_read_only``: a read-only view of the
same store) through ``_with_store``, which by default builds a new wrapper from the store
alone. A wrapper that learns as it reads (records parsed, metadata cached, blocks
recomputed) keeps one state for both: the copy is the same object over another store.
"""

from __future__ import annotations

from typing import Self

from zarr.abc.store import Store
from zarr.storage import WrapperStore

__all__ = ["StateSharingWrapper"]


class StateSharingWrapper(WrapperStore[Store]):
    """A :class:`zarr.storage.WrapperStore` whose copy over another store shares everything else it holds."""

    def _with_store(self, store: Store) -> Self:
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__dict__, _store=store)
        return clone
