"""``streamacc.write``: the Zarr layout, exactness against one ``lax.scan``, readers
(zarr, xarray, dask), codecs, chunking, existing outputs, argument checks before any
disk access, fsspec URLs and zarr store objects, and the progress bar.

Every output is small; the step functions live at module level and most tests use the
same length and block size, so the engine's compile cache is shared between tests.
"""

from __future__ import annotations

import io
import json
import sys
import uuid
import warnings
from pathlib import Path

import dask.array as da
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import xarray as xr
import zarr

import streamacc
from streamacc.base import CODEC_NAMES
from streamacc.run import Progress, si

N = 100  # not a multiple of BLOCK: the last block is short
BLOCK = 16
XS = np.random.default_rng(7).normal(size=N)
INIT = np.float64(0.5)


def tree_step(c, x):
    """A carry and a dict of two outputs, one of them 2-D with trailing shape (3,)."""
    new = 0.75 * c + jnp.sin(x)
    return new, {"level": new, "triple": jnp.stack([new, new * new, c - x])}


def single_step(c, x):
    return c + x, c * x


def const_step(c, _):
    return c * 1.5, c


def listing(root: Path) -> dict[str, tuple[int, bytes]]:
    """Every file under ``root`` with its mtime and bytes, to prove nothing was touched."""
    return {str(p.relative_to(root)): (p.stat().st_mtime_ns, p.read_bytes()) for p in root.rglob("*") if p.is_file()}


def write(store, f=tree_step, init=INIT, xs=XS, **kwargs):
    kwargs.setdefault("block_size", BLOCK)
    kwargs.setdefault("progress", False)
    return streamacc.write(store, f, init, xs, **kwargs)


def assert_bits_equal(actual, expected):
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype
    assert actual.shape == expected.shape
    assert actual.tobytes() == expected.tobytes()


@pytest.fixture(scope="module")
def tree_out(tmp_path_factory):
    """One forward write of ``tree_step``, shared by the read-only layout tests."""
    path = tmp_path_factory.mktemp("tree") / "out.zarr"
    carry = write(path, attrs={"recipe": "tree", "params": {"k": 1.5, "name": "x"}})
    return path, carry


# --- values --------------------------------------------------------------------------------


@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
def test_values_and_carry_are_those_of_one_lax_scan(tmp_path, reverse):
    path = tmp_path / "out.zarr"
    carry = write(path, reverse=reverse)
    ref_carry, ref_ys = jax.lax.scan(tree_step, INIT, XS, reverse=reverse)
    assert_bits_equal(carry, ref_carry)
    group = zarr.open_group(path, mode="r")
    assert sorted(group.array_keys()) == ["level", "triple"]
    assert_bits_equal(group["level"][:], ref_ys["level"])
    assert_bits_equal(group["triple"][:], ref_ys["triple"])
    assert group["triple"].shape == (N, 3)


def test_single_leaf_is_named_y_and_names_override(tmp_path):
    write(tmp_path / "default.zarr", single_step)
    assert list(zarr.open_group(tmp_path / "default.zarr").array_keys()) == ["y"]
    write(tmp_path / "named.zarr", single_step, names=["product"])
    group = zarr.open_group(tmp_path / "named.zarr")
    assert list(group.array_keys()) == ["product"]
    assert_bits_equal(group["product"][:], jax.lax.scan(single_step, INIT, XS)[1])
    write(tmp_path / "renamed.zarr", names=["p", "q"])
    assert sorted(zarr.open_group(tmp_path / "renamed.zarr").array_keys()) == ["p", "q"]


def scaled_step(c, _):
    return c + 1.0, {"a": c, "b": c * 100.0}


def test_names_as_a_dict_rename_each_output_by_its_key(tmp_path):
    """The dict's order is not the leaves' order: each key's values go under the name it maps to."""
    path = tmp_path / "renamed.zarr"
    write(path, scaled_step, xs=None, length=N, names={"b": "first", "a": "second"})
    ys = jax.lax.scan(scaled_step, INIT, None, length=N)[1]
    group = zarr.open_group(path, mode="r")
    assert sorted(group.array_keys()) == ["first", "second"]
    assert_bits_equal(group["first"][:], ys["b"])
    assert_bits_equal(group["second"][:], ys["a"])
    assert group["first"][3] == 100.0 * group["second"][3] != 0
    write(tmp_path / "listed.zarr", scaled_step, xs=None, length=N, names=["first", "b"])  # b keeps its own place
    assert_bits_equal(zarr.open_group(tmp_path / "listed.zarr", mode="r")["first"][:], ys["a"])


@pytest.mark.parametrize(
    ("names", "refused"),
    [
        ({"b", "a"}, r"names must be a list of names .* not a set, which has no order"),
        ({"b": "x"}, r"keys must be exactly theirs \(a, b\): 'a' is missing; pass e.g. names=\{'a': 'a', 'b': 'x'\}"),
        ({"a": "x", "b": "y", "c": "z"}, r"exactly theirs \(a, b\): 'c' is not among them"),
        (["b", "a"], r"names would store output 'a' of f under 'b', the key of another of its outputs"),
    ],
)
def test_names_that_would_put_one_output_under_another_s_name_are_refused(tmp_path, names, refused):
    path = tmp_path / "out.zarr"
    with pytest.raises(streamacc.errors.InputError, match=refused):
        write(path, scaled_step, xs=None, length=N, names=names)
    assert not path.exists()


@pytest.mark.parametrize("name", ["x y", "ü✓", "x\ny", "-x", "0", "x" * 65, "x" * 300, "x.y", "_x", ""])
def test_an_output_name_is_ascii_letters_digits_and_underscore_beginning_with_a_letter(tmp_path, name):
    path = tmp_path / "out.zarr"
    with pytest.raises(streamacc.errors.InputError) as refused:
        write(path, single_step, names=[name])
    assert "at most 64 ASCII letters, digits and '_', beginning with a letter" in str(refused.value)
    assert "\n" not in str(refused.value) and not path.exists()
    with pytest.raises(streamacc.errors.InputError, match=r"output name 'x y' is not allowed.*name it with names"):
        write(path, lambda c, x: (c + x, {"x y": c}), names=None)
    write(path, single_step, names=["A" + "_9" * 31 + "z"])  # 64 characters
    assert list(zarr.open_group(path, mode="r").array_keys()) == ["A" + "_9" * 31 + "z"]


def test_a_dimension_name_ending_in_a_newline_is_refused(tmp_path):
    with pytest.raises(streamacc.errors.InputError, match=r"dims for output 'triple' must be a list of distinct names"):
        write(tmp_path / "out.zarr", dims={"triple": ["k\n"]})
    assert not (tmp_path / "out.zarr").exists()


def test_a_path_is_taken_literally_as_open_takes_it(tmp_path, monkeypatch):
    """``~`` is the shell's to expand: from Python, "~/out.zarr" is a folder named ``~`` where the caller is."""
    home, here = tmp_path / "home", tmp_path / "here"
    home.mkdir()
    here.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(here)
    write("~/out.zarr", single_step)
    assert (here / "~" / "out.zarr" / "zarr.json").is_file()
    assert list(home.iterdir()) == []
    assert streamacc.info("~/out.zarr").complete
    write(f"file://{'~'}/url.zarr", single_step)  # an fsspec URL, which expands it as fsspec does
    assert (home / "url.zarr" / "zarr.json").is_file()


def test_returned_carry_matches_lax_scan_without_xs(tmp_path):
    carry = write(tmp_path / "out.zarr", const_step, xs=None, length=N)
    ref_carry, ref_ys = jax.lax.scan(const_step, INIT, None, length=N)
    assert_bits_equal(carry, ref_carry)
    assert_bits_equal(zarr.open_group(tmp_path / "out.zarr")["y"][:], ref_ys)


# --- layout --------------------------------------------------------------------------------


def test_layout_dimension_names_fill_value_and_chunks(tree_out):
    path, _ = tree_out
    group = zarr.open_group(path, mode="r")
    assert group.metadata.zarr_format == 3
    level, triple = group["level"], group["triple"]
    assert level.metadata.dimension_names == ("step",)
    assert triple.metadata.dimension_names == ("step", "triple_dim_1")
    assert np.isnan(level.fill_value) and np.isnan(triple.fill_value)
    assert level.chunks == (BLOCK,)
    assert triple.chunks == (BLOCK, 3)
    assert level.dtype == np.float64


def test_unwritten_step_reads_as_nan(tmp_path):
    path = tmp_path / "out.zarr"
    write(path)
    (path / "level" / "c" / "2").unlink()  # the chunk of steps 32-47, as if never written
    level = zarr.open_group(path, mode="r")["level"][:]
    assert np.isnan(level[2 * BLOCK : 3 * BLOCK]).all()
    assert not np.isnan(level[: 2 * BLOCK]).any() and not np.isnan(level[3 * BLOCK :]).any()


def test_chunks_along_step_divide_block_size(tmp_path):
    path = tmp_path / "out.zarr"
    write(path, chunks={"step": 4})
    group = zarr.open_group(path, mode="r")
    assert group["level"].chunks == (4,) and group["level"].shards == (BLOCK,)
    assert group["triple"].chunks == (4, 3) and group["triple"].shards == (BLOCK, 3)
    assert sorted(int(p.name) for p in (path / "level" / "c").iterdir()) == list(range(-(-N // BLOCK)))  # a block one
    assert_bits_equal(group["triple"][:], jax.lax.scan(tree_step, INIT, XS)[1]["triple"])


@pytest.mark.parametrize("codec", CODEC_NAMES)
def test_every_codec_round_trips_bit_exactly_and_is_recorded(tmp_path, codec):
    path = tmp_path / "out.zarr"
    write(path, single_step, codec=codec)
    array = zarr.open_group(path, mode="r")["y"]
    assert_bits_equal(array[:], jax.lax.scan(single_step, INIT, XS)[1])
    names = [type(c).__name__ for c in array.compressors]
    expected = {"none": [], "zstd": ["ZstdCodec"]}.get(codec, ["BloscCodec"])
    assert names == [*expected, "Crc32cCodec"]  # every reader checks the CRC-32C of every chunk it decodes
    if codec.startswith("blosc-"):
        blosc = array.compressors[0]
        _, cname, *shuffle = codec.split("-")
        assert blosc.cname.value == cname
        assert blosc.shuffle.value == (shuffle[0] if shuffle else "shuffle")
    assert streamacc.info(path).arrays["y"].codec == codec


# --- readers -------------------------------------------------------------------------------


def test_xarray_opens_without_warnings_with_only_the_outputs(tree_out):
    path, _ = tree_out
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = xr.open_zarr(path)
        assert isinstance(ds, xr.Dataset)
        assert set(ds.data_vars) == {"level", "triple"}
        assert not ds.coords
        assert ds["level"].dims == ("step",)
        assert ds["triple"].dims == ("step", "triple_dim_1")
        assert ds.sizes["step"] == N
        assert ds.attrs["recipe"] == "tree"
        assert json.loads(ds.attrs["params"]) == {"k": 1.5, "name": "x"}
        assert ds.attrs["streamacc_version"] == streamacc.__version__
        ref = jax.lax.scan(tree_step, INIT, XS)[1]
        assert_bits_equal(ds["triple"].values, ref["triple"])


def test_dask_from_zarr(tree_out):
    path, _ = tree_out
    ref = jax.lax.scan(tree_step, INIT, XS)[1]
    for name in ("level", "triple"):
        arr = da.from_zarr(str(path), component=name)
        assert arr.chunks[0][0] == BLOCK
        assert_bits_equal(arr.compute(), ref[name])


# --- existing outputs ----------------------------------------------------------------------


def test_existing_output_is_refused_untouched(tree_out):
    path, _ = tree_out
    before = listing(path)
    with pytest.raises(streamacc.errors.OutputExistsError):
        write(path, const_step, xs=None, length=10)
    assert listing(path) == before


def test_overwrite_replaces_the_content(tmp_path):
    path = tmp_path / "out.zarr"
    write(path)
    write(path, const_step, xs=None, length=10, mode="overwrite")
    group = zarr.open_group(path, mode="r")
    assert list(group.array_keys()) == ["y"]
    assert_bits_equal(group["y"][:], jax.lax.scan(const_step, INIT, None, length=10)[1])
    assert not (path / "level").exists() and not (path / "triple").exists()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert set(xr.open_zarr(path).data_vars) == {"y"}


def test_refused_resume_of_a_foreign_directory_leaves_it_untouched(tmp_path):
    path = tmp_path / "foreign"
    path.mkdir()
    (path / "notes.txt").write_text("not a streamacc output")
    before = listing(path)
    with pytest.raises(streamacc.errors.ResumeError):
        write(path, mode="resume")
    assert listing(path) == before


# --- bad arguments -------------------------------------------------------------------------


class Unserialisable:
    pass


BAD_ARGUMENTS = {
    "length missing": dict(f=const_step, xs=None),
    "too few names": dict(names=["only"]),
    "too many names": dict(names=["a", "b", "c"]),
    "duplicate names": dict(names=["a", "a"]),
    "name starts with _": dict(names=["_a", "b"]),
    "name with slash": dict(names=["a/b", "c"]),
    "unknown codec": dict(codec="lzma"),
    "chunks not dividing a block": dict(chunks={"step": 5}),
    "chunks above block_size": dict(chunks={"step": 2 * BLOCK}),
    "chunks zero": dict(chunks={"step": 0}),
    "an unknown mode": dict(mode="append"),
    "mode as a flag": dict(mode=True),
    "inflight zero": dict(inflight=0),
    "an output named step": dict(names=["step", "b"]),
    "an output named time": dict(names=["a", "time"]),
    "block_size zero": dict(block_size=0),
    "attrs with an object": dict(attrs={"a": Unserialisable()}),
    "attrs with bytes": dict(attrs={"a": b"raw"}),
    "negative length": dict(f=const_step, xs=None, length=-1),
    "zero length": dict(f=const_step, xs=None, length=0),
    "xs of no rows": dict(xs=XS[:0]),
}


@pytest.mark.parametrize("kwargs", list(BAD_ARGUMENTS.values()), ids=list(BAD_ARGUMENTS))
def test_bad_arguments_raise_before_anything_is_created(tmp_path, kwargs):
    path = tmp_path / "out.zarr"
    with pytest.raises(streamacc.errors.InputError):
        write(path, **kwargs)
    assert not path.exists()


def test_a_write_of_no_step_is_refused_as_the_command_line_refuses_size_0(tmp_path, capfd):
    """One rule, >= 1 step, in each caller's terms; scan and iter_blocks still take length 0, as lax.scan does."""
    from streamacc.cli import main

    with pytest.raises(streamacc.errors.InputError) as refused:
        write(tmp_path / "none.zarr", const_step, xs=None, length=0)
    assert str(refused.value) == "length must be >= 1, got 0; pass e.g. length=1048576"
    with pytest.raises(streamacc.errors.InputError) as refused:
        write(tmp_path / "none.zarr", xs=XS[:0])
    assert str(refused.value) == (
        "xs has no rows, which makes length=0, but an output holds at least one step (length must be >= 1); pass "
        "xs of at least one row"
    )
    assert main(["write", str(tmp_path / "none.zarr"), "--size", "0"]) == 2
    assert capfd.readouterr().err == "streamacc: error: --size must be >= 1, got 0; pass e.g. --size 1048576\n"
    assert list(tmp_path.iterdir()) == []
    carry, ys = streamacc.scan(const_step, INIT, length=0)
    assert float(carry) == 0.5 and ys.shape == (0,)
    assert list(streamacc.iter_blocks(const_step, INIT, length=0)) == []


@pytest.mark.parametrize(("length", "said"), [
    (-1, "length must be >= 1, got -1"), (0, "length must be >= 1, got 0"),
    (np.int64(-5), "length must be >= 1, got -5"), (2.5, "length must be a whole number >= 1, got 2.5 of type float"),
])  # fmt: skip
def test_every_length_below_one_step_is_told_the_same_rule_by_write_and_stream(tmp_path, length, said):
    """A negative length was told ">= 0" (the scan's rule, which takes 0) where 0 was told ">= 1" (an output's)."""
    for make in (lambda: write(tmp_path / "w.zarr", const_step, xs=None, length=length),
                 lambda: streamacc.Stream(tmp_path / "s.zarr", const_step, length=length)):  # fmt: skip
        with pytest.raises(streamacc.errors.InputError) as refused:
            make()
        assert str(refused.value) == f"{said}; pass e.g. length=1048576"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("keyword", ["overwrite", "resume", "extend", "chunk_size", "durable"])
def test_keywords_of_0_2_fail_as_any_unknown_keyword(tmp_path, keyword):
    """``mode=`` replaced the three booleans, ``chunks=`` the alias ``chunk_size``; ``durable`` is gone."""
    path = tmp_path / "out.zarr"
    with pytest.raises(TypeError, match=f"unexpected keyword argument '{keyword}'"):
        write(path, **{keyword: True})
    assert not path.exists()


def test_non_finite_attrs_are_refused_as_non_json(tmp_path):
    path = tmp_path / "out.zarr"
    with pytest.raises(streamacc.errors.InputError):
        write(path, attrs={"tolerance": float("nan")})
    assert not path.exists()


# --- other stores --------------------------------------------------------------------------


def test_zarr_memory_store_object(tmp_path):
    store = zarr.storage.MemoryStore()
    carry = write(store, single_step)
    ref_carry, ref_ys = jax.lax.scan(single_step, INIT, XS)
    assert_bits_equal(carry, ref_carry)
    assert_bits_equal(zarr.open_group(store, mode="r")["y"][:], ref_ys)
    with pytest.raises(streamacc.errors.OutputExistsError):
        write(store, single_step)
    write(store, const_step, xs=None, length=10, mode="overwrite")
    assert zarr.open_group(store, mode="r")["y"].shape == (10,)


def test_file_url_is_a_local_path(tmp_path):
    path = tmp_path / "out.zarr"
    write(f"file://{path}", single_step)
    assert_bits_equal(zarr.open_group(path, mode="r")["y"][:], jax.lax.scan(single_step, INIT, XS)[1])
    assert (path / "_streamacc" / "zarr.json").is_file()


def test_fsspec_memory_url(tmp_path):
    url = f"memory://streamacc-tests/{uuid.uuid4().hex}/out.zarr"
    try:
        write(url)
        ref = jax.lax.scan(tree_step, INIT, XS)[1]
        group = zarr.open_group(url, mode="r")
        assert_bits_equal(group["level"][:], ref["level"])
        assert_bits_equal(group["triple"][:], ref["triple"])
    finally:
        import fsspec

        fs = fsspec.filesystem("memory")
        if fs.exists(url):
            fs.rm(url, recursive=True)


class RecordingStore(zarr.storage.WrapperStore):
    """A zarr store that keeps every bookkeeping document set in it, in order."""

    def __init__(self, store) -> None:
        super().__init__(store)
        self.documents: list[tuple[str, bytes]] = []

    async def set(self, key, value) -> None:
        if key.startswith("_streamacc/") and key.endswith("zarr.json"):
            self.documents.append((key, value.to_bytes()))
        await super().set(key, value)


def test_every_manifest_and_block_record_is_the_json_that_json_dumps_writes(tmp_path):
    """Each manifest a run saves (its summaries' tail included) and each segment of block records: the node as
    ``json.dumps(..., indent=1)`` writes it, its payload as ``json.dumps`` writes it, with quotes, a backslash and
    a character beyond ASCII in the run's identity."""
    store = RecordingStore(zarr.storage.MemoryStore())
    write(store, single_step, time={"step": 0.5, "units": 's "quoted" \\ \u00e9'}, summaries=[2, 8])
    seen = {"streamacc_manifest": 0, "streamacc_records": 0}
    for _key, raw in store.documents:
        node = json.loads(raw)
        for name, sort_keys in (("streamacc_manifest", True), ("streamacc_records", False)):
            if name in node["attributes"]:
                assert raw == json.dumps(node, indent=1).encode()
                text = node["attributes"][name]
                assert text == json.dumps(json.loads(text), sort_keys=sort_keys)
                seen[name] += 1
    manifests = [json.loads(json.loads(raw)["attributes"]["streamacc_manifest"]) for key, raw in store.documents
                 if key == "_streamacc/zarr.json"]  # fmt: skip
    assert any(m["summaries"] and m["summaries"]["y"]["arrays"] for m in manifests)  # tails holding rows
    assert seen["streamacc_manifest"] > N // BLOCK and seen["streamacc_records"] >= N // BLOCK
    assert '\\"quoted\\"' in json.loads(store.documents[-1][1])["attributes"]["streamacc_manifest"]


# --- progress ------------------------------------------------------------------------------


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_no_bar_when_stderr_is_not_a_terminal(tmp_path, capfd):
    write(tmp_path / "out.zarr", single_step, progress=True)
    out, err = capfd.readouterr()
    assert "step" not in err and "%|" not in err and "MB/s" not in err
    assert out == ""


def test_bar_on_a_terminal_shows_steps_and_throughput(tmp_path, monkeypatch):
    tty = FakeTTY()
    monkeypatch.setattr(sys, "stderr", tty)
    monkeypatch.setenv("COLUMNS", "120")  # room for every rate (at 80 the bar keeps steps/s only)
    write(tmp_path / "out.zarr", single_step, progress=True)
    text = tty.getvalue()
    assert "100%" in text and f"{si(N)}/{si(N)} steps" in text
    assert "steps/s" in text and "B/s" in text


def test_progress_disabled_on_a_terminal_is_silent(tmp_path, monkeypatch):
    tty = FakeTTY()
    monkeypatch.setattr(sys, "stderr", tty)
    write(tmp_path / "out.zarr", single_step, progress=False)
    assert tty.getvalue() == ""


def test_progress_counts_steps_from_initial(monkeypatch):
    tty = FakeTTY()
    monkeypatch.setattr(sys, "stderr", tty)
    with Progress(1000, initial=400, label="run") as bar:
        bar.update(600, 600 * 8)
    text = tty.getvalue()
    assert "run:" in text and "400/1k steps" in text and "1k/1k steps" in text and "B/s" in text


def test_no_stderr_at_all_means_no_bar(tmp_path, monkeypatch):
    # where stderr is None (pythonw, daemons) Progress asks nothing of it: sys.stderr.isatty() would raise
    monkeypatch.setattr(sys, "stderr", None)
    carry = write(tmp_path / "out.zarr", single_step, progress=True)
    assert_bits_equal(carry, jax.lax.scan(single_step, INIT, XS)[0])


def test_overwrite_refuses_a_directory_that_is_not_an_output(tmp_path):
    path = tmp_path / "precious"
    path.mkdir()
    (path / "thesis.tex").write_text("years of work")
    with pytest.raises(streamacc.errors.OutputExistsError, match="will not delete"):
        write(path, mode="overwrite")
    assert (path / "thesis.tex").read_text() == "years of work"
    assert sorted(p.name for p in path.iterdir()) == ["thesis.tex"]
