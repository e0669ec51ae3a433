"""Which target an output lives in: a local path, an fsspec URL, an Icechunk repository or a zarr store object.

Above the targets: it imports each implementation (``_localtarget`` at once, since a local
output is read without Zarr; ``_storetarget`` and ``_icechunk`` once such a store is
named), and none of them imports it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

from ...errors import InputError, NoOutputError, StoreError, arg, one_line
from ._backends import backend_missing, check_store
from ._localtarget import LocalTarget
from ._target import Target

if TYPE_CHECKING:
    from zarr.abc.store import Store

__all__ = ["open_target"]


def _is_zarr_store(store: object) -> TypeGuard[Store]:
    """Whether ``store`` is a zarr store object, without importing Zarr: no object is one until Zarr is imported."""
    module = sys.modules.get("zarr.abc.store")
    return module is not None and isinstance(store, module.Store)


def _is_icechunk(store: object) -> bool:
    """Whether ``store`` names an Icechunk repository (``icechunk://``, ``icechunk+s3://``) or is one of its objects."""
    if isinstance(store, str):
        return store.startswith(("icechunk://", "icechunk+s3://"))
    return type(store).__module__.split(".", 1)[0] == "icechunk"


def open_target(
    store: Any, *, storage_options: dict[str, Any] | None = None, read_only: bool = False, follow: str | None = None
) -> Target:
    """Resolve a local path, an fsspec URL, an Icechunk repository or a zarr store object into a :class:`Target`.

    ``follow`` is a writer's lease token: the target writes for that writer (a cluster
    worker of a run on an object store), fenced by its lease.
    """
    if _is_icechunk(store):
        from ._icechunk import icechunk_target

        return icechunk_target(store, storage_options=storage_options, read_only=read_only)
    if _is_zarr_store(store):
        from zarr.storage import LocalStore

        if isinstance(store, LocalStore):
            return LocalTarget(Path(store.root), str(store), read_only=read_only or store.read_only)
        from ._storetarget import StoreTarget

        return StoreTarget(store, str(store))
    if not isinstance(store, (str, os.PathLike)):
        raise InputError(f"store must be a path, a URL or a zarr store, got {type(store).__name__}")
    text = os.fspath(store)
    if not text:
        raise InputError(
            "the output path is empty, which would mean the current directory; name a new folder such as out.zarr"
        )
    url = text.startswith("file://")
    if url:
        text = text[len("file://") :]
    if "://" in text:
        if storage_options is not None and not isinstance(storage_options, dict):
            raise InputError(f"{arg('storage_options')} must be a dict, got {type(storage_options).__name__}")
        from zarr.storage import FsspecStore

        try:
            zstore = FsspecStore.from_url(text, storage_options=storage_options, read_only=read_only)
        except ImportError:
            raise backend_missing(text) from None
        except (ValueError, TypeError) as exc:
            raise StoreError(
                f"cannot open {text!r}: {one_line(exc)}; check the URL and {arg('storage_options')}"
            ) from None
        check_store(zstore, text, storage_options)
        from ._storetarget import StoreTarget

        return StoreTarget(zstore, text, storage_options, follow=follow)
    if storage_options:
        raise InputError(f"{arg('storage_options')} apply only to URLs such as s3://bucket/out.zarr, not to {text!r}")
    root = (Path(text).expanduser() if url else Path(text)).absolute()  # a path is taken as open() takes it
    if root.exists() and not root.is_dir():
        if read_only:  # a reader's: the path is wrong, not the output's place
            raise NoOutputError(f"{text} is a file, not a streamacc output (an output is a folder); check the path")
        raise NoOutputError(f"{text} exists and is not a folder; choose another output path")
    return LocalTarget(root, text, read_only=read_only)
