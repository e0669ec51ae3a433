"""Attributes a decoding reader cannot decode, refused before a run creates anything.

``array_attrs`` go into each array's metadata as given, and xarray, which ``streamacc.open``
reads through, decodes some of them (``scale_factor``, ``_FillValue``, ``units`` naming a
time, ...): one it cannot decode (a ``scale_factor`` of ``"abc"``, a ``_FillValue`` xarray
expects encoded for Zarr v3, ``"days since never"``) would make every output of the run
unreadable. So an output's arrays with such attributes are made in memory, one row each,
exactly as the run would make them, and read back as ``open`` reads them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import InputError, arg, one_line
from ...store import ZarrSink, decoding_attributes, open_target
from ._spec import OutputSpec

__all__ = ["check_decodable"]


def _fails(spec: OutputSpec, name: str, attrs: dict[str, Any]) -> str | None:
    """What reading array ``name`` with ``attrs`` as ``streamacc.open`` does raises, or None when it reads."""
    import xarray as xr
    import zarr

    shape, dtype = spec.arrays[name]
    one = (1,) * len(shape)
    target = open_target(zarr.storage.MemoryStore())
    sink = ZarrSink.create(
        target, {name: (one, dtype)}, chunks={name: one}, dims={name: spec.dims[name]}, codec=spec.codec,
        attrs={}, array_attrs={name: attrs},
    )  # fmt: skip
    sink.arrays[name][...] = np.zeros(one, dtype)
    try:
        np.asarray(xr.open_zarr(target.store, consolidated=False, zarr_format=3, chunks=None)[name].values)
    except Exception as exc:  # whatever xarray raises of it
        return f"{type(exc).__name__}: {one_line(exc)}"
    return None


def check_decodable(spec: OutputSpec) -> None:
    """Refuse ``array_attrs`` that ``streamacc.open`` (xarray) cannot decode, naming the attribute and why.

    Only arrays given attributes that change decoded values are tried; without xarray, none
    is (``open`` then asks for it itself).
    """
    try:
        import xarray  # noqa: F401
    except ImportError:
        return
    for name, attrs in spec.array_attrs.items():
        decoding = decoding_attributes(attrs)
        if not decoding or _fails(spec, name, attrs) is None:
            continue
        plain = {k: v for k, v in attrs.items() if k not in decoding}
        culprits = [k for k in decoding if _fails(spec, name, {**plain, k: decoding[k]}) is not None] or list(decoding)
        why = _fails(spec, name, {**plain, **{k: decoding[k] for k in culprits}})
        raise InputError(
            f"{arg('array_attrs')} of {name!r} hold {', '.join(f'{k}={decoding[k]!r}' for k in culprits)}, which "
            f"streamacc.open cannot decode ({why}); correct or leave out {', '.join(culprits)}"
        )
