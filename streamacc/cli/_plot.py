"""``streamacc plot``: one picture of a whole output (or a range of steps), drawn from its summaries.

A series is a min/max band per window with the mean as a line; a vector output is a heat
map of the mean (step x state); an ensemble (a trailing dimension named ``path``) is a
band per path, or a fan of the paths' means for many paths; a field (two or more
trailing dimensions) is the band of its spatial min, max and mean. The chains of a
sampler (a trailing dimension named ``chain``) are a trace per chain, in a panel per
component of the other trailing dimensions: a band and a line per chain for a few, a line
per chain up to a few dozen, a fan beyond, so that a chain stuck (its band a line) or
apart from the others shows at a glance. matplotlib (the ``plot`` extra) is imported only
here, and only when the command runs.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError

__all__ = ["default_path", "draw", "plot_output", "watch_output"]

ENSEMBLE_DIMS = ("path", "member", "ensemble")
BANDS_UP_TO = 8
"""Ensembles of at most this many paths get a band each; larger ones a fan."""
CHAIN_DIM = "chain"
CHAIN_LINES_UP_TO = 32
"""Chains up to this many get a line each (and a band each up to ``BANDS_UP_TO``); more, a fan."""
PANELS_UP_TO = 8
"""The components of a chained output drawn, a panel each; the title says how many there are."""


def default_path(out: str, name: str) -> str:
    """``OUT-NAME.png`` beside a local output (``.zarr`` dropped); in the current folder for a URL.

    An output named by ``.`` or ``..`` (plotted from inside it) is named by its folder's name.
    """
    base = out.rstrip("/") or out
    if "://" in base and not base.startswith("file://"):
        base = base.rsplit("/", 1)[-1]
    base = base.removeprefix("file://")
    if Path(base).name in ("", ".", ".."):
        base = os.fspath(Path(base).resolve())
    base = base[: -len(".zarr")] if base.endswith(".zarr") else base
    return f"{base}-{name}.png"


def _inside_an_output(target: str) -> Path | None:
    """The streamacc output (a local folder whose ``_streamacc/zarr.json`` holds a manifest) that file ``target``
    would land in, if any: a folder of the user's named ``_streamacc`` makes none."""
    from ..store import read_file

    try:
        folders = Path(target).resolve().parents
    except (RuntimeError, OSError):  # Python 3.11 raises RuntimeError for a loop of links, later ones OSError
        raise InputError(
            f"-o {target} runs into a loop of symbolic links (following them leads back to where they start), so "
            "no picture can be written there; remove or correct the link, or pass another -o FILE.png"
        ) from None
    for folder in folders:
        try:  # never waiting on a named pipe, never through a link
            raw = read_file(folder / "_streamacc" / "zarr.json")
            doc = json.loads(raw) if raw is not None else None
        except (OSError, ValueError):
            continue
        attributes = doc.get("attributes") if isinstance(doc, dict) else None
        if isinstance(attributes, dict) and "streamacc_manifest" in attributes:
            return folder
    return None


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
    total = int(ds.encoding["streamacc_total_steps"])
    if not ds.encoding["streamacc_complete"]:
        start, done = int(ds.encoding["streamacc_committed_start"]), int(ds.encoding["streamacc_committed_steps"])
        head += f"\nunfinished: steps {start} to {start + done} of {total} committed"
    if long_name:
        head += "\n" + (long_name if len(long_name) <= 100 else long_name[:99] + "...")
    return f"{head}\n{name}: {ds.sizes['step']} windows of {_steps(ds.attrs['window'])}, {total} steps in all"


def _steps(window: int) -> str:
    """``window`` steps, as a person writes them (a small output is drawn from its data, a window a step)."""
    return "1 step" if window == 1 else f"{window} steps"


def _dims(names: tuple[str, ...]) -> str:
    """Dimension names as a legend says them: ``y and x``, ``z, y and x``."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _time_axis(ds: Any) -> dict[str, Any] | None:
    """The output's time axis, where the picture is drawn from a :class:`Table` of an output that has one."""
    axis = getattr(ds, "time_axis", None)
    return axis if isinstance(axis, dict) else None


def _x(ds: Any, edges: np.ndarray) -> np.ndarray:
    """Where the window edges ``edges`` (steps) go on the picture's x axis: their times, with a time axis."""
    return ds.times(edges) if _time_axis(ds) is not None else edges


def _step_label(ds: Any, window: int) -> str:
    axis = _time_axis(ds)
    if axis is None:
        return f"step (windows of {_steps(window)})"
    units = axis.get("units") or ""
    if " since " in f" {units} ":  # dates
        return f"time (windows of {_steps(window)})"
    span = f"{window * axis['step']:g}{' ' + units if units else ''}"
    return f"time{f' [{units}]' if units else ''} (windows of {_steps(window)}, {span})"


def _series(ax: Any, steps: np.ndarray, low: Any, high: Any, mean: Any, label: str = "") -> None:
    ax.fill_between(steps, low, high, step="post", alpha=0.35, linewidth=0, label=f"{label}min-max".strip())
    ax.step(steps, mean, where="post", linewidth=0.8, label=f"{label}mean".strip())


def _pad(values: np.ndarray) -> np.ndarray:
    """``values`` with its last window repeated: a step plot needs one value per window edge."""
    return np.concatenate([values, values[-1:]])


def drawable(*arrays: np.ndarray) -> tuple[list[np.ndarray], float, bool]:
    """``arrays`` as a picture can draw them: divided by a power of ten where their range overflows a float
    (values near the largest float64), and ±inf at the edges of their finite range; that power, and whether
    any value was infinite."""
    values = [np.asarray(a, dtype=np.float64) for a in arrays]
    finite = np.concatenate([v[np.isfinite(v)] for v in values])
    infinite = any(bool(np.isinf(v).any()) for v in values)
    if finite.size == 0:
        return [np.where(np.isinf(v), np.sign(v), v) for v in values], 1.0, infinite  # only ±inf (and NaN): ±1
    low, high = float(finite.min()), float(finite.max())
    scale = 1.0
    with np.errstate(over="ignore"):
        if not np.isfinite((high - low) * 1.25):  # matplotlib cannot place ticks across it
            scale = 10.0 ** np.floor(np.log10(max(abs(low), abs(high))))
    low, high = low / scale, high / scale
    margin = (high - low) * 0.05 or max(abs(high), 1.0) * 0.05
    edges = (low - margin, high + margin)
    return [np.clip(v / scale, *edges) if infinite else v / scale for v in values], scale, infinite


def draw(ds: Any, var: str) -> Any:
    """The figure of output ``var`` of an :func:`streamacc.overview` Dataset or Table (needs matplotlib)."""
    figure, canvas = _matplotlib()
    # numpy from here on: indexing xarray objects would import dask to look for dask arrays
    meta = ds[f"{var}_mean"]
    low, high, mean = (_pad(ds[f"{var}_{stat}"].values) for stat in ("min", "max", "mean"))
    (low, high, mean), scale, infinite = drawable(low, high, mean)
    window = int(ds.attrs["window"])
    steps = ds["step"].values
    edges = np.append(steps, min(int(steps[-1]) + window, int(ds.attrs.get("stop_step", steps[-1] + window))))
    edges = _x(ds, edges)
    trailing = meta.dims[1:]
    if CHAIN_DIM in trailing:
        return _draw_chains(ds, var, figure, canvas, (low, high, mean), scale, infinite, edges)
    fig = figure(figsize=(10, 4.8), dpi=110)
    canvas(fig)
    ax = fig.add_subplot()
    bar = None
    if not trailing:
        over = meta.attrs.get("over")  # summarised over its whole state: one band for every value
        _series(ax, edges, low, high, mean, f"over the whole state ({', '.join(over)}): " if over else "")
        _log_scale_if_wide(ax, low, high)
    elif len(trailing) == 1 and trailing[0] in ENSEMBLE_DIMS:
        _ensemble(ax, edges, low, high, mean, trailing[0])
    elif len(trailing) == 1:
        image = ax.pcolormesh(edges, np.arange(mean.shape[1] + 1), mean[:-1].T, shading="flat", rasterized=True)
        bar = fig.add_axes((0.9, 0.1, 0.02, 0.8))  # placed by _fit
        fig.colorbar(image, cax=bar, label=f"mean {_label(meta)}" + (f" (x {scale:.0e})" if scale != 1.0 else ""))
    else:
        axes = tuple(range(1, mean.ndim))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a window whose values were all NaN
            low, high, mean = np.nanmin(low, axis=axes), np.nanmax(high, axis=axes), np.nanmean(mean, axis=axes)
        _series(ax, edges, low, high, mean, f"over {_dims(trailing)}: ")
    ylabel = trailing[0] if len(trailing) == 1 and trailing[0] not in ENSEMBLE_DIMS else _label(meta)
    if scale != 1.0 and ylabel == _label(meta):
        ylabel += f" (x {scale:.0e})"
    ax.set_ylabel(ylabel)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best", fontsize="small" if len(ax.get_legend_handles_labels()[0]) < 6 else "x-small", ncol=2)
    ax.set_xlabel(_step_label(ds, window))
    ax.set_xlim(edges[0], edges[-1])
    title = _title(ds, var, meta.attrs.get("long_name"))
    if infinite:
        title += " (values of ±inf drawn at the edges)"
    ax.set_title(title, fontsize="medium")
    _fit(fig, ax, bar)
    return fig


PAD_PT = 3.0
"""Points of blank margin around the picture's outermost labels (as constrained layout leaves)."""
BAR_IN = 0.2
"""Width of a colour bar, in inches."""


def _fit(fig: Any, ax: Any, bar: Any = None) -> None:
    """Margins that just hold the labels around ``ax`` (and its colour bar axes ``bar``, placed here).

    Constrained layout measures every artist of the figure twice before drawing it (a quarter of
    a second, a tenth of the command); this measures only what sits outside the axes: the title,
    the axis labels, the tick labels in view and the offset texts (``1e9``). Then again: the axes
    the margins leave may get other ticks, whose labels may be wider (most of it is cached by then).
    ``ax`` may be a list of axes stacked top to bottom, sharing the step axis (the panels of a
    sampler's chains): the title is the first's, the step labels the last's, and each gap between
    two holds the lower one's offset text.
    """
    axes = ax if isinstance(ax, list) else [ax]
    for _ in range(2):
        _fit_once(fig, axes, bar)


def _fit_once(fig: Any, axes: list[Any], bar: Any) -> None:
    from matplotlib import rcParams

    renderer = fig.canvas.get_renderer()
    px = fig.dpi / 72.0  # pixels per point
    width, height = fig.bbox.width, fig.bbox.height
    pad = PAD_PT * px

    def size(text: Any) -> tuple[float, float]:
        if not text.get_visible() or not text.get_text():
            return 0.0, 0.0
        box = text.get_window_extent(renderer)
        return float(box.width), float(box.height)

    def ticks(axis: Any) -> tuple[float, float, float]:
        """The room ``axis``'s ticks take outside the axes (length, pad and the widest and the tallest label of
        the ticks in view), and how far the label of the last tick in view reaches past the upper end (pixels)."""
        axis.get_majorticklabels()  # sets the tick labels, as drawing does
        low, high = sorted(axis.get_view_interval())
        shown = [t for t in axis.get_major_ticks() if low <= t.get_loc() <= high]
        labels = [t.label1 if t.label1.get_visible() else t.label2 for t in shown]
        sizes = [size(label) for label in labels] or [(0.0, 0.0)]
        room = (shown[0].get_tick_padding() + shown[0].get_pad()) * px if shown else 0.0
        overhang = 0.0
        if shown and axis.axis_name == "x" and high > low:  # the steps or times: a linear axis
            to_end = (high - shown[-1].get_loc()) / (high - low) * axis.axes.get_window_extent(renderer).width
            overhang = max(0.0, sizes[-1][0] / 2 - to_end)  # a label centred on its tick, near the end
        return room + max(w for w, _ in sizes), room + max(h for _, h in sizes), overhang

    def label(axis: Any, across: int) -> float:
        """The room the label of ``axis`` takes across it (0: its width, 1: its height)."""
        return size(axis.label)[across] + axis.labelpad * px if axis.label.get_text() else 0.0

    first, last_ax = axes[0], axes[-1]
    y_wide = max(ticks(a.yaxis)[0] + label(a.yaxis, 0) for a in axes)
    _, x_tall, overhang = ticks(last_ax.xaxis)
    left = pad + y_wide
    bottom = pad + x_tall + max(label(last_ax.xaxis, 1), size(last_ax.xaxis.get_offset_text())[1])
    title = size(first.title)[1] + float(rcParams["axes.titlepad"]) * px
    top = pad + title + size(first.yaxis.get_offset_text())[1]
    right = pad + overhang
    if bar is not None:
        bar_wide, _, _ = ticks(bar.yaxis)
        gap = overhang + 2 * pad
        right = pad + label(bar.yaxis, 0) + bar_wide + BAR_IN * fig.dpi + gap
    box = (left / width, bottom / height, 1 - right / width, 1 - top / height)
    between = {}
    if len(axes) > 1:
        gap_px = 2 * pad + max(size(a.yaxis.get_offset_text())[1] for a in axes[1:])
        panel = (height * (box[3] - box[1]) - (len(axes) - 1) * gap_px) / len(axes)
        between = {"hspace": gap_px / panel}
    fig.subplots_adjust(left=box[0], bottom=box[1], right=box[2], top=box[3], **between)
    if bar is not None:
        x0 = box[2] + gap / width
        bar.set_position((x0, box[1], BAR_IN * fig.dpi / width, box[3] - box[1]))


def plot_output(
    out: str,
    *,
    var: str | None = None,
    path: str | None = None,
    steps: tuple[int | None, int | None] | None = None,
    storage_options: dict[str, Any] | None = None,
    points: int = 2048,
) -> str:
    """Draw output ``out`` (array ``var``, default the first) into ``path`` (default :func:`default_path`)."""
    _matplotlib()  # before reading anything: without it, say how to install it
    from ..read import overview_table

    ds = overview_table(out, points=points, storage_options=storage_options, steps=steps)
    names = [v[: -len("_mean")] for v in ds.data_vars if v.endswith("_mean")]
    if var is None:
        var = names[0]
    if var not in names:
        raise InputError(f"--var {var!r} is not an output of {out}; choose one of: {', '.join(names)}")
    fig = draw(ds, var)
    target = os.fspath(path) if path else default_path(out, var)
    if not Path(target).suffix:
        target += ".png"  # matplotlib would add it, and the path printed would not be the file written
    inside = _inside_an_output(target)
    if inside is not None:
        raise InputError(
            f"the picture {target} would be written inside the output {inside}, whose files are streamacc's; "
            "pass -o FILE.png outside it"
        )
    try:
        fig.savefig(target)
    except OSError as exc:
        why = exc.strerror or exc
        raise InputError(f"cannot write the picture to {target} ({why}); pass another -o FILE.png") from None
    return os.fspath(target)


def watch_output(
    out: str,
    seconds: float,
    say: Callable[[str], None],
    *,
    var: str | None = None,
    path: str | None = None,
    steps: tuple[int | None, int | None] | None = None,
    storage_options: dict[str, Any] | None = None,
) -> None:
    """Draw output ``out`` as :func:`plot_output` does, and again each time blocks commit, until its run is complete.

    The manifest is read every ``seconds`` (one small read); the picture is drawn again only
    when the committed steps changed, and ``say`` is told each picture written and what it
    shows. An output that holds no committed step yet (or none in ``steps``) is waited for.
    """
    _matplotlib()
    from ..read import committed
    from ..store import open_target

    drawn: tuple[tuple[int, int], bool] | None = None
    waiting = False
    while True:
        target = open_target(out, storage_options=storage_options, read_only=True)  # an Icechunk branch's head anew
        now = committed(target)
        shown = now is not None and now.steps[0] < now.steps[1]
        if now is not None and shown and steps is not None:
            a = now.steps[0] if steps[0] is None else max(steps[0], now.steps[0])
            shown = a < (now.steps[1] if steps[1] is None else min(steps[1], now.steps[1]))
        if now is not None and shown and (now.steps, now.complete) != drawn:
            picture = plot_output(out, var=var, path=path, steps=steps, storage_options=storage_options)
            held = f"steps {now.steps[0]} to {now.steps[1]} of {now.length} committed"
            say(f"{picture}: {'complete, ' if now.complete else ''}{held}")
            drawn, waiting = (now.steps, now.complete), False
        elif not shown and not waiting:
            say(f"{out}: no committed step to draw yet; waiting for its blocks (Ctrl-C to stop)")
            waiting = True
        if now is not None and now.complete and drawn == (now.steps, True):
            return
        time.sleep(seconds)


def _log_scale_if_wide(ax: Any, low: np.ndarray, high: np.ndarray) -> None:
    """A logarithmic value axis for positive values spanning more than three decades (exponential growth)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        bottom, top = np.nanmin(low.astype(np.float64)), np.nanmax(high.astype(np.float64))
    if bottom > 0 and top / bottom > 1e3:
        from matplotlib.ticker import LogFormatter

        ax.set_yscale("log")
        # labels in plain text (1e+04): the default's mathtext parser takes half a second to set up
        ax.yaxis.set_major_formatter(LogFormatter())
        ax.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False))


def _ensemble(ax: Any, edges: np.ndarray, low: np.ndarray, high: np.ndarray, mean: np.ndarray, dim: str) -> None:
    paths = mean.shape[1]
    if paths <= BANDS_UP_TO:
        for p in range(paths):
            _series(ax, edges, low[:, p], high[:, p], mean[:, p], f"{dim} {p}: ")
        return
    ax.fill_between(edges, np.nanmin(low, axis=1), np.nanmax(high, axis=1), step="post", color="0.85",
                    label=f"min-max over all {paths} {dim}s")  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a window whose paths were all NaN
        q = np.nanpercentile(mean, [5, 25, 50, 75, 95], axis=1)
    ax.fill_between(edges, q[0], q[4], step="post", alpha=0.35, color="C0", linewidth=0, label="5-95% of means")
    ax.fill_between(edges, q[1], q[3], step="post", alpha=0.5, color="C0", linewidth=0, label="25-75% of means")
    ax.step(edges, q[2], where="post", color="C1", linewidth=0.8, label="median of means")


def _draw_chains(
    ds: Any, var: str, figure: Any, canvas: Any, stats: tuple[np.ndarray, np.ndarray, np.ndarray], scale: float,
    infinite: bool, edges: np.ndarray,
) -> Any:
    """A sampler's chains: a panel per component of the dimensions beside ``chain``, a trace per chain in each."""
    meta = ds[f"{var}_mean"]
    trailing = meta.dims[1:]
    at = trailing.index(CHAIN_DIM)
    low, high, mean = (np.moveaxis(v, 1 + at, -1) for v in stats)  # (window, component..., chain)
    others = [d for d in trailing if d != CHAIN_DIM]
    shape = mean.shape[1:-1]
    components = int(np.prod(shape, dtype=np.int64))
    chains = mean.shape[-1]
    low, high, mean = (v.reshape(v.shape[0], components, chains) for v in (low, high, mean))
    panels = min(components, PANELS_UP_TO)
    fig = figure(figsize=(10, 4.8 if panels == 1 else 1.6 + 2.2 * panels), dpi=110)
    canvas(fig)
    axes = [fig.add_subplot(panels, 1, 1)]
    axes += [fig.add_subplot(panels, 1, k + 1, sharex=axes[0]) for k in range(1, panels)]
    for k, ax in enumerate(axes):
        _chain_traces(ax, edges, low[:, k], high[:, k], mean[:, k], legend=k == 0)
        _log_scale_if_wide(ax, low[:, k], high[:, k])
        index = ", ".join(str(i) for i in np.unravel_index(k, shape)) if shape else ""
        where = f"{var}[{index}]" if index else var
        units = meta.attrs.get("units")
        ylabel = f"{where} [{units}]" if units else where
        ax.set_ylabel(ylabel + (f" (x {scale:.0e})" if scale != 1.0 else ""))
        if ax is not axes[-1]:
            ax.tick_params(labelbottom=False)
    window = int(ds.attrs["window"])
    axes[-1].set_xlabel(_step_label(ds, window))
    axes[0].set_xlim(edges[0], edges[-1])
    how = "band: min-max, line: mean, per window" if chains <= BANDS_UP_TO else "a line per chain: its mean per window"
    if chains > CHAIN_LINES_UP_TO:
        how = "the chains' means per window"
    shown = f"; {panels} of its {components} components ({' x '.join(others)}) shown" if panels < components else ""
    title = _title(ds, var, meta.attrs.get("long_name")) + f"\n{chains} chains ({how}){shown}"
    if infinite:
        title += " (values of ±inf drawn at the edges)"
    axes[0].set_title(title, fontsize="medium")
    _fit(fig, axes)
    return fig


OUTLYING_UP_TO = 5
"""Chains apart from the others (or stuck) drawn as lines over the fan of many chains."""


def _outlying(low: np.ndarray, high: np.ndarray, mean: np.ndarray) -> list[tuple[int, str]]:
    """The chains (at most ``OUTLYING_UP_TO``) whose windows' means sit apart from the other chains' (their median
    more than 5 median absolute deviations and half a window's typical range from the chains' median) or which
    barely move (their windows' typical range under a tenth of the chains'): what a fan of many chains hides."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # chains or windows all NaN
        centre = np.nanmedian(mean, axis=0)
        spread = np.nanmedian(high - low, axis=0)
        typical, typical_spread = np.nanmedian(centre), np.nanmedian(spread)
        deviation = np.nanmedian(np.abs(centre - typical))
    scores: list[tuple[float, int, str]] = []
    for c in range(mean.shape[1]):
        off = abs(centre[c] - typical)
        apart = off / deviation if deviation > 0 else 0.0
        if apart > 5 and off > 0.5 * typical_spread:
            scores.append((float(apart), c, "apart"))
        elif typical_spread > 0 and spread[c] < 0.1 * typical_spread:
            scores.append((float(typical_spread / max(spread[c], 1e-300)), c, "stuck"))
    return [(c, why) for _, c, why in sorted(scores, reverse=True)[:OUTLYING_UP_TO]]


def _chain_traces(ax: Any, edges: np.ndarray, low: np.ndarray, high: np.ndarray, mean: np.ndarray, *,
                  legend: bool) -> None:  # fmt: skip
    """Each chain's trace from its windows: a band and a line for a few chains, a line up to a few dozen, and
    beyond, the fan an ensemble gets (the chains' extremes, their means' percentiles)."""
    chains = mean.shape[1]
    if chains > CHAIN_LINES_UP_TO:
        _ensemble(ax, edges, low, high, mean, CHAIN_DIM)
        for n, (c, why) in enumerate(_outlying(low, high, mean)):
            ax.step(edges, mean[:, c], where="post", linewidth=0.9, color=f"C{3 + n}", label=f"chain {c} ({why})")
    elif chains > BANDS_UP_TO:
        ax.fill_between(edges, np.nanmin(low, axis=1), np.nanmax(high, axis=1), step="post", color="0.88",
                        linewidth=0, label=f"min-max over all {chains} chains")  # fmt: skip
    colors = [f"C{c % 10}" for c in range(chains)]
    for c in range(chains if chains <= CHAIN_LINES_UP_TO else 0):
        if chains <= BANDS_UP_TO:
            ax.fill_between(edges, low[:, c], high[:, c], step="post", alpha=0.18, color=colors[c], linewidth=0)
        ax.step(edges, mean[:, c], where="post", linewidth=0.9, color=colors[c],
                label=f"chain {c}" if legend and chains <= BANDS_UP_TO else None)  # fmt: skip
    if legend and ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper right", fontsize="x-small", ncol=chains if chains <= BANDS_UP_TO else 2)
