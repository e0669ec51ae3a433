"""``streamacc plot``: one picture of a whole output (or a range of steps), drawn from its summaries.

A series is a min/max band per window with the mean as a line; a vector output is a heat
map of the mean (step x state); an ensemble (a trailing dimension named ``path``) is a
band per path, or a fan of the paths' means for many paths; a field (two or more
trailing dimensions) is the band of its spatial min, max and mean. matplotlib (the
``plot`` extra) is imported only here, and only when the command runs.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from .._errors import InputError

__all__ = ["default_path", "plot_output"]

ENSEMBLE_DIMS = ("path", "member", "ensemble")
BANDS_UP_TO = 8
"""Ensembles of at most this many paths get a band each; larger ones a fan."""


def default_path(out: str, name: str) -> str:
    """``OUT-NAME.png`` beside a local output (``.zarr`` dropped); in the current folder for a URL."""
    base = out.rstrip("/") or out
    if "://" in base and not base.startswith("file://"):
        base = base.rsplit("/", 1)[-1]
    base = base.removeprefix("file://")
    base = base[: -len(".zarr")] if base.endswith(".zarr") else base
    return f"{base}-{name}.png"


def _matplotlib() -> tuple[Any, Any]:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise InputError("streamacc plot needs matplotlib: pip install 'streamacc[plot]'") from None
    return Figure, FigureCanvasAgg


def _label(da: Any) -> str:
    name = da.name.rsplit("_", 1)[0]
    units = da.attrs.get("units")
    return f"{name} [{units}]" if units else str(name)


def _title(ds: Any, name: str, long_name: str | None) -> str:
    what = ds.attrs.get("recipe") or "output"
    params = ds.attrs.get("params")
    head = f"{what} {params}" if params else str(what)
    total = int(ds.attrs["streamacc_total_steps"])
    if not ds.attrs["streamacc_complete"]:
        start, done = int(ds.attrs["streamacc_committed_start"]), int(ds.attrs["streamacc_committed_steps"])
        head += f"\nunfinished: steps {start} to {start + done} of {total} committed"
    if long_name:
        head += "\n" + (long_name if len(long_name) <= 100 else long_name[:99] + "...")
    return f"{head}\n{name}: {ds.sizes['step']} windows of {ds.attrs['window']} steps, {total} steps in all"


def _series(ax: Any, steps: np.ndarray, low: Any, high: Any, mean: Any, label: str = "") -> None:
    ax.fill_between(steps, low, high, step="post", alpha=0.35, linewidth=0, label=f"{label}min-max".strip())
    ax.step(steps, mean, where="post", linewidth=0.8, label=f"{label}mean".strip())


def plot_output(
    out: str,
    *,
    var: str | None = None,
    path: str | None = None,
    steps: tuple[int | None, int | None] | None = None,
    storage_options: dict | None = None,
    points: int = 2048,
) -> str:
    """Draw output ``out`` (array ``var``, default the first) into ``path`` (default :func:`default_path`)."""
    figure, canvas = _matplotlib()
    from ..run import overview

    ds = overview(out, points=points, storage_options=storage_options, steps=steps)
    names = [v[: -len("_mean")] for v in ds.data_vars if v.endswith("_mean")]
    if var is None:
        var = names[0]
    if var not in names:
        raise InputError(f"--var {var!r} is not an output of {out}; choose one of: {', '.join(names)}")
    # numpy from here on: indexing xarray objects would import dask (0.4 s) to look for dask arrays
    meta = ds[f"{var}_mean"]
    low, high, mean = (ds[f"{var}_{stat}"].values for stat in ("min", "max", "mean"))
    window = int(ds.attrs["window"])
    steps_ = ds["step"].values
    edges = np.append(steps_, steps_[-1] + window)
    fig = figure(figsize=(10, 4.8), dpi=110, layout="constrained")
    canvas(fig)
    ax = fig.add_subplot()
    trailing = meta.dims[1:]
    if not trailing:
        _series(ax, edges, np.append(low, low[-1]), np.append(high, high[-1]), np.append(mean, mean[-1]))
        ax.set_ylabel(_label(meta))
        ax.legend(loc="best", fontsize="small")
    elif len(trailing) == 1 and trailing[0] in ENSEMBLE_DIMS:
        _ensemble(ax, edges, low, high, mean, trailing[0])
        ax.set_ylabel(_label(meta))
    elif len(trailing) == 1:
        size = mean.shape[1]
        image = ax.pcolormesh(edges, np.arange(size + 1), mean.T, shading="flat", rasterized=True)
        fig.colorbar(image, ax=ax, label=f"mean {_label(meta)}")
        ax.set_ylabel(trailing[0])
    else:
        axes = tuple(range(1, mean.ndim))
        _series(
            ax,
            edges,
            np.append(np.nanmin(low, axis=axes), np.nan),
            np.append(np.nanmax(high, axis=axes), np.nan),
            np.append(np.nanmean(mean, axis=axes), np.nan),
            f"over {' x '.join(trailing)}: ",
        )
        ax.set_ylabel(_label(meta))
        ax.legend(loc="best", fontsize="small")
    ax.set_xlabel(f"{ds['step'].dims[0]} (windows of {window} steps)")
    ax.set_xlim(edges[0], edges[-1])
    ax.set_title(_title(ds, var, meta.attrs.get("long_name")), fontsize="medium")
    target = path or default_path(out, var)
    try:
        fig.savefig(target)
    except OSError as exc:
        why = exc.strerror or exc
        raise InputError(f"cannot write the picture to {target} ({why}); pass another -o FILE.png") from None
    return os.fspath(target)


def _ensemble(ax: Any, edges: np.ndarray, low: np.ndarray, high: np.ndarray, mean: np.ndarray, dim: str) -> None:
    paths = mean.shape[1]
    if paths <= BANDS_UP_TO:
        for p in range(paths):
            _series(ax, edges, np.append(low[:, p], np.nan), np.append(high[:, p], np.nan),
                    np.append(mean[:, p], np.nan), f"{dim} {p}: ")  # fmt: skip
        ax.legend(loc="best", fontsize="x-small", ncol=2)
        return
    pad = np.full((1, paths), np.nan)
    low, high, mean = (np.vstack([a, pad]) for a in (low, high, mean))
    ax.fill_between(edges, np.nanmin(low, axis=1), np.nanmax(high, axis=1), step="post", color="0.85",
                    label=f"min-max over all {paths} {dim}s")  # fmt: skip
    with np.errstate(invalid="ignore"):
        q = np.nanpercentile(mean, [5, 25, 50, 75, 95], axis=1)
    ax.fill_between(edges, q[0], q[4], step="post", alpha=0.35, color="C0", linewidth=0, label="5-95% of means")
    ax.fill_between(edges, q[1], q[3], step="post", alpha=0.5, color="C0", linewidth=0, label="25-75% of means")
    ax.step(edges, q[2], where="post", color="C1", linewidth=0.8, label="median of means")
    ax.legend(loc="best", fontsize="small")
