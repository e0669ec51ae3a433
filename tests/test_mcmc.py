"""Samplers as steps: chains stream as one ``lax.scan``, resume and extend exactly, and read as ArviZ reads them.

The samplers are in ``samplers.py``: a hand-written random-walk Metropolis (its state a
NamedTuple of our own), blackjax's random-walk Metropolis and NUTS, and numpyro's HMC through
its functional interface, each an ensemble of 4 chains (the step vmaps the kernel) with a
typed PRNG key (``jax.random.key``) or numpyro's raw one in the carry, as the library makes
its state: nothing flattened. No streamacc warning may come of them (the fingerprint of
an ordinary sampler's step is made without one). Killed writers run as processes of their
own; the references are one in-memory ``lax.scan`` and uninterrupted runs.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
import samplers
import zarr
from helpers import (
    Popen,
    assert_bits_equal,
    assert_same_output,
    failing,
    kill_at,
    read_manifest,
    run_warm,
    start_writer,
)

import streamacc
from streamacc.cli import main
from streamacc.errors import InputError, ResumeError, StoreError, VerifyError

pytestmark = pytest.mark.filterwarnings("error::streamacc.errors.StreamaccWarning")

LENGTH, BLOCK, EVERY = 480, 96, 4  # 5 blocks of 24 kept draws
SAMPLERS = ["metropolis", "blackjax_rwmh", "blackjax_nuts", "numpyro_hmc"]
NUTS = pytest.mark.xdist_group("nuts")
"""The tests of blackjax's NUTS, in one worker of pytest -n: its window adaptation (seconds to compile) made once."""
NEEDS = {"blackjax_rwmh": "blackjax", "blackjax_nuts": "blackjax", "numpyro_hmc": "numpyro"}
TESTS = Path(__file__).parent


@pytest.fixture(scope="module")
def standard_promotion():
    """The samplers' own code mixes dtypes as JAX's standard promotion allows (the suite's is strict)."""
    with jax.numpy_dtype_promotion("standard"):
        yield


def sampler(name: str):
    if name in NEEDS:
        pytest.importorskip(NEEDS[name])
    if name == "metropolis":
        return samplers.metropolis, samplers.metropolis_init()
    return getattr(samplers, name)()


def write(out, f, carry, length=LENGTH, **kw):
    dims = {"x": ["chain", "dim"], **{n: ["chain"] for n in ("lp", "accepted", "diverging", "acceptance_rate")}}
    dims = {n: d for n, d in dims.items() if n in jax.eval_shape(f, carry, None)[1]}
    kw = {"block_size": BLOCK, "save_every": EVERY, "summaries": [4], "dims": dims, "progress": False, **kw}
    return streamacc.write(out, f, carry, length=length, **kw)


@pytest.mark.parametrize("name", [pytest.param(n, marks=NUTS) if n == "blackjax_nuts" else n for n in SAMPLERS])
def test_a_sampler_streams_as_one_lax_scan_and_resumes_and_extends_exactly(tmp_path, standard_promotion, name):
    """The kept draws and the final state are one in-memory ``lax.scan``'s bits; a run failing at its third block
    resumes to the uninterrupted run's files, and a shorter run extended is one longer run."""
    f, carry = sampler(name)
    ref = tmp_path / "ref.zarr"
    final = write(ref, f, carry)
    want_carry, want = jax.lax.scan(f, carry, length=LENGTH)
    assert_bits_equal(final, want_carry)
    ds = streamacc.open(ref)
    assert sorted(ds.data_vars) == sorted(want)
    for key, ys in want.items():
        assert np.asarray(ds[key]).tobytes() == np.asarray(ys)[EVERY - 1 :: EVERY].tobytes(), key
    assert ds["x"].dims == ("step", "chain", "dim") and ds.sizes["chain"] == samplers.CHAINS

    out = tmp_path / "out.zarr"
    with pytest.raises(StoreError, match="mode='resume'"):
        write(failing(out, "x/c/2/0/0"), f, carry)
    assert read_manifest(out)["committed_blocks"] == 2
    assert_bits_equal(write(out, f, carry, mode="resume"), want_carry)
    assert_same_output(out, ref)

    longer = tmp_path / "longer.zarr"
    write(longer, f, carry, length=2 * BLOCK)
    assert_bits_equal(write(longer, f, carry, mode="extend"), want_carry)
    assert_same_output(longer, ref)


@NUTS
@pytest.mark.skipif(importlib.util.find_spec("blackjax") is None, reason="needs blackjax")
def test_parameters_closed_over_are_constants_of_the_compiled_block(tmp_path, standard_promotion):
    """NUTS with its adapted step sizes and mass matrices closed over, not carried: the block is compiled with
    them as constants, as ``jax.jit`` compiles a scan, so the draws are those of the jitted scan (an eager
    ``lax.scan`` passes them to XLA as arguments, which may round differently: the guide says to carry them)."""
    f, carry = samplers.blackjax_nuts(params_in_carry=False)
    final = write(tmp_path / "out.zarr", f, carry, length=2 * BLOCK, save_every=1)
    want_carry, want = jax.jit(lambda c: jax.lax.scan(f, c, length=2 * BLOCK))(carry)
    assert_bits_equal(final, want_carry)
    assert np.asarray(streamacc.open(tmp_path / "out.zarr")["x"]).tobytes() == np.asarray(want["x"]).tobytes()


@pytest.mark.skipif(importlib.util.find_spec("blackjax") is None, reason="needs blackjax")
def test_a_changed_proposal_is_caught_by_the_resume(tmp_path, standard_promotion):
    """blackjax's kernels are library closures, fingerprinted by name: a resume with another proposal scale is
    refused by the recomputation of the last committed block, before anything is written."""
    f, carry = samplers.blackjax_rwmh()
    out = tmp_path / "out.zarr"
    with pytest.raises(StoreError):
        write(failing(out, "x/c/2/0/0"), f, carry)
    wider, _ = samplers.blackjax_rwmh(scale=0.9, warm=False)
    files = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    with pytest.raises(ResumeError, match="block"):
        write(out, wider, carry, mode="resume")
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == files


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("numpyro") is None, reason="needs blackjax and numpyro")
def test_a_sampler_step_fingerprints_alike_in_another_process_without_a_warning(standard_promotion):
    """What a resume in another process compares: the step's recorded identity, made again there, warning of
    nothing (a value it cannot fingerprint would be warned of)."""
    from streamacc.run import describe_function

    pytest.importorskip("blackjax")
    code = (
        "import sys, warnings; sys.path.insert(0, sys.argv[1]); warnings.simplefilter('error')\n"
        "import jax; jax.config.update('jax_enable_x64', True)\n"
        "import samplers\nfrom streamacc.run import describe_function\n"
        "for name in ('blackjax_rwmh', 'numpyro_hmc'):\n"
        "    print(describe_function(getattr(samplers, name)(warm=False)[0]))\n"
    )
    proc = run_warm([sys.executable, "-c", code, str(TESTS)], text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    here = [describe_function(getattr(samplers, name)(warm=False)[0]) for name in ("blackjax_rwmh", "numpyro_hmc")]
    assert proc.stdout.split("\n")[:2] == here


# --- killed with SIGKILL -----------------------------------------------------------------------------

SCRIPT = TESTS / "samplers.py"
KILLED = (2**14, 2**9)  # 32 blocks of the Metropolis chains, 256 kept draws each


def chain_writer(out, *mode: str) -> Popen:
    args = [sys.executable, SCRIPT, out, *map(str, KILLED), *mode]
    return Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


@pytest.mark.slow
def test_metropolis_chains_killed_and_resumed_are_the_uninterrupted_chains(tmp_path):
    """SIGKILLed after 2 and then after 12 committed blocks, and resumed each time in a new process: the same PRNG
    stream continues, and the output is, file for file, the run that was never interrupted."""
    ref = tmp_path / "ref.zarr"
    with chain_writer(ref) as proc:
        pass
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "out.zarr"
    for blocks, mode in ((2, ()), (12, ("resume",))):
        proc = chain_writer(out, *mode)
        assert kill_at(proc, out, blocks, delay=0.0), "the writer finished before it was killed"
        assert blocks <= read_manifest(out)["committed_blocks"] < 32
    with chain_writer(out, "resume") as proc:
        pass
    assert proc.returncode == 0, proc.stderr
    assert_same_output(out, ref)
    report = streamacc.verify(out, samplers.metropolis, samplers.metropolis_init(), blocks=32)
    assert report.complete and len(report.checked_blocks) == 32


RANDOMWALK = ["--recipe", "randomwalk", "--paths", "4", "--seed", "11", "--size", "2**17", "--block-size", "2**11",
              "--codec", "none"]  # fmt: skip (64 blocks)


@pytest.mark.slow
def test_the_random_walk_recipe_killed_and_resumed_from_the_command_line_is_the_uninterrupted_run(tmp_path):
    ref, out = tmp_path / "ref.zarr", tmp_path / "out.zarr"
    assert main(["write", str(ref), *RANDOMWALK, "--no-progress"]) == 0
    proc = start_writer(out, RANDOMWALK, resume=False)
    assert kill_at(proc, out, 3, delay=0.0), proc.stderr.read().decode()
    assert 3 <= read_manifest(out)["committed_blocks"] < 64
    assert main(["write", str(out), *RANDOMWALK, "--no-progress", "--resume"]) == 0
    assert_same_output(out, ref)


def test_the_random_walk_recipe_extended_from_the_command_line_is_one_longer_run(tmp_path):
    args = ["--recipe", "randomwalk", "--paths", "3", "--seed", "5", "--block-size", "256", "--no-progress",
            "--summary-windows", "16,256"]  # fmt: skip
    out, ref = tmp_path / "out.zarr", tmp_path / "ref.zarr"
    assert main(["write", str(out), "--size", "1000", *args]) == 0
    assert main(["write", str(out), "--size", "2300", *args, "--extend"]) == 0
    assert main(["write", str(ref), "--size", "2300", *args]) == 0
    assert_same_output(out, ref)


# --- to_arviz -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chains(tmp_path_factory):
    """The Metropolis chains, 2000 steps kept every 2nd: 1000 draws of 4 chains."""
    out = tmp_path_factory.mktemp("chains") / "chains.zarr"
    streamacc.write(out, samplers.metropolis, samplers.metropolis_init(), length=2000, block_size=500, save_every=2,
                    dims=samplers.DIMS, progress=False)  # fmt: skip
    return out


@pytest.mark.parametrize("chunks", [None, "auto"])
def test_to_arviz_puts_chains_by_draws_in_posterior_and_sample_stats(chains, chunks):
    pytest.importorskip("arviz")
    tree = streamacc.to_arviz(chains, sample_stats={"lp": "lp", "accepted": "acceptance"}, chunks=chunks)
    posterior, stats = tree["posterior"].to_dataset(), tree["sample_stats"].to_dataset()
    assert list(posterior.data_vars) == ["x"] and sorted(stats.data_vars) == ["acceptance", "lp"]
    assert posterior["x"].dims == ("chain", "draw", "dim") and stats["lp"].dims == ("chain", "draw")
    assert dict(posterior.sizes) == {"chain": 4, "draw": 1000, "dim": 2}
    assert posterior["chain"].values.tolist() == [0, 1, 2, 3] and posterior["draw"].values[[0, -1]].tolist() == [0, 999]
    assert (posterior["x"].chunks is None) == (chunks is None)
    stored = zarr.open_group(chains, mode="r")
    np.testing.assert_array_equal(posterior["x"].values, np.moveaxis(stored["x"][...], 0, 1))
    np.testing.assert_array_equal(stats["acceptance"].values, stored["accepted"][...].T)
    assert tree.attrs["streamacc_save_every"] == 2 and tree.attrs["streamacc_first_step"] == 1
    assert posterior.encoding["streamacc_complete"] == 1


def test_arviz_reads_the_tree_lazily_and_summarises_it_as_the_draws_in_memory(chains, tmp_path):
    """ArviZ 0.x through ``from_datatree``: ``summary`` and ``plot_trace`` run, the summary equals that of the same
    draws handed to ArviZ in memory, and the tree reads no data chunk until a statistic needs one."""
    az = pytest.importorskip("arviz")
    import matplotlib

    matplotlib.use("Agg")
    copy = tmp_path / "copy.zarr"
    import shutil

    shutil.copytree(chains, copy)
    chunk = copy / "x" / "c" / "1" / "0" / "0"
    saved = chunk.read_bytes()
    chunk.unlink()
    tree = streamacc.to_arviz(copy, sample_stats=["lp", "accepted"])  # nothing read yet
    data = az.from_datatree(tree) if hasattr(az, "from_datatree") else tree
    with pytest.raises(VerifyError):
        data.posterior["x"].values  # noqa: B018 (a statistic would read it now)
    chunk.write_bytes(saved)
    tree = streamacc.to_arviz(copy, sample_stats=["lp", "accepted"])
    data = az.from_datatree(tree) if hasattr(az, "from_datatree") else tree
    summary = az.summary(data)
    stored = zarr.open_group(chains, mode="r")
    in_memory = az.from_dict(posterior={"x": np.moveaxis(stored["x"][...], 0, 1)})
    assert summary.equals(az.summary(in_memory))
    assert list(summary.index) == ["x[0]", "x[1]"] and (summary["r_hat"] < 1.05).all()
    axes = az.plot_trace(data, var_names=["x"])
    assert axes.shape == (1, 2)


def test_one_chain_gets_a_chain_of_length_one_lazily(tmp_path):
    pytest.importorskip("arviz")
    out = tmp_path / "one.zarr"

    def walk(x, dx):
        return x + dx, x

    streamacc.write(out, walk, np.float64(0.0), np.arange(300.0), names="theta", block_size=100, progress=False)
    for chunks in (None, "auto"):
        tree = streamacc.to_arviz(out, chunks=chunks)
        theta = tree["posterior"]["theta"]
        assert theta.dims == ("chain", "draw") and theta.shape == (1, 300)
        assert (theta.chunks is None) == (chunks is None)
        np.testing.assert_array_equal(theta.values[0], np.cumsum(np.arange(300.0)) - np.arange(300.0))
        np.testing.assert_array_equal(theta.isel(draw=slice(10, 20)).values[0], theta.values[0, 10:20])
        assert float(theta.isel(chain=0, draw=-1)) == theta.values[0, -1]


def test_to_arviz_takes_a_selection_of_steps(chains):
    pytest.importorskip("arviz")
    kept = streamacc.open(chains).sel(step=slice(1001, None))  # the first 1000 steps left out as burn-in
    tree = streamacc.to_arviz(kept, chain_dim="chain", var_names=["x"])
    assert dict(tree["posterior"].sizes) == {"chain": 4, "draw": 500, "dim": 2}
    assert tree.attrs["streamacc_first_step"] == 1001
    np.testing.assert_array_equal(tree["posterior"]["x"].values[:, 0], kept["x"].values[0])


@pytest.mark.parametrize(
    ("rows", "described"),
    [
        (slice(None, None, 7), {"streamacc_first_step": 1, "streamacc_save_every": 14}),  # every 7th of every 2nd
        (slice(10, None, 5), {"streamacc_first_step": 21, "streamacc_save_every": 10}),
        (slice(None, None, -1), {}),  # draws that go back in steps: no k says so
        ([0, 3, 4], {}),  # uneven
        (slice(6, 7), {"streamacc_first_step": 13}),  # one draw: no spacing to tell
    ],
    ids=["strided", "strided_from_10", "reversed", "uneven", "one_draw"],
)
def test_to_arviz_attributes_describe_the_draws_handed_over(chains, rows, described):
    """Draw d is step first + d * k for the draws of the selection, which the output's save_every does not say."""
    pytest.importorskip("arviz")
    kept = streamacc.open(chains).isel(step=rows)
    tree = streamacc.to_arviz(kept, var_names=["x"])
    for attrs in (tree.attrs, tree["posterior"].attrs):
        assert {k: v for k, v in attrs.items() if k in ("streamacc_first_step", "streamacc_save_every")} == described
    steps = kept["step"].values
    if described:  # each draw is the step the attributes say
        k = described.get("streamacc_save_every", 1)
        np.testing.assert_array_equal(steps, described["streamacc_first_step"] + k * np.arange(len(steps)))
    assert tree.attrs["streamacc_version"] == streamacc.__version__


def test_a_run_still_writing_gives_its_committed_draws(tmp_path):
    pytest.importorskip("arviz")
    out = tmp_path / "out.zarr"
    with pytest.raises(StoreError):
        streamacc.write(failing(out, "x/c/2/0/0"), samplers.metropolis, samplers.metropolis_init(), length=2000,
                        block_size=500, save_every=2, dims=samplers.DIMS, progress=False)  # fmt: skip
    tree = streamacc.to_arviz(out)
    assert tree["posterior"].sizes["draw"] == 500 and tree["posterior"].to_dataset().encoding["streamacc_complete"] == 0


@pytest.mark.parametrize(
    ("kw", "needle"),
    [
        ({"sample_stats": ["lp", "energy"]}, "names 'energy', not an array of the output; its arrays are"),
        ({"var_names": ["x"], "sample_stats": ["x"]}, "x cannot be in both var_names and sample_stats"),
        ({"sample_stats": {"lp": "s", "accepted": "s"}}, "gives two arrays the same name"),
        ({"chain_dim": "walker"}, "chain_dim='walker' is not a dimension of the output (its dimensions after step "
                                  "are chain, dim)"),
        ({"chain_dim": "dim"}, "the output has a dimension named 'chain'"),
        ({"sample_stats": 3}, "sample_stats=3 must be a list of array names"),
    ],
)
def test_to_arviz_refuses_what_it_cannot_place(chains, kw, needle):
    pytest.importorskip("arviz")
    with pytest.raises(InputError) as raised:
        streamacc.to_arviz(chains, **kw)
    assert needle in str(raised.value) and "\n" not in str(raised.value)


def test_to_arviz_refuses_an_array_without_the_chains_and_a_dimension_named_draw(tmp_path):
    pytest.importorskip("arviz")
    out = tmp_path / "mixed.zarr"

    def step(c, _):
        return c + 1.0, {"x": c * np.ones(3), "total": 3 * c}

    streamacc.write(out, step, np.float64(0.0), length=50, dims={"x": ["chain"]}, progress=False)
    with pytest.raises(InputError, match=r"total has no dimension 'chain'.*leave it out with var_names"):
        streamacc.to_arviz(out)
    assert streamacc.to_arviz(out, var_names=["x"])["posterior"].sizes["chain"] == 3
    streamacc.write(tmp_path / "draw.zarr", step, np.float64(0.0), length=50, dims={"x": ["draw"]}, progress=False)
    with pytest.raises(InputError, match="a dimension named 'draw'"):
        streamacc.to_arviz(tmp_path / "draw.zarr", var_names=["x"])


def test_an_array_named_as_arvizs_coordinates_is_refused_naming_the_rename_that_works(tmp_path):
    pytest.importorskip("arviz")
    out = tmp_path / "named.zarr"

    def step(c, _):
        return c + 1.0, {"x": c, "chain": 2 * c, "draw": 3 * c}

    streamacc.write(out, step, np.float64(0.0), length=50, progress=False)
    refusals = [
        ({}, "the output has an array named 'chain' and an array named 'draw', as ArviZ names the coordinates of its "
             "groups (chain, draw); put them in the sample_stats group under another name, e.g. "
             "sample_stats={'chain': 'chain_value', 'draw': 'draw_value'}, or leave them out with var_names=['x']"),
        ({"var_names": ["x"], "sample_stats": {"chain": "c", "draw": "draw"}},
         "sample_stats gives the array 'draw' the name 'draw', as ArviZ names a coordinate of its groups (chain, "
         "draw); name it otherwise, e.g. sample_stats={'chain': 'c', 'draw': 'draw_value'}"),
    ]  # fmt: skip
    for kw, said in refusals:
        with pytest.raises(InputError) as raised:
            streamacc.to_arviz(out, **kw)
        assert str(raised.value) == said
    tree = streamacc.to_arviz(out, sample_stats={"chain": "chain_value", "draw": "draw_value"})  # as advised
    assert list(tree["posterior"].data_vars) == ["x"] and sorted(tree["sample_stats"].data_vars) == [
        "chain_value", "draw_value"]  # fmt: skip
    steps = np.arange(50.0)  # c before each step
    assert tree["sample_stats"]["draw_value"].values.tolist() == [(3 * steps).tolist()]  # one chain of 50 draws


def test_without_arviz_to_arviz_names_the_extra(chains, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if "arviz" in name else real(name, *a))
    with pytest.raises(InputError) as raised:
        streamacc.to_arviz(chains)
    assert str(raised.value) == "streamacc.to_arviz needs ArviZ: pip install 'streamacc[arviz]'"
