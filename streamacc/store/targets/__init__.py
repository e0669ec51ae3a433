"""Where an output lives: the target base, a local folder, any other zarr store, an Icechunk repository.

``_target`` is the base of an output location (a zarr store and what it lacks: the lock,
durability, checkpoints, clearing, cleanup), ``_localtarget`` a local folder,
``_storetarget`` any other zarr store, ``_opentarget`` the choice among them for a path or
URL, ``_backends`` an object store's fsspec clients (the first question asked, the
sessions closed last), ``_icechunk`` an output in an Icechunk repository (its commits the
writer's durable points) and ``_sessionstore`` its writer's zarr store, ``_files`` the
link-safe, fsynced file primitives (``read_into``: a chunk file read into a caller's
buffer), and ``_zarrapi`` the zarr names kept in zarr's private modules.

These are the names the store and its other rooms use; each is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...base import lazy_exports

if TYPE_CHECKING:
    from ._backends import close_store_sessions as close_store_sessions
    from ._files import (
        PAGE as PAGE,
        aligned_empty as aligned_empty,
        atomic_write as atomic_write,
        read_into as read_into,
        scratch as scratch,
        write_new as write_new,
    )
    from ._icechunk import IcechunkTarget as IcechunkTarget
    from ._localtarget import LocalTarget as LocalTarget
    from ._opentarget import open_target as open_target
    from ._sessionstore import SessionStore as SessionStore
    from ._storetarget import StoreTarget as StoreTarget
    from ._target import BOOKKEEPING as BOOKKEEPING, LEASE_KEY as LEASE_KEY, Target as Target
    from ._zarrapi import (
        ArrayConfig as ArrayConfig,
        ArrayConfigParams as ArrayConfigParams,
        ArrayV3Metadata as ArrayV3Metadata,
        GroupMetadata as GroupMetadata,
        HasEndianness as HasEndianness,
        HasItemSize as HasItemSize,
        RegularChunkGrid as RegularChunkGrid,
        settle_event_loop as settle_event_loop,
        sync as sync,
    )

__getattr__, __dir__, __all__ = lazy_exports(__name__, __file__)
