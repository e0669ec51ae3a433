"""``xr.open_dataset(path, engine="streamacc")``: :func:`streamacc.open` as one of xarray's backends.

Registered under the entry point group ``xarray.backends`` (``setup.cfg``), so that xarray's
own doors (``open_dataset``, ``open_mfdataset``, ``open_datatree``'s neighbours) read an
output as :func:`streamacc.open` reads it: its committed steps only, each chunk checked.
xarray imports every installed backend whenever it opens anything, so this module imports
nothing of streamacc's readers until a dataset is opened, and guessing sends no request.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from xarray.backends import BackendEntrypoint

if TYPE_CHECKING:
    import xarray

__all__ = ["StreamaccBackend"]


class StreamaccBackend(BackendEntrypoint):
    """xarray's backend ``"streamacc"``: ``xr.open_dataset(path, engine="streamacc")`` is ``streamacc.open(path)``.

    Opened without dask (xarray's ``chunks=`` chunks it, as for any backend): the committed
    steps of every output array, the ``step`` (and ``time``) coordinate, the run's
    attributes, and what was committed in ``encoding``. ``storage_options``, and ``f``,
    ``init`` and ``xs`` for a virtual output written from Python, are passed on.
    """

    description = "A streamacc output: its committed steps only, each chunk checked as it is read (streamacc.open)"
    url = "https://github.com/streamacc/streamacc/blob/main/docs/guide/reading.md"
    open_dataset_parameters = ("filename_or_obj", "drop_variables", "storage_options", "f", "init", "xs")

    def open_dataset(
        self,
        filename_or_obj: Any,
        *,
        drop_variables: str | Iterable[str] | None = None,
        storage_options: dict[str, Any] | None = None,
        f: Any = None,
        init: Any = None,
        xs: Any = None,
    ) -> xarray.Dataset:
        from .read import open as open_output

        ds = open_output(filename_or_obj, f, init, xs, storage_options=storage_options, chunks=None)
        if drop_variables is not None:
            ds = ds.drop_vars(drop_variables, errors="ignore")
        return ds

    def guess_can_open(self, filename_or_obj: Any) -> bool:
        """Whether ``filename_or_obj`` is a local streamacc output (a folder holding ``_streamacc/zarr.json``).

        A URL of an object store is not guessed, since asking would send a request for every
        dataset xarray opens without an engine: name ``engine="streamacc"`` for those.
        """
        if not isinstance(filename_or_obj, (str, os.PathLike)):
            return False
        from .record import MANIFEST_KEY

        path = os.fspath(filename_or_obj)
        if not isinstance(path, str):
            return False
        if "://" in path:
            if not path.startswith("file://"):
                return False
            path = path.removeprefix("file://")
        return os.path.isfile(os.path.join(path, MANIFEST_KEY))
