"""A step function's identity includes the values it uses, and outputs of streamacc 0.2.0 still resume.

A changed closed-over parameter, default argument or module constant is refused up front,
naming the function; what cannot be fingerprinted is said once; a late mismatch never
recommends deleting data that may be fine.
"""

from __future__ import annotations

import importlib
import json
import sys
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import zarr
from helpers import MANIFEST, array_bytes, failing, read_manifest, rewind, run_warm, store_files, write_manifest

import streamacc
from streamacc.run import describe_function

RATE = 0.5


def make_step(rate, weights=None):
    weights = np.ones(2) if weights is None else weights

    def step(c, _):
        c = rate * c + weights
        return c, c

    return step


def with_default(c, _, rate=0.5):
    return rate * c + 1.0, c


def with_global(c, _):
    return RATE * c + 1.0, c


def with_library(c, _):
    return jnp.sin(c) + np.float64(1.0), c


class Opaque:
    """A parameter holder streamacc knows nothing about (no __dict__ to read)."""

    __slots__ = ("rate",)

    def __init__(self, rate):
        self.rate = rate


def digest(f):
    return describe_function(f).split(" values:")[1]


def test_the_values_a_function_uses_are_in_its_fingerprint(monkeypatch):
    assert digest(make_step(0.5)) == digest(make_step(0.5))
    assert digest(make_step(0.5)) != digest(make_step(0.25))
    assert digest(make_step(0.5, np.array([1.0, 2.0]))) != digest(make_step(0.5, np.array([1.0, 3.0])))
    assert describe_function(make_step(0.5)).startswith(f"{__name__}.make_step.<locals>.step code:")
    before = digest(with_global)
    monkeypatch.setattr(__import__(__name__), "RATE", 0.25)
    assert digest(with_global) != before
    assert digest(with_default) != digest(lambda c, _, rate=0.25: (rate * c + 1.0, c))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        digest(with_library)  # library functions count by name, quietly


def test_what_cannot_be_fingerprinted_is_said_once():
    holder = Opaque(0.5)

    def step(c, _):
        return holder.rate * c, c

    with pytest.warns(
        streamacc.errors.StreamaccWarning, match=r"uses 'holder' \(closed over\), a Opaque that streamacc"
    ):
        describe_function(step)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        describe_function(step)  # once per function and value


LENGTH, BLOCK = 200, 32


def write(out, f, **kw):
    return streamacc.write(out, f, np.zeros(2), length=LENGTH, block_size=BLOCK, progress=False, **kw)


@pytest.fixture
def interrupted(tmp_path):
    out = tmp_path / "out.zarr"
    with pytest.raises(streamacc.errors.StoreError):
        write(failing(out, "y/c/3/0"), make_step(0.5))  # block 3
    return out


def test_a_changed_closed_over_parameter_is_refused_up_front(interrupted):
    before = store_files(interrupted)
    with pytest.raises(
        streamacc.errors.ResumeError, match=r"cannot resume .*\(function: .*make_step.<locals>.step"
    ):
        write(interrupted, make_step(0.25), mode="resume")
    assert store_files(interrupted) == before
    write(interrupted, make_step(0.5), mode="resume")
    assert streamacc.verify(interrupted, make_step(0.5), np.zeros(2)).complete


def test_a_refusal_names_the_value_that_changed(tmp_path, interrupted, monkeypatch):
    before = store_files(interrupted)
    with pytest.raises(streamacc.errors.ResumeError) as refused:
        write(interrupted, make_step(0.25), mode="resume")
    assert f"(function: {__name__}.make_step.<locals>.step's closed-over rate changed); rerun" in str(refused.value)
    done = tmp_path / "done.zarr"
    write(done, make_step(0.5, np.array([1.0, 2.0])))
    with pytest.raises(streamacc.errors.ResumeError) as refused:  # a closed-over array, one value of it changed
        streamacc.write(done, make_step(0.5, np.array([1.0, 3.0])), np.zeros(2), length=2 * LENGTH,
                        block_size=BLOCK, progress=False, mode="extend")  # fmt: skip
    message = str(refused.value)
    assert f"(function: {__name__}.make_step.<locals>.step's closed-over weights changed); pass" in message
    assert "values:" not in message
    with pytest.raises(streamacc.errors.VerifyError, match=r"\(.*step's closed-over weights changed\); pass the"):
        streamacc.verify(done, make_step(0.5, np.array([1.0, 3.0])), np.zeros(2))
    glob = tmp_path / "global.zarr"
    write(glob, with_global)
    monkeypatch.setattr(__import__(__name__), "RATE", 0.25)
    with pytest.raises(streamacc.errors.ResumeError, match=r"; function: .*with_global's global RATE changed\)"):
        write(glob, with_global, mode="resume", codec="none")
    assert store_files(interrupted) == before


def test_an_output_that_records_no_values_by_name_resumes_and_is_refused_by_its_digest(tmp_path, interrupted):
    ref = tmp_path / "ref.zarr"
    write(ref, make_step(0.5))
    manifest = read_manifest(interrupted)
    assert sorted(manifest["identity"].pop("function_values")) == ["closed-over rate", "closed-over weights",
                                                                    "constants", "default arguments"]  # fmt: skip
    write_manifest(interrupted, manifest)  # as streamacc 1.0.0 wrote it
    with pytest.raises(streamacc.errors.ResumeError, match=r"function: stored '.* values:\w+', now '.* values:\w+'"):
        write(interrupted, make_step(0.25), mode="resume")
    write(interrupted, make_step(0.5), mode="resume")
    assert array_bytes(interrupted) == array_bytes(ref)


def opaque_step(holder):
    def step(c, _):
        return holder.rate * c + 1.0, c

    return step


def test_a_late_mismatch_does_not_recommend_deleting_the_data(tmp_path):
    out = tmp_path / "out.zarr"
    with pytest.warns(streamacc.errors.StreamaccWarning), pytest.raises(streamacc.errors.StoreError):
        write(failing(out, "y/c/3/0"), opaque_step(Opaque(0.5)))
    # another rate, unseen by the fingerprint: caught by recomputing the last committed block
    with pytest.raises(streamacc.errors.ResumeError) as info:
        write(out, opaque_step(Opaque(0.25)), mode="resume")
    message = str(info.value)
    assert "does not recompute to what is stored" in message and "a value it uses" in message
    assert "overwrite" not in message


def as_written_by_0_2_0(out):
    """Rewrite a manifest as streamacc 0.2.0 wrote it: no fields added since, the function by its code alone."""
    manifest = read_manifest(out)
    manifest.pop("summaries", None)
    ident = manifest["identity"]
    for field in ("chunks", "save_every", "dims", "time", "summaries"):
        del ident[field]
    ident["function"] = ident["function"].split(" values:")[0]
    write_manifest(out, manifest)
    assert "values:" not in json.loads((out / MANIFEST).read_text())["attributes"]["streamacc_manifest"]


def test_an_output_of_0_2_0_resumes_and_verifies(tmp_path, interrupted):
    ref = tmp_path / "ref.zarr"
    write(ref, make_step(0.5))
    as_written_by_0_2_0(interrupted)
    with pytest.warns(streamacc.errors.StreamaccWarning, match=r"written by streamacc 0.2.0, which recorded its step"):
        write(interrupted, make_step(0.5), mode="resume")
    assert array_bytes(interrupted) == array_bytes(ref)
    with pytest.warns(streamacc.errors.StreamaccWarning, match="0.2.0"):
        assert streamacc.verify(interrupted, make_step(0.5), np.zeros(2)).complete
    with pytest.raises(streamacc.errors.VerifyError, match=r"was written by .*make_step.*, not .*with_default"):
        streamacc.verify(interrupted, with_default, np.zeros(2))


def test_a_function_run_as_a_script_is_the_same_function_imported(tmp_path, monkeypatch):
    """``python heat.py`` records ``__main__.step``; ``from heat import step`` must still verify and resume it."""
    module = tmp_path / "heatmod.py"
    module.write_text(
        "import jax, numpy as np, streamacc, sys\n"
        "jax.config.update('jax_enable_x64', True)\n"
        "RATE = 0.25\n"
        "def step(u, _):\n"
        "    u = u + RATE * (u[::-1] - u)\n"
        "    return u, u\n"
        "if __name__ == '__main__':\n"
        "    streamacc.write(sys.argv[1], step, np.arange(4.0), length=64, block_size=16, progress=False)\n"
    )
    out = tmp_path / "out.zarr"
    run_warm([sys.executable, module, out], check=True, timeout=120)
    assert read_manifest(out)["identity"]["function"].startswith("__main__.step code:")
    # sys.path itself, not monkeypatch.syspath_prepend: that warns (PytestRemovedIn10Warning) wherever a library
    # of the suite has loaded pkg_resources
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    importlib.invalidate_caches()
    heatmod = importlib.import_module("heatmod")
    monkeypatch.delitem(sys.modules, "heatmod")

    report = streamacc.verify(out, heatmod.step, np.arange(4.0))
    assert report.committed_blocks == 4
    heatmod.RATE = 0.5  # another value: no longer the same function, script or not
    with pytest.raises(streamacc.errors.VerifyError, match=r"was written by __main__\.step"):
        streamacc.verify(out, heatmod.step, np.arange(4.0))


XS = np.linspace(0.0, 1.0, 4096, dtype=np.float32)


def _halving(c, x):
    c = c * np.float32(0.5) + x
    return c, c


def _halved(xs: np.ndarray) -> np.ndarray:
    """The outputs of ``_halving`` from 0, by a numpy loop (each step's product by 0.5 is exact, its sum one
    rounding, as in XLA)."""
    out, c = np.empty(len(xs), dtype=np.float32), np.float32(0.0)
    for i, x in enumerate(xs):
        c = np.float32(c * np.float32(0.5) + x)
        out[i] = c
    return out


# no summaries (as an output this small has by default): a rewound manifest's tail would still describe every block
RUN = {"block_size": 512, "summaries": False, "progress": False}


def test_inputs_are_known_by_their_values_whatever_array_holds_them(tmp_path):
    """numpy's rows extended by JAX's or a memmap's of the same values are the same run; a changed committed input
    is refused before anything is written, and an identity recorded by streamacc 1.0 (its inputs by type name)
    still continues."""
    out = tmp_path / "out.zarr"
    streamacc.write(out, _halving, np.float32(0.0), XS[:2048], **RUN)
    assert read_manifest(out)["identity"]["xs"] == ["array[2048]:<f4"]
    changed = XS.copy()
    changed[10] += 1  # an input of a committed step
    before = store_files(out)
    with pytest.raises(streamacc.errors.ResumeError, match=r"xs_values: .* for its first 2048 steps"):
        streamacc.write(out, _halving, np.float32(0.0), jnp.asarray(changed), mode="extend", **RUN)
    assert store_files(out) == before
    np.save(tmp_path / "xs.npy", XS)
    streamacc.write(out, _halving, np.float32(0.0), np.load(tmp_path / "xs.npy", mmap_mode="r"), mode="extend", **RUN)
    np.testing.assert_array_equal(streamacc.open(out)["y"].values, _halved(XS))
    stored = zarr.create_array(tmp_path / "xs.zarr", shape=(4096,), chunks=(1024,), dtype="float32")
    stored[:] = XS
    rewind(out, 6, 3072)
    streamacc.write(out, _halving, np.float32(0.0), stored, mode="resume", **RUN)  # Zarr's rows, the same values
    from_zarr = tmp_path / "from-zarr.zarr"
    streamacc.write(from_zarr, _halving, np.float32(0.0), stored, **RUN)
    rewind(from_zarr, 6, 3072)
    streamacc.write(from_zarr, _halving, np.float32(0.0), stored, mode="resume", **RUN)  # its chunks unchanged
    stored[10] = 5.0
    for target in (out, from_zarr):
        rewind(target, 6, 3072)
        with pytest.raises(streamacc.errors.ResumeError, match="xs_values"):
            streamacc.write(target, _halving, np.float32(0.0), stored, mode="resume", **RUN)
    manifest = rewind(out, 6, 3072)
    manifest["identity"]["xs"] = ["ndarray[4096]:<f4"]  # as 1.0 and the releases before recorded a numpy input
    del manifest["identity"]["xs_values"]
    write_manifest(out, manifest)
    streamacc.write(out, _halving, np.float32(0.0), jnp.asarray(XS), mode="resume", **RUN)
    np.testing.assert_array_equal(streamacc.open(out)["y"].values, _halved(XS))


def test_inputs_are_digested_by_their_crc32c_and_an_output_that_recorded_crc32_continues_with_it(tmp_path):
    """The digest is the CRC-32C of the input's little-endian bytes (google-crc32c's, as every stored chunk's
    trailer); an output whose identity recorded zlib's CRC-32 (1.1.0's first builds) is extended and resumed with
    that checksum, and a changed committed input is still refused."""
    import zlib

    import google_crc32c

    out = tmp_path / "out.zarr"
    streamacc.write(out, _halving, np.float32(0.0), XS[:2048], **RUN)
    assert read_manifest(out)["identity"]["xs_values"] == [f"crc32c:{google_crc32c.value(XS[:2048].tobytes()):08x}"]
    manifest = read_manifest(out)
    manifest["identity"]["xs_values"] = [f"crc32:{zlib.crc32(XS[:2048].tobytes()):08x}"]
    write_manifest(out, manifest)
    changed = XS.copy()
    changed[10] += 1
    before = store_files(out)
    with pytest.raises(streamacc.errors.ResumeError, match=r"xs_values: stored \['crc32:"):
        streamacc.write(out, _halving, np.float32(0.0), changed, mode="extend", **RUN)
    assert store_files(out) == before
    streamacc.write(out, _halving, np.float32(0.0), XS, mode="extend", **RUN)
    assert read_manifest(out)["identity"]["xs_values"] == [f"crc32:{zlib.crc32(XS.tobytes()):08x}"]
    rewind(out, 6, 3072)
    streamacc.write(out, _halving, np.float32(0.0), jnp.asarray(XS), mode="resume", **RUN)
    np.testing.assert_array_equal(streamacc.open(out)["y"].values, _halved(XS))
    rewind(out, 6, 3072)
    _streamed(out, XS, "resume")  # a Stream digests with the stored run's checksum too
    np.testing.assert_array_equal(streamacc.open(out)["y"].values, _halved(XS))


def _streamed(out, xs, mode="create"):
    with streamacc.Stream(out, _halving, length=4096, mode=mode, **RUN) as stream:
        jax.jit(lambda c, x: stream.scan(c, x))(np.float32(0.0), jnp.asarray(xs))


def test_a_stream_and_write_of_one_job_record_the_same_files_and_resume_each_other(tmp_path):
    def written_(out, xs, mode="create"):
        streamacc.write(out, _halving, np.float32(0.0), xs, mode=mode, **RUN)

    streamed, written = tmp_path / "streamed.zarr", tmp_path / "written.zarr"
    _streamed(streamed, XS)
    written_(written, XS)
    assert store_files(streamed) == store_files(written)
    for out, resume in ((streamed, written_), (written, _streamed)):  # a killed run of the one, resumed by the other
        rewind(out, 3, 1536)
        resume(out, XS, mode="resume")
        np.testing.assert_array_equal(streamacc.open(out)["y"].values, _halved(XS))
    other = XS.copy()
    other[5] = 7.0
    rewind(written, 3, 1536)
    with pytest.raises(streamacc.errors.ResumeError, match="the values of the inputs of its 4096 steps differ"):
        _streamed(written, other, mode="resume")
    assert read_manifest(written)["committed_blocks"] == 3
