"""``streamacc plot``: a finished, an unfinished and a missing output, a vector output, an ensemble,
a range of steps, and the one-line answers when matplotlib or the output is missing."""

from __future__ import annotations

import itertools
import shutil
import sys
import uuid
import warnings

import jax.numpy as jnp
import numpy as np
import pytest
from helpers import failing

import streamacc
from streamacc.cli import main
from streamacc.errors import StoreError

PNG = b"\x89PNG\r\n\x1a\n"


def run(*argv, capsys) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def drawn(monkeypatch) -> list:
    """Every figure the command saves, as it saves it."""
    from matplotlib.figure import Figure

    figures, real = [], Figure.savefig

    def savefig(self, *args, **kwargs):
        figures.append(self)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", savefig)
    return figures


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    out = tmp_path_factory.mktemp("plot") / "gp.zarr"
    assert main(["write", str(out), "--size", "3000", "--block-size", "512", "--summary-windows", "16,256",
                 "--no-progress"]) == 0  # fmt: skip
    return out


def test_a_finished_output_beside_itself(finished, capsys, drawn):
    code, out, err = run("plot", finished, capsys=capsys)
    png = finished.parent / "gp-x.png"
    assert code == 0 and err == "" and out.strip() == str(png)
    assert png.read_bytes().startswith(PNG)
    (figure,) = drawn
    title = figure.axes[0].get_title()
    assert title.startswith("gp {") and "ratio" in title and "unfinished" not in title
    assert "x: 188 windows of 16 steps, 3000 steps in all" in title  # 188 windows of its finest level, 16 rows


def test_a_small_output_is_drawn_from_its_data_a_step_a_window(tmp_path, capsys, drawn):
    """3000 steps have no summaries: the picture is its data, every step."""
    out = tmp_path / "gp.zarr"
    assert main(["write", str(out), "--size", "3000", "--no-progress"]) == 0
    code, _, err = run("plot", out, capsys=capsys)
    assert code == 0 and err == ""
    (figure,) = drawn
    assert "x: 3000 windows of 1 step, 3000 steps in all" in figure.axes[0].get_title()


def test_a_range_of_steps_and_another_file(finished, tmp_path, capsys):
    target = tmp_path / "part.png"
    code, out, _ = run("plot", finished, "--steps", "1000:2**11", "-o", target, capsys=capsys)
    assert code == 0 and out.strip() == str(target) and target.read_bytes().startswith(PNG)
    in_none = "no committed step is in --steps 4000: (the committed steps are 0 to 3000)"
    for bad, what in [("5", "is not A:B"), ("9:3", "is empty"), ("4000:", in_none)]:
        code, _, err = run("plot", finished, "--steps", bad, "-o", target, capsys=capsys)
        assert code == 2 and what in err and len(err.strip().splitlines()) == 1


def test_an_unfinished_output_says_so(tmp_path, capsys, drawn):
    out = tmp_path / "cut.zarr"
    with pytest.raises(StoreError):  # at block 2, steps 1024-1535
        streamacc.write(failing(out, "x/c/2"), lambda c, _: (c + 1.0, c), np.float64(0.0), length=3000,
                        block_size=512, names=["x"], progress=False, summaries=[64, 256])  # fmt: skip
    code, printed, _ = run("plot", out, capsys=capsys)
    assert code == 0 and printed.strip() == str(tmp_path / "cut-x.png")
    assert (tmp_path / "cut-x.png").read_bytes().startswith(PNG)
    ds = streamacc.overview(out, points=2048)
    assert ds.step.values[-1] == 1024 - 64 and ds.x_max.values[-1] == 1023.0
    assert "unfinished: steps 0 to 1024 of 3000 committed" in drawn[0].axes[0].get_title()


def test_a_missing_output_or_array_is_one_line(tmp_path, finished, capsys):
    code, out, err = run("plot", tmp_path / "nothing.zarr", capsys=capsys)
    assert code == 2 and out == "" and err.startswith("streamacc: error:") and "does not exist" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "nothing-x.png").exists()
    code, _, err = run("plot", finished, "--var", "y", capsys=capsys)
    assert code == 2 and "--var 'y' is not an output" in err and "choose one of: x" in err


def test_without_matplotlib_it_says_how_to_install_it(finished, monkeypatch, capsys):
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    code, out, err = run("plot", finished, "-o", finished.parent / "never.png", capsys=capsys)
    assert code == 2 and out == ""
    assert err.strip() == "streamacc: error: streamacc plot needs matplotlib: pip install 'streamacc[plot]'"
    assert not (finished.parent / "never.png").exists()


def test_a_vector_output_is_a_heat_map(tmp_path, drawn):
    out = tmp_path / "vec.zarr"
    streamacc.write(str(out), lambda c, _: (c + 1.0, c * np.arange(5.0)), np.float64(0.0), length=2000,
                    block_size=300, names=["u"], progress=False, summaries=[16, 64])  # fmt: skip
    assert main(["plot", str(out)]) == 0
    (fig,) = drawn
    meshes = [c for c in fig.axes[0].collections if type(c).__name__ == "QuadMesh"]
    assert len(meshes) == 1 and meshes[0].get_array().shape == (5, 125)
    assert fig.axes[0].get_ylabel() == "u_dim_1"


def ensembles(c, _):
    def spread(size):
        return c * jnp.linspace(0.5, 1.5, size) + jnp.arange(size, dtype=c.dtype)

    return c + 1.0, {"few": spread(3), "many": spread(50)}


def test_an_ensemble_is_a_band_per_path_or_a_fan(tmp_path, drawn):
    out = tmp_path / "w.zarr"
    dims = {"few": ["path"], "many": ["member"]}  # a band per path of a few, a fan of many
    streamacc.write(out, ensembles, np.float64(0.0), length=640, block_size=64, dims=dims, summaries=[16],
                    progress=False)  # fmt: skip
    assert main(["plot", str(out), "--var", "few"]) == 0
    assert main(["plot", str(out), "--var", "many"]) == 0
    few, many = (figure.axes[0].get_legend_handles_labels()[1] for figure in drawn)
    assert few == [f"path {p}: {what}" for p in range(3) for what in ("min-max", "mean")]
    assert many == ["min-max over all 50 members", "5-95% of means", "25-75% of means", "median of means"]


def field(c, _):
    return c + 1.0, c * jnp.ones((3, 4)) + jnp.arange(12.0).reshape(3, 4)


@pytest.mark.parametrize(
    ("time", "label", "first"),
    [
        (None, "step (windows of 16 steps)", 0.0),
        ({"step": 0.25, "start": 2.0, "units": "s"}, "time [s] (windows of 16 steps, 4 s)", 2.0),
        ({"step": 0.5}, "time (windows of 16 steps, 8)", 0.0),
    ],
)
def test_a_field_is_the_band_over_its_dimensions_against_the_time_where_the_output_has_one(
    tmp_path, drawn, time, label, first
):
    out = tmp_path / "field.zarr"
    streamacc.write(out, field, np.float64(0.0), length=640, block_size=64, names="u", dims={"u": ["y", "x"]},
                    time=time, summaries=[16], progress=False)  # fmt: skip
    assert main(["plot", str(out)]) == 0
    (ax,) = drawn[0].axes
    assert ax.get_legend_handles_labels()[1] == ["over y and x: min-max", "over y and x: mean"]
    assert ax.get_xlabel() == label
    step, start = (1.0, 0.0) if time is None else (time["step"], time.get("start", 0.0))
    assert ax.get_xlim() == (first, start + 640 * step)  # the last window ends at step 640
    (line,) = ax.get_lines()
    assert line.get_xdata()[1] == start + 16 * step  # the second window begins at step 16


def test_the_picture_goes_beside_a_local_output_and_into_the_current_folder_for_a_url(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    url = f"memory://streamacc-tests/{uuid.uuid4().hex}/deep/gp.zarr"
    streamacc.write(url, lambda c, _: (c + 1.0, c), np.float64(0.0), length=64, names=["y"], summaries=[16],
                    progress=False)  # fmt: skip
    assert main(["write", "out.zarr", "--size", "100", "--no-progress"]) == 0
    (tmp_path / "data").mkdir()
    shutil.copytree(tmp_path / "out.zarr", tmp_path / "data" / "run.zarr")
    shutil.copytree(tmp_path / "out.zarr", tmp_path / "a")
    capsys.readouterr()
    for out, png in [
        ("out.zarr", "out-x.png"),
        (f"{tmp_path}/data/run.zarr/", f"{tmp_path}/data/run-x.png"),
        (url, "gp-y.png"),
        (f"file://{tmp_path}/a", f"{tmp_path}/a-x.png"),
    ]:
        assert main(["plot", out]) == 0
        assert capsys.readouterr().out == f"{png}\n"
        assert (tmp_path / png).read_bytes().startswith(PNG)


def test_summary_windows_from_the_command_line(tmp_path, capsys):
    out = tmp_path / "w.zarr"
    assert main(["write", str(out), "--size", "2000", "--summary-windows", "2**4,64", "--no-progress"]) == 0
    assert streamacc.overview(out, points=100).attrs["windows"] == [16, 64]
    code, _, err = run("write", tmp_path / "bad.zarr", "--size", "10", "--summary-windows", "8,12", capsys=capsys)
    assert code == 2 and "--summary-windows 8,12 does not give increasing window lengths" in err
    assert not (tmp_path / "bad.zarr").exists()


def plot_within(out, seconds: float, fifo=None) -> tuple[int, str]:
    """``streamacc plot OUT`` in this process, or a failure if it is still reading after ``seconds``
    (a reader blocked on a named pipe is then released, so that the test ends either way)."""
    import contextlib
    import io
    import os
    import threading

    done: list[tuple[int, str]] = []

    def plot() -> None:
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(["plot", str(out), "-o", str(out.parent / "p.png")])
        done.append((code, err.getvalue()))

    thread = threading.Thread(target=plot, daemon=True)
    thread.start()
    thread.join(seconds)
    if fifo is not None and thread.is_alive():
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # the blocked reader reads an empty file
        thread.join(seconds)
    assert done, "plot hung reading the output"
    return done[0]


@pytest.mark.parametrize("where", ["x_min/c/0", "zarr.json"], ids=["chunk", "level"])
def test_a_named_pipe_among_the_summaries_is_refused_not_read(tmp_path, finished, where):
    import os
    import shutil

    out = tmp_path / "out.zarr"
    shutil.copytree(finished, out)
    level = sorted((out / "_streamacc" / "summaries").glob("w*"))[0]
    where = level.relative_to(out) / where
    (out / where).unlink()
    os.mkfifo(out / where)
    code, err = plot_within(out, 30, fifo=out / where)
    assert code == 1 and err.count("\n") == 1 and f"{out / where} inside {out}" in err and "special file" in err
    with pytest.raises(StoreError, match="special file"):
        streamacc.overview(out)


def test_summaries_linked_from_another_output_are_refused(tmp_path, finished):
    import shutil

    other, out = tmp_path / "other.zarr", tmp_path / "out.zarr"
    assert main(["write", str(other), "--size", "3000", "--block-size", "512", "--ratio", "1.5", "--summary-windows",
                 "16,256", "--no-progress"]) == 0  # fmt: skip
    shutil.copytree(finished, out)
    shutil.rmtree(out / "_streamacc" / "summaries")
    (out / "_streamacc" / "summaries").symlink_to(other / "_streamacc" / "summaries")
    code, err = plot_within(out, 30)
    assert code == 1 and err.count("\n") == 1 and "summaries inside" in err and "link" in err
    with pytest.raises(StoreError, match="link"):
        streamacc.overview(out)


def test_the_last_partial_window_is_drawn_to_its_last_step(tmp_path, capsys, drawn):
    out = tmp_path / "short.zarr"
    streamacc.write(out, lambda c, _: (c + 1.0, c), np.float64(0.0), length=1000, summaries=[64], progress=False)
    code, _, _ = run("plot", out, "-o", tmp_path / "short.png", capsys=capsys)
    assert code == 0 and drawn[0].axes[0].get_xlim() == (0.0, 1000.0)  # 16 windows, the last holding 960-999


def test_values_near_the_largest_float_and_infinite_ones_are_drawn(tmp_path, capsys, drawn):
    rng = np.random.default_rng(0)
    huge = rng.choice([-1.7e308, 1.7e308], size=2048)
    sparse = rng.normal(size=2048)
    sparse[::100], sparse[50::100] = np.inf, -np.inf  # in every window of the level drawn
    for name, values in (("huge", huge), ("sparse", sparse)):
        out = tmp_path / f"{name}.zarr"
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            streamacc.write(out, lambda c, x: (c, x), np.float64(0.0), values, names="x", summaries=[64],
                            progress=False)  # fmt: skip
        said = [str(w.message) for w in caught]
        assert said == ([] if name == "huge" else [f"{out}: x holds a NaN or an infinity at step 0, the first such "
                        "step in scan order; the run goes on, and info reports it: check f and its parameters (a "
                        "time step too large, an overflow, a division by zero)"])  # fmt: skip
        code, _, err = run("plot", out, "-o", tmp_path / f"{name}.png", capsys=capsys)
        assert code == 0 and err == ""
        ax = drawn[-1].axes[0]
        bottom, top = ax.get_ylim()
        assert np.isfinite([bottom, top]).all() and bottom < top
        assert ax.collections and len(ax.collections[0].get_paths()) > 0  # the band is drawn
        if name == "huge":
            assert ax.get_ylabel().endswith("(x 1e+308)") and bottom < -1.0 and top > 1.0
        else:
            assert "values of ±inf drawn at the edges" in ax.get_title() and bottom < -2.0 and top > 2.0


def test_plot_from_inside_an_output_draws_beside_it_and_never_into_it(finished, capsys, monkeypatch):
    monkeypatch.chdir(finished)
    beside = finished.parent / "gp-x.png"
    beside.unlink(missing_ok=True)
    code, out, _ = run("plot", ".", capsys=capsys)
    assert code == 0 and out.strip() == str(beside) and beside.read_bytes().startswith(PNG)
    code, _, err = run("plot", ".", "-o", "x/c/pic", capsys=capsys)
    assert code == 2 and err.count("\n") == 1
    assert f"the picture x/c/pic.png would be written inside the output {finished}" in err and "pass -o" in err
    assert not list(finished.rglob("*.png"))
    code, out, _ = run("plot", ".", "-o", finished.parent / "named", capsys=capsys)
    assert code == 0 and out.strip() == str(finished.parent / "named.png")  # the file written, as printed
    assert (finished.parent / "named.png").read_bytes().startswith(PNG)


def test_a_folder_named_like_the_bookkeeping_makes_no_output(finished, tmp_path, capsys):
    """``pics/_streamacc`` is the user's folder, not an output's bookkeeping: a picture may go into ``pics``."""
    (tmp_path / "pics" / "_streamacc").mkdir(parents=True)
    code, _, err = run("plot", finished, "-o", tmp_path / "pics" / "a.png", capsys=capsys)
    assert code == 0 and err == "" and (tmp_path / "pics" / "a.png").read_bytes().startswith(PNG)


def test_every_label_is_inside_the_picture_and_the_colour_bar_beside_the_map(tmp_path, capsys, drawn):
    # the margins are measured from the labels (no layout engine): nothing is cut off, whatever the labels are
    streamacc.write(tmp_path / "vec.zarr", lambda c, _: (c + 1.0, c * np.arange(5.0)), np.float64(0.0), length=2000,
                    block_size=300, names=["u"], progress=False, summaries=[16, 64])  # fmt: skip
    streamacc.write(tmp_path / "off.zarr", lambda c, _: (c + 1.0, 1e-6 * c + 12345.0), np.float64(0.0), length=3000,
                    names=["y"], progress=False, summaries=[4, 16])  # fmt: skip (an offset text above the axis)
    streamacc.write(tmp_path / "gp.zarr", lambda c, _: (c * 1.01, c), np.float64(1.0), length=3000, names=["x"],
                    progress=False, summaries=[4, 16])  # fmt: skip (a logarithmic axis)
    for name in ("vec", "off", "gp"):
        assert run("plot", tmp_path / f"{name}.zarr", capsys=capsys)[0] == 0
    vec, off, gp = drawn
    assert off.axes[0].yaxis.get_offset_text().get_text() and gp.axes[0].get_yscale() == "log"
    for figure in drawn:
        figure.canvas.draw()
        drawn_on, picture = figure.get_tightbbox(), figure.bbox_inches  # in inches: what is drawn, the picture
        assert picture.x0 - 0.01 <= drawn_on.x0 and drawn_on.x1 <= picture.x1 + 0.01
        assert picture.y0 - 0.01 <= drawn_on.y0 and drawn_on.y1 <= picture.y1 + 0.01
        assert drawn_on.width > 0.95 * picture.width and drawn_on.height > 0.95 * picture.height  # and fills it
    renderer = vec.canvas.get_renderer()
    heat, bar = (a.get_window_extent(renderer) for a in vec.axes)
    assert heat.x1 < bar.x0 and bar.y0 == pytest.approx(heat.y0) and bar.y1 == pytest.approx(heat.y1)
    assert bar.width < 0.05 * vec.bbox.width and vec.axes[1].get_ylabel() == "mean u"


def chain_step(shift, flat):
    """Chains of a wobble per chain (and component), chain ``flat`` stuck at 0.5, every chain offset by ``shift``."""

    def step(c, _):
        rates = 1.0 + 0.1 * jnp.arange(shift.shape[0], dtype=c.dtype)
        wobble = jnp.sin(c * rates[:, None] + jnp.arange(12.0)) + shift[:, None]
        x = wobble.at[flat].set(0.5)
        return c + 1.0, {"x": x, "lp": -0.5 * jnp.sum(x * x, axis=1)}

    return step


def write_chains(out, chains, *, flat=2, apart=None, components=3):
    shift = np.zeros(chains)
    if apart is not None:
        shift[apart] = 50.0

    def step(c, x):
        c, y = chain_step(jnp.asarray(shift), flat)(c, x)
        return c, {"x": y["x"][:, :components], "lp": y["lp"]}

    streamacc.write(out, step, np.float64(0.0), length=4096, block_size=1024, summaries=[64], progress=False,
                    dims={"x": ["chain", "dim"], "lp": ["chain"]})  # fmt: skip


def test_the_chains_of_a_sampler_are_a_trace_each_in_a_panel_per_component(tmp_path, capsys, drawn):
    out = tmp_path / "chains.zarr"
    write_chains(out, 4)
    ds = streamacc.overview(out, points=64)
    assert ds["x_mean"].dims == ("step", "chain", "dim") and ds.sizes["step"] == 64  # each chain's own windows
    for var, panels in (("x", 3), ("lp", 1)):
        assert run("plot", out, "--var", var, capsys=capsys)[0] == 0
        figure = drawn[-1]
        assert len(figure.axes) == panels
        labels = figure.axes[0].get_legend_handles_labels()[1]
        assert labels == [f"chain {c}" for c in range(4)]
        assert "4 chains (band: min-max, line: mean, per window)" in figure.axes[0].get_title()
        for ax in figure.axes:
            lines = ax.get_lines()
            assert len(lines) == 4 and len(ax.collections) == 4  # a line and a band per chain
            stuck = lines[2].get_ydata()
            assert np.all(stuck == (0.5 if var == "x" else stuck[0]))  # the stuck chain is a flat line
        assert [ax.get_ylabel() for ax in figure.axes] == (["x[0]", "x[1]", "x[2]"] if var == "x" else ["lp"])
        assert figure.axes[-1].get_xlabel() == "step (windows of 64 steps)"
        assert not any(ax.get_xlabel() or any(t.get_text() for t in ax.get_xticklabels()) for ax in figure.axes[:-1])
        figure.canvas.draw()
        drawn_on, picture = figure.get_tightbbox(), figure.bbox_inches
        assert picture.x0 - 0.01 <= drawn_on.x0 and drawn_on.x1 <= picture.x1 + 0.01
        assert picture.y0 - 0.01 <= drawn_on.y0 and drawn_on.y1 <= picture.y1 + 0.01
        renderer = figure.canvas.get_renderer()
        boxes = [ax.get_tightbbox(renderer) for ax in figure.axes]
        assert all(upper.y0 >= lower.y1 - 1 for upper, lower in itertools.pairwise(boxes))  # no overlap


def test_many_chains_are_a_line_each_then_a_fan_with_the_chains_apart_or_stuck(tmp_path, capsys, drawn):
    write_chains(tmp_path / "twenty.zarr", 20, components=1)
    write_chains(tmp_path / "forty.zarr", 40, flat=7, apart=30, components=12)
    assert run("plot", tmp_path / "twenty.zarr", "--var", "x", capsys=capsys)[0] == 0
    assert run("plot", tmp_path / "forty.zarr", "--var", "x", capsys=capsys)[0] == 0
    twenty, forty = drawn
    ax = twenty.axes[0]
    assert len(ax.get_lines()) == 20 and ax.get_legend_handles_labels()[1] == ["min-max over all 20 chains"]
    assert "20 chains (a line per chain: its mean per window)" in ax.get_title()
    assert len(forty.axes) == 8 and "8 of its 12 components (dim) shown" in forty.axes[0].get_title()
    assert forty.axes[0].get_legend_handles_labels()[1] == [
        "min-max over all 40 chains", "5-95% of means", "25-75% of means", "median of means", "chain 7 (stuck)",
        "chain 30 (apart)",
    ]  # fmt: skip
    assert forty.axes[1].get_legend() is None
