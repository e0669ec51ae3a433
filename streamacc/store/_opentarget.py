"""Which target an output lives in: a local path, an fsspec URL, an Icechunk repository or a zarr store object.

Above the targets: it imports each implementation (``_localtarget`` at once, which imports no
Zarr; ``_storetarget`` and ``_icechunk`` once such a store is named, as they ask for its
libraries), and none of them imports it. What names the place is checked here, before a target
is made: the path, the URL and its ``storage_options``, and for an Icechunk
repository the branch a writer commits to or the ref a reader opens.
"""

from __future__ import annotations

import errno
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

from ..errors import InputError, NoOutputError, StoreError, arg, one_line
from ._localtarget import LocalTarget
from ._target import Target

if TYPE_CHECKING:
    from zarr.abc.store import Store

__all__ = ["open_target"]

PROTOCOLS = ("icechunk://", "icechunk+s3://")
"""The URLs of Icechunk repositories: a local folder, or a bucket and prefix on S3."""

S3_OPTIONS = (
    "endpoint_url",
    "region",
    "access_key_id",
    "secret_access_key",
    "session_token",
    "allow_http",
    "force_path_style",
    "anonymous",
    "from_env",
)
"""The ``storage_options`` of ``icechunk+s3://`` passed to ``icechunk.s3_storage``."""

REF_OPTIONS = ("branch", "ref")
"""``branch``: the branch a writer commits to (``main``); ``ref``: the branch, tag or snapshot id a reader opens."""

BRANCH = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
"""A branch a writer commits to: it names a ref file of the repository, and a tag is made of it."""

TAG_FORM = re.compile(r".+-\d+-steps(?:-\d+)?")
"""The form of the tags a finished run gets (``BRANCH-LENGTH-steps``, ``-2``... when taken)."""


def _is_zarr_store(store: object) -> TypeGuard[Store]:
    """Whether ``store`` is a zarr store object, without importing Zarr: no object is one until Zarr is imported."""
    module = sys.modules.get("zarr.abc.store")
    return module is not None and isinstance(store, module.Store)


def _is_icechunk(store: object) -> bool:
    """Whether ``store`` names an Icechunk repository (``icechunk://``, ``icechunk+s3://``) or is one of its objects."""
    if isinstance(store, str):
        return store.startswith(PROTOCOLS)
    return type(store).__module__.split(".", 1)[0] == "icechunk"


def _label(store: Any) -> str:
    """How messages name a zarr store object: where it is, as its caller gave it (``full.zarr``), a wrapper's the
    store's inside (zarr spells a ``LocalStore`` ``file://full.zarr``, a wrapper of it ``wrapping-file://...``)."""
    text = str(store)
    while text.startswith("wrapping-"):
        text = text[len("wrapping-") :]
    return text.removeprefix("file://")


def _refuse_link_loop(root: Path, text: str) -> None:
    """Refuse a path that runs into a loop of symbolic links (it, or a folder on its way): the system reads it as
    absent, but nothing can be created there either."""
    try:
        os.stat(root)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NoOutputError(
                f"{text} runs into a loop of symbolic links (following them leads back to where they start), so no "
                "output is there and none can be made there; remove or correct the link, or choose another output path"
            ) from None


def open_target(
    store: Any, *, storage_options: dict[str, Any] | None = None, read_only: bool = False, follow: str | None = None
) -> Target:
    """Resolve a local path, an fsspec URL, an Icechunk repository or a zarr store object into a :class:`Target`.

    ``follow`` is a writer's lease token: the target writes for that writer (a cluster
    worker of a run on an object store), fenced by its lease.
    """
    if _is_icechunk(store):
        return icechunk_target(store, storage_options=storage_options, read_only=read_only)
    if _is_zarr_store(store):
        from zarr.storage import LocalStore

        if isinstance(store, LocalStore):
            return LocalTarget(Path(store.root), _label(store), read_only=read_only or store.read_only)
        from ._storetarget import StoreTarget

        return StoreTarget(store, _label(store))
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

        from ._storetarget import StoreTarget, backend_missing, check_store

        try:
            zstore = FsspecStore.from_url(text, storage_options=storage_options, read_only=read_only)
        except ImportError:
            raise backend_missing(text) from None
        except (ValueError, TypeError) as exc:
            raise StoreError(
                f"cannot open {text!r}: {one_line(exc)}; check the URL and {arg('storage_options')}"
            ) from None
        check_store(zstore, text, storage_options)
        return StoreTarget(zstore, text, storage_options, follow=follow)
    if storage_options:
        raise InputError(f"{arg('storage_options')} apply only to URLs such as s3://bucket/out.zarr, not to {text!r}")
    root = (Path(text).expanduser() if url else Path(text)).absolute()  # a path is taken as open() takes it
    _refuse_link_loop(root, text)
    if root.exists() and not root.is_dir():
        if read_only:  # a reader's: the path is wrong, not the output's place
            raise NoOutputError(f"{text} is a file, not a streamacc output (an output is a folder); check the path")
        raise NoOutputError(f"{text} exists and is not a folder; choose another output path")
    return LocalTarget(root, text, read_only=read_only)


def check_branch(branch: Any) -> str:
    """``branch`` if a writer may commit to it: a plain name, not one of the form of streamacc's tags."""
    example = arg("storage_options", {"branch": "trial"})
    if not isinstance(branch, str) or not BRANCH.fullmatch(branch) or ".." in branch:
        raise InputError(
            f"{arg('storage_options', {'branch': branch})} is not a branch name streamacc writes to; name it with "
            f"at most 128 ASCII letters, digits, '.', '_' and '-', beginning with a letter or digit, e.g. {example}"
        )
    if TAG_FORM.fullmatch(branch):
        raise InputError(
            f"{arg('storage_options', {'branch': branch})} has the form of the tags streamacc gives finished runs "
            f"(BRANCH-LENGTH-steps), so a ref of that name could mean either; name the branch otherwise, e.g. "
            f"{example}"
        )
    return branch


def _quiet_local_warning(ic: Any) -> None:
    """Drop Icechunk's warning that its local storage is unsafe for concurrent commits, unless ``ICECHUNK_LOG``
    sets its logs: streamacc's ``flock`` refuses a second writer there."""
    if "ICECHUNK_LOG" not in os.environ:
        ic.set_logs_filter("warn,icechunk::storage::object_store=error")


def _options(storage_options: dict[str, Any] | None, allowed: tuple[str, ...], label: str) -> dict[str, Any]:
    options = dict(storage_options or {})
    unknown = sorted(set(options) - set(allowed) - set(REF_OPTIONS))
    if unknown:
        raise InputError(
            f"{arg('storage_options')} of {label} do not take {', '.join(map(repr, unknown))}; they take "
            f"{', '.join(map(repr, (*REF_OPTIONS, *allowed)))}"
        )
    return options


def _branch(options: dict[str, Any], read_only: bool) -> str:
    """The branch a target writes to (checked for a writer) or reads by default."""
    branch = options.get("branch", "main")
    return branch if read_only else check_branch(branch)


def icechunk_target(store: Any, *, storage_options: dict[str, Any] | None = None, read_only: bool = False) -> Target:
    """The target of an ``icechunk://PATH`` or ``icechunk+s3://BUCKET/PREFIX`` URL, or of an Icechunk object.

    ``storage_options`` take ``branch`` (a writer's, ``main`` by default, checked by
    :func:`check_branch`), ``ref`` (a reader's branch, tag or snapshot id; ``branch:NAME`` or
    ``tag:NAME`` says which) and, on S3, the options of ``icechunk.s3_storage``.
    """
    from ._icechunk import IcechunkTarget, import_icechunk

    if storage_options is not None and not isinstance(storage_options, dict):
        raise InputError(f"{arg('storage_options')} must be a dict, got {type(storage_options).__name__}")
    if not read_only and storage_options and storage_options.get("ref") is not None:
        raise InputError(
            f"{arg('storage_options', {'ref': storage_options['ref']})} names what a reader opens (a branch, tag or "
            f"snapshot), and a write commits to a branch: pass {arg('storage_options', {'branch': 'NAME'})} "
            "instead (main by default)"
        )
    ic = import_icechunk()
    if isinstance(store, ic.Repository):
        options = _options(storage_options, (), "a repository")
        return IcechunkTarget(
            f"Icechunk repository {store.storage}",
            repository=store,
            branch=_branch(options, read_only),
            ref=options.get("ref"),
            read_only=read_only,
        )
    if isinstance(store, ic.Session):
        if not read_only:
            raise InputError(
                "a session is written and committed by its owner; to write a run into a repository pass the "
                "icechunk.Repository (or its icechunk:// URL), and streamacc commits on its branch"
            )
        return IcechunkTarget(f"Icechunk session at {store.snapshot_id}", session=store, read_only=True)
    if not isinstance(store, str):
        raise InputError(
            f"pass an Icechunk repository, a session or an icechunk:// URL, not {type(store).__name__} "
            "(a session's store is written outside any commit)"
        )
    if store.startswith("icechunk://"):
        options = _options(storage_options, (), store)
        path = store[len("icechunk://") :]
        if not path:
            raise InputError("icechunk:// names no folder; write icechunk://PATH")
        root = Path(path).expanduser().absolute()
        if root.exists() and not root.is_dir():
            raise NoOutputError(f"{path} exists and is not a folder; choose another repository path")
        storage = None
        if root.is_dir() or not read_only:
            _quiet_local_warning(ic)
            storage = ic.local_filesystem_storage(os.fspath(root))
        return IcechunkTarget(
            store,
            storage=storage,
            branch=_branch(options, read_only),
            ref=options.get("ref"),
            local=root,
            read_only=read_only,
        )
    options = _options(storage_options, S3_OPTIONS, store)
    bucket, _, prefix = store[len("icechunk+s3://") :].partition("/")
    if not bucket:
        raise InputError(f"{store!r} names no bucket; write icechunk+s3://BUCKET/PREFIX")
    s3 = {k: v for k, v in options.items() if k in S3_OPTIONS}
    try:
        storage = ic.s3_storage(bucket=bucket, prefix=prefix.strip("/") or None, **s3)
    except (TypeError, ValueError, ic.IcechunkError) as exc:
        raise StoreError(
            f"cannot open {store!r}: {one_line(exc)}; check the URL and {arg('storage_options')}"
        ) from None
    return IcechunkTarget(
        store, storage=storage, branch=_branch(options, read_only), ref=options.get("ref"), read_only=read_only
    )
