"""NaNs and infinities in a run's values: the first step holding one is found as each block is written,
recorded in the manifest, warned of once per run, and reported by ``info``.

A run that overflows can otherwise finish with exit 0 and values all inf or NaN (a Lorenz run with
``--dt 1e10``), which nothing else would point out. References here come from one in-memory
``lax.scan`` and numpy.
"""

from __future__ import annotations

import json
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import zarr
from helpers import MANIFEST, assert_same_output, failing, read_manifest, write_manifest

import streamacc
from streamacc.cli import main
from streamacc.errors import StreamaccWarning, VerifyError

N = 1000
BLOCK = 128


def inputs(n: int = N, nan: tuple[int, ...] = (650,), inf: tuple[int, ...] = (700,)) -> np.ndarray:
    """The input of :func:`step`: 1.0 everywhere, NaN at steps ``nan`` and infinity at steps ``inf``."""
    xs = np.ones(n)
    xs[list(nan)] = np.nan
    xs[list(inf)] = np.inf
    return xs


def step(c, x):
    """A finite carry; output ``a`` holds x where x is infinite, ``b`` a state of 3 holding x where x is NaN."""
    c = c + 1.0
    a = jnp.where(jnp.isinf(x), x, c)
    b = jnp.stack([c, jnp.where(jnp.isnan(x), x, c), -c])
    return c, {"a": a, "b": b}


def first_in_scan_order(xs: np.ndarray, save_every: int = 1, reverse: bool = False) -> tuple[int, str] | None:
    """The first step in scan order whose kept y holds a NaN or an infinity, from one lax.scan and numpy."""
    _, ys = jax.lax.scan(step, np.float64(0.0), xs, reverse=reverse)
    kept = {name: np.asarray(y)[save_every - 1 :: save_every] for name, y in ys.items()}
    found = []
    for name in ("a", "b"):
        bad = ~np.isfinite(kept[name].reshape(len(kept[name]), -1)).all(axis=1)
        rows = np.flatnonzero(bad)
        if len(rows):
            row = int(rows[-1] if reverse else rows[0])
            found.append((row * save_every + save_every - 1, name))
    if not found:
        return None
    return max(found, key=lambda f: f[0]) if reverse else min(found, key=lambda f: f[0])


def write(out, xs, **kwargs):
    kwargs.setdefault("block_size", BLOCK)
    kwargs.setdefault("progress", False)
    return streamacc.write(out, step, np.float64(0.0), xs, **kwargs)


def warned(caught) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, StreamaccWarning)]


@pytest.mark.parametrize(
    ("summaries", "save_every", "reverse"),
    [
        (True, 1, False),
        (False, 1, False),
        ([4, 16], 1, False),  # windows smaller than a block: the suspect windows are looked at alone
        ([256], 1, False),  # windows longer than a block: its piece of one window
        (True, 5, False),  # thinned: row r holds step 5r + 4
        (False, 4, False),
        (True, 1, True),  # scan order runs from the end: the highest step is found first (no summaries then)
        (False, 2, True),
    ],
    ids=[
        "summaries",
        "no-summaries",
        "small-windows",
        "long-windows",
        "thinned",
        "thinned-no-summaries",
        "reverse",
        "reverse-thinned",
    ],
)
def test_the_first_non_finite_step_is_recorded_warned_of_once_and_reported(tmp_path, summaries, save_every, reverse):
    xs = inputs(nan=(650, 651, 900), inf=(649, 702, 980))
    want = first_in_scan_order(xs, save_every, reverse)
    assert want is not None
    out = tmp_path / "out.zarr"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        write(out, xs, summaries=summaries, save_every=save_every, reverse=reverse, block_size=BLOCK // 4 * save_every)
    (message,) = warned(caught)  # once, though several blocks hold some
    assert [w.filename for w in caught if issubclass(w.category, StreamaccWarning)] == [__file__]
    step_at, name = want
    assert message == (
        f"{out}: {name} holds a NaN or an infinity at step {step_at}, the first such step in scan order; the run "
        "goes on, and info reports it: check f and its parameters (a time step too large, an overflow, a division "
        "by zero)"
    )
    assert read_manifest(out)["nonfinite"] == {"step": step_at, "array": name}
    about = streamacc.info(out)
    assert (about.nonfinite_step, about.nonfinite_array) == want
    assert f"  non-finite: {name} holds a NaN or an infinity at step {step_at}, the first such step" in str(about)


def test_a_finite_run_records_nothing_and_its_manifest_is_as_before(tmp_path):
    """An output without the field reads as one with no non-finite step: outputs written before it, too."""
    out = tmp_path / "out.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        write(out, np.ones(N))
    assert "nonfinite" not in read_manifest(out)
    about = streamacc.info(out)
    assert about.nonfinite_step is None and about.nonfinite_array is None and "non-finite" not in str(about)


def test_integer_outputs_are_never_non_finite_and_the_carry_of_a_stored_run_is_not_looked_at(tmp_path):
    def counts(c, x):
        return c * x, (jnp.minimum(c, 1.0), jnp.int32(1))  # the carry goes inf; the ys stay finite

    xs = np.full(N, 1e300)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        streamacc.write(tmp_path / "o.zarr", counts, np.float64(1.0), xs, block_size=BLOCK, progress=False)
    assert streamacc.info(tmp_path / "o.zarr").nonfinite_step is None


def test_resume_keeps_the_first_step_found_and_says_so_as_it_starts(tmp_path):
    xs = inputs(nan=(300, 800), inf=())
    ref = tmp_path / "ref.zarr"
    with pytest.warns(StreamaccWarning):
        write(ref, xs, summaries=False)
    out = tmp_path / "out.zarr"
    warns = pytest.warns(StreamaccWarning, match="b holds a NaN or an infinity at step 300")
    with warns, pytest.raises(streamacc.errors.StoreError):
        write(failing(out, "b/c/5/0"), xs, summaries=False)  # block 5 (steps 640-768) fails to be written
    assert read_manifest(out)["committed_blocks"] == 5 and read_manifest(out)["nonfinite"]["step"] == 300
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        write(out, xs, summaries=False, mode="resume")
    assert warned(caught) == [
        f"{out}: b holds a NaN or an infinity at step 300, the first such step in scan order, found by the run this "
        "one continues; the run goes on, and info reports it: check f and its parameters (a time step too large, "
        "an overflow, a division by zero)"
    ]  # the one at step 800 this part found is not the first: nothing more is said
    assert read_manifest(out)["nonfinite"] == {"step": 300, "array": "b"}
    assert_same_output(out, ref)


def test_a_resumed_run_finds_the_first_step_where_the_interrupted_part_had_not_reached_it(tmp_path):
    xs = inputs(nan=(900,), inf=())
    out = tmp_path / "out.zarr"
    with pytest.raises(streamacc.errors.StoreError):
        write(failing(out, "b/c/5/0"), xs, summaries=False)
    assert "nonfinite" not in read_manifest(out)
    with pytest.warns(StreamaccWarning, match="at step 900, the first such step in scan order; the run goes on"):
        write(out, xs, summaries=False, mode="resume")
    assert read_manifest(out)["nonfinite"] == {"step": 900, "array": "b"}


@pytest.mark.parametrize("nan", [300, 950], ids=["in-a-kept-block", "in-the-recomputed-last-block"])
def test_extend_keeps_the_first_step_found(tmp_path, nan):
    """An extension recomputes the short last block (steps 896-1000): a step found there is found there again."""
    xs = inputs(n=2 * N, nan=(nan, 1500), inf=())
    out = tmp_path / "out.zarr"
    with pytest.warns(StreamaccWarning):
        write(out, xs[:N])
    assert read_manifest(out)["nonfinite"] == {"step": nan, "array": "b"}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        write(out, xs, mode="extend")
    (message,) = warned(caught)
    assert f"b holds a NaN or an infinity at step {nan}, the first such step in scan order" in message
    assert ("found by the run this one continues" in message) == (nan == 300)
    assert read_manifest(out)["nonfinite"] == {"step": nan, "array": "b"}
    ref = tmp_path / "ref.zarr"
    with pytest.warns(StreamaccWarning):
        write(ref, xs)
    assert read_manifest(ref)["nonfinite"] == read_manifest(out)["nonfinite"]


def test_a_virtual_run_without_summaries_checks_its_carry_at_each_block_end(tmp_path):
    """No ys are computed: the carry leaving block 2 (steps 256-384) is the first to hold an infinity."""

    def grows(c, x):
        return c * x, c

    xs = np.ones(N)
    xs[300] = np.inf
    out = tmp_path / "out.zarr"
    with pytest.warns(StreamaccWarning) as caught:
        streamacc.write(out, grows, np.float64(1.0), xs, block_size=BLOCK, virtual=True, summaries=False,
                        progress=False)  # fmt: skip
    (message,) = warned(caught)
    assert message.startswith(
        f"{out}: the carry holds a NaN or an infinity after step 383, the end of the first block whose carry does; a "
        "virtual run without summaries computes no ys, so only its carry is checked, at each block's end;"
    )
    about = streamacc.info(out)
    assert (about.nonfinite_step, about.nonfinite_array) == (383, None)
    assert "  non-finite: the carry holds a NaN or an infinity after step 383" in str(about)
    with_summaries = tmp_path / "summarised.zarr"  # its blocks are computed for their summaries: ys are checked
    with pytest.warns(StreamaccWarning, match="y holds a NaN or an infinity at step 301"):
        streamacc.write(with_summaries, grows, np.float64(1.0), xs, block_size=BLOCK, virtual=True, progress=False)
    assert streamacc.info(with_summaries).nonfinite_step == 301  # y is the carry entering the step


def test_lorenz_with_a_huge_time_step_says_its_values_are_not_finite(tmp_path, capfd):
    """The command line's write exits 0 and prints the warning as its own message; info prints the step."""
    for options in ([], ["--no-summaries"]):
        out = tmp_path / f"lorenz{len(options)}.zarr"
        args = ["write", str(out), "--recipe", "lorenz", "--dt", "1e10", "--size", "1000", "--no-progress", *options]
        assert main(args) == 0
        err = capfd.readouterr().err
        group = zarr.open_group(out, mode="r")
        firsts = {n: int(np.flatnonzero(~np.isfinite(group[n][:]))[0]) for n in ("x", "y", "z")}
        step_at = min(firsts.values())
        name = next(n for n in ("x", "y", "z") if firsts[n] == step_at)
        assert err == (
            f"streamacc: {out}: {name} holds a NaN or an infinity at step {step_at}, the first such step in scan "
            "order; the run goes on, and info reports it: check f and its parameters (a time step too large, an "
            "overflow, a division by zero)\n"
        )
        assert main(["info", str(out)]) == 0
        text = capfd.readouterr().out
        assert f"\n  non-finite: {name} holds a NaN or an infinity at step {step_at}, the first such step" in text
    assert main(["write", str(tmp_path / "fine.zarr"), "--recipe", "lorenz", "--size", "1000", "--no-progress"]) == 0
    assert "NaN" not in capfd.readouterr().err


def test_a_damaged_record_of_the_first_non_finite_step_is_refused(tmp_path):
    out = tmp_path / "out.zarr"
    with pytest.warns(StreamaccWarning):
        write(out, inputs())
    manifest = read_manifest(out)
    for bad in ({"step": N + 5, "array": "b"}, {"step": 650, "array": "nope"}):
        write_manifest(out, {**manifest, "nonfinite": bad})
        with pytest.raises(VerifyError, match="its record of the first step holding a NaN or an infinity"):
            streamacc.verify(out, step, np.float64(0.0), inputs())
    for bad in ([650, "b"], {"step": "650", "array": "b"}, {"step": 650}):
        write_manifest(out, {**manifest, "nonfinite": bad})
        with pytest.raises(VerifyError, match=r"the manifest of .* is damaged"):
            streamacc.info(out)
    doc = json.loads((out / MANIFEST).read_bytes())
    assert "nonfinite" in doc["attributes"]["streamacc_manifest"]


def test_a_cluster_finds_the_same_first_step(tmp_path, dask_client):
    xs = inputs(nan=(650, 900), inf=(702,))
    out = tmp_path / "out.zarr"
    with pytest.warns(StreamaccWarning, match="b holds a NaN or an infinity at step 650"):
        write(out, xs, client=dask_client)
    assert read_manifest(out)["nonfinite"] == {"step": 650, "array": "b"}
