"""A refusal changes nothing, on every path: every check runs before the first byte changes, and a refused command
leaves the output byte for byte as it was, with one line naming the file and what is wrong, and a fix that does not
loop (hardening V).

The paths: write, a Stream, the command line, ``verify --repair``; creating, resuming and extending. The damage is
what a user, a copy or a failing disk leaves: changed inputs, a folder or a named pipe where a file belongs, a
manifest whose record of the carries lies, an unreadable file, a kill at the end of a run that ended on its
condition. Outputs are small; the references are an uninterrupted run's files, numpy's CRC-32C of the inputs and one
``lax.scan`` in memory.
"""

from __future__ import annotations

import contextlib
import errno
import io
import itertools
import json
import os
import re
import shutil
import sys
import threading
import warnings
from pathlib import Path

import google_crc32c
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import dies_at, read_manifest, rewind, run, run_warm, tree, write_manifest
from jax import lax

import streamacc
from streamacc import testing
from streamacc.cli import main
from streamacc.errors import InputError, ResumeError, StoreError, StreamaccWarning

# --- a Stream's output with inputs ---------------------------------------------------------------------------------

XS = np.random.default_rng(65).normal(size=1000)
SHORT, LONG, BLOCK = 600, 1000, 64


def affine(c, x):
    c = 0.999 * c + 0.01 * jnp.sin(x) + x * c * 1e-3
    return c, c


def streamed(out, xs, length, mode="create"):
    with streamacc.Stream(out, affine, length=length, mode=mode, block_size=BLOCK, progress=False) as stream:
        return jax.jit(lambda c, x: stream.scan(c, x))(np.float64(0.5), jnp.asarray(xs))


def digest(xs) -> list[str]:
    """The inputs' digest as the identity records it: the CRC-32C of their little-endian bytes (google-crc32c)."""
    return [f"crc32c:{google_crc32c.value(np.ascontiguousarray(xs, dtype='<f8').tobytes()):08x}"]


@pytest.fixture(scope="module")
def short(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("stream") / "short.zarr"
    streamed(out, XS[:SHORT], SHORT)
    return out


@pytest.fixture(scope="module")
def longer(tmp_path_factory) -> Path:
    """The longer job written by ``write`` in one run: what every finished extension must be, file for file."""
    out = tmp_path_factory.mktemp("stream") / "long.zarr"
    streamacc.write(out, affine, np.float64(0.5), XS, block_size=BLOCK, progress=False)
    return out


def copied(src: Path, tmp_path: Path, folder: str = "") -> Path:
    """A copy of ``src`` named ``out.zarr`` (in ``folder``): every write names the same keys."""
    out = tmp_path / folder / "out.zarr"
    shutil.copytree(src, out)
    return out


def changed_inputs() -> np.ndarray:
    xs = XS.copy()
    xs[SHORT - 10] += 1.0  # in the stored run's last block, which an extension recomputes
    return xs


def test_a_refused_stream_extension_changes_nothing_and_keeps_the_inputs_digest(short, longer, tmp_path):
    out = copied(short, tmp_path)
    before = tree(out)
    with pytest.raises(ResumeError, match=rf"cannot extend .*xs_values.* of its {SHORT} steps differ.*left as it was"):
        streamed(out, changed_inputs(), LONG, mode="extend")
    assert tree(out) == before
    assert read_manifest(out)["identity"]["xs_values"] == digest(XS[:SHORT])
    streamed(out, XS, LONG, mode="extend")  # the original inputs: extended as one run of the longer length
    assert tree(out) == tree(longer)


def test_a_stream_extension_killed_after_its_first_write_keeps_the_longer_runs_digest(short, longer, tmp_path):
    """Killed at each write up to its first commit (the root retracted, the longer run's manifest, the arrays'
    shapes, the summaries and carries made the longer run's): changed inputs are refused by a Stream and by write, and
    the original ones finish it as one longer run."""
    writes: list[str] = []
    with dies_at(0, writes):
        streamed(copied(short, tmp_path, "dry"), XS, LONG, mode="extend")
    first_commit = next(i for i, what in enumerate(writes) if "records_" in what)
    saved = writes.index("write _streamacc/zarr.json") + 1  # the longer run's manifest
    for n in range(saved + 1, first_commit + 2):
        out = copied(short, tmp_path, str(n))
        with dies_at(n), pytest.raises(Exception, match=f"^{re.escape(writes[n - 1])}$"):
            streamed(out, XS, LONG, mode="extend")
        assert read_manifest(out)["identity"]["xs_values"] == digest(XS), writes[n - 1]
        with pytest.raises(ResumeError, match="xs_values"):
            streamed(out, changed_inputs(), LONG, mode="resume")
        with pytest.raises(ResumeError, match="xs_values"):
            streamacc.write(out, affine, np.float64(0.5), changed_inputs(), block_size=BLOCK, mode="resume",
                            progress=False)  # fmt: skip
        streamed(out, XS, LONG, mode="resume")
        assert tree(out) == tree(longer), writes[n - 1]


@pytest.mark.parametrize("damage", ["flipped", "removed"])
@pytest.mark.parametrize("mode", ["resume", "extend"])
def test_a_stream_names_a_damaged_initial_carry_and_its_repair_as_write_does(short, tmp_path, damage, mode):
    out = copied(short, tmp_path)
    if mode == "resume":
        rewind(out, 4, 4 * BLOCK)
    chunk = out / "_streamacc" / "carries" / "leaf_0" / "c" / "0"
    if damage == "flipped":
        raw = bytearray(chunk.read_bytes())
        raw[0] ^= 1
        chunk.write_bytes(bytes(raw))
    else:
        chunk.unlink()
    before = tree(out)
    refused = rf"cannot {mode}: the initial carry of .* is damaged .*leaf_0/c/0.* verify and repair=True"
    with pytest.raises(ResumeError, match=refused) as stream_said:
        streamed(out, XS if mode == "extend" else XS[:SHORT], LONG if mode == "extend" else SHORT, mode=mode)
    assert "another run" not in str(stream_said.value)
    with pytest.raises(ResumeError, match=refused):
        streamacc.write(out, affine, np.float64(0.5), XS if mode == "extend" else XS[:SHORT], block_size=BLOCK,
                        mode=mode, progress=False)  # fmt: skip
    assert tree(out) == before


def test_inputs_are_known_by_their_values_in_a_strided_view_and_across_a_stream_and_write(short, longer, tmp_path):
    """A strided view of the same values is the same run's inputs; a changed value in a committed step is refused."""
    wide = np.zeros((LONG, 3))
    wide[:, 1] = XS
    out = copied(short, tmp_path)
    rewind(out, 4, 4 * BLOCK)
    with pytest.raises(ResumeError, match="xs_values"):
        streamacc.write(out, affine, np.float64(0.5), changed_inputs()[:SHORT], block_size=BLOCK, mode="resume",
                        progress=False)  # fmt: skip
    streamacc.write(out, affine, np.float64(0.5), wide[:SHORT, 1], block_size=BLOCK, mode="resume", progress=False)
    streamacc.write(out, affine, np.float64(0.5), wide[:, 1], block_size=BLOCK, mode="extend", progress=False)
    assert tree(out) == tree(longer)


# --- the command line's output ---------------------------------------------------------------------------------------

ARGS = ["--block-size", "512", "--summary-windows", "64", "--no-progress"]
SIZE, MORE = 3000, 4000  # six blocks, the last short; the extension keeps five


@pytest.fixture(scope="module")
def cli_outputs(tmp_path_factory) -> tuple[Path, Path]:
    """A recipe's output of SIZE steps, and the one of MORE steps written in one run."""
    root = tmp_path_factory.mktemp("cli")
    assert main(["write", str(root / "short.zarr"), "--size", str(SIZE), *ARGS]) == 0
    assert main(["write", str(root / "long.zarr"), "--size", str(MORE), *ARGS]) == 0
    return root / "short.zarr", root / "long.zarr"


def folder_at(out: Path, where: str) -> None:
    path = out / where
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink()
    path.mkdir()


@pytest.mark.parametrize(
    "where",
    ["x/c/5", "_streamacc/carries/leaf_0/c/6", "_streamacc/summaries/w64/zarr.json"],
    ids=["last-data-chunk", "last-kept-carry", "summaries-document"],
)
def test_a_refused_cli_extension_changes_nothing_and_names_the_folder(cli_outputs, tmp_path, capfd, where):
    short_out, long_out = cli_outputs
    out = copied(short_out, tmp_path)
    folder_at(out, where)
    before = tree(out)
    for flag in ("--extend", "--resume"):
        code, line = run("write", out, "--size", MORE, *ARGS, flag, capfd=capfd)
        assert code == 2 and f"{where} is a folder where a file belongs: remove it" in line, line
        assert tree(out) == before
    (out / where).rmdir()  # the fix said: the extension then runs
    assert run("write", out, "--size", MORE, *ARGS, "--extend", capfd=capfd)[0] == 0
    assert tree(out) == tree(long_out)


@pytest.mark.parametrize("change", ["codec", "dtype", "shape"])
def test_a_manifest_that_misdescribes_the_kept_carries_is_refused_by_repair_before_anything_is_written(
    cli_outputs, tmp_path, capfd, change
):
    out = copied(cli_outputs[0], tmp_path)
    manifest = read_manifest(out)
    carries = manifest["carries"]
    if change == "codec":
        carries["codec"] = "zstd"
    elif change == "dtype":
        carries["leaves"][0]["dtype"] = "<f4"
    else:
        carries["leaves"][0]["shape"] = [2]
    write_manifest(out, manifest)
    before = tree(out)
    for args in (["verify", out], ["verify", out, "--repair"]):
        code, line = run(*args, capfd=capfd)
        assert code == 1 and "the manifest is damaged" in line and line.endswith("rewrite the output with --overwrite")
        assert tree(out) == before


@pytest.mark.parametrize("how", ["truncated", "deleted"])
def test_the_carries_group_document_is_checked_and_rewritten_by_repair_which_says_so(cli_outputs, tmp_path, capfd, how):
    out = copied(cli_outputs[0], tmp_path)
    group = out / "_streamacc" / "carries" / "zarr.json"
    if how == "truncated":
        group.write_bytes(group.read_bytes()[:20])
    else:
        group.unlink()
    code, line = run("verify", out, capfd=capfd)
    assert code == 1 and "_streamacc/carries/zarr.json" in line and "--repair" in line, line
    capfd.readouterr()
    assert main(["verify", str(out), "--repair"]) == 0
    said = capfd.readouterr().out
    assert "rewrote the kept carries' metadata as the manifest says (_streamacc/carries/zarr.json)" in said, said
    assert tree(out) == tree(cli_outputs[0])


def test_a_metadata_only_repair_says_what_it_rewrote(cli_outputs, tmp_path):
    out = copied(cli_outputs[0], tmp_path)
    leaf = out / "_streamacc" / "carries" / "leaf_0" / "zarr.json"
    doc = json.loads(leaf.read_bytes())
    doc["attributes"] = {"edited": 1}
    leaf.write_text(json.dumps(doc))
    from streamacc.run import verify_recipe_output

    report = verify_recipe_output(out, repair=True)
    assert report.rewritten == ("_streamacc/carries/leaf_0/zarr.json",) and report.repaired == ()
    assert tree(out) == tree(cli_outputs[0])


def within(seconds: float, call, fifo: Path):
    """``call()`` on a thread: its result, or a failure if it is still waiting after ``seconds`` (a reader blocked on
    the named pipe ``fifo`` is then released, so that the test ends either way)."""
    done: list = []
    thread = threading.Thread(target=lambda: done.append(call()), daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(seconds)
    assert done, "hung on the named pipe"
    return done[0]


def cli_within(seconds: float, fifo: Path, *args: object) -> tuple[int, str]:
    def call() -> tuple[int, str]:
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main([str(a) for a in args])
        return code, err.getvalue()

    return within(seconds, call, fifo)


def test_a_named_pipe_at_the_manifest_is_refused_by_every_command_without_waiting(cli_outputs, tmp_path):
    out = copied(cli_outputs[0], tmp_path)
    fifo = out / "_streamacc" / "zarr.json"
    fifo.unlink()
    os.mkfifo(fifo)
    before = tree(out)
    for args in (["info", out], ["verify", out], ["verify", out, "--repair"], ["plot", out, "-o", tmp_path / "p.png"],
                 ["write", out, "--size", SIZE, *ARGS, "--resume"], ["write", out, "--size", MORE, *ARGS, "--extend"]):
        code, err = cli_within(30, fifo, *args)
        assert code == 1 and err.count("\n") == 1 and f"{fifo} inside" in err and "a named pipe" in err, (args, err)

    def opened() -> str:
        try:
            streamacc.open(out)
        except StoreError as exc:
            return str(exc)
        return "opened"

    assert "a named pipe" in within(30, opened, fifo)
    assert tree(out) == before


@pytest.mark.parametrize("where", ["x/c/2", "_streamacc/carries/leaf_0/c/2"], ids=["data-chunk", "kept-carry"])
def test_verify_of_some_blocks_names_a_folder_where_a_file_belongs(cli_outputs, tmp_path, capfd, where):
    out = copied(cli_outputs[0], tmp_path)
    folder_at(out, where)
    for args in (["verify", out, "--blocks", "2"], ["verify", out, "--repair"], ["info", out]):
        code, line = run(*args, capfd=capfd)
        assert code == 1 and f"{where} is a folder where a file belongs: remove it" in line, (args, line)


@pytest.mark.parametrize("where", ["zarr.json", "_streamacc/carries/leaf_0/zarr.json"], ids=["root", "carries"])
def test_a_folder_at_a_metadata_document_is_named_by_every_command(cli_outputs, tmp_path, capfd, where):
    """Not "the root metadata is missing; resume", which a resume then failed on ("Is a directory")."""
    out = copied(cli_outputs[0], tmp_path)
    folder_at(out, where)
    before = tree(out)
    for args in (["info", out], ["verify", out], ["verify", out, "--repair"], ["plot", out, "-o", tmp_path / "p.png"],
                 ["write", out, "--size", SIZE, *ARGS, "--resume"]):
        code, line = run(*args, capfd=capfd)
        assert code != 0 and f"{where} is a folder where a file belongs: remove it" in line, (args, line)
    assert tree(out) == before
    assert run("write", out, "--size", SIZE, *ARGS, "--overwrite", capfd=capfd)[0] == 0  # clears it with the rest
    assert tree(out) == tree(cli_outputs[0])


def test_array_metadata_edited_into_a_list_is_named(cli_outputs, tmp_path, capfd):
    out = copied(cli_outputs[0], tmp_path)
    (out / "x" / "zarr.json").write_text("[]")
    before = tree(out)
    for size, flag in ((SIZE, "--resume"), (MORE, "--extend")):
        code, line = run("write", out, "--size", size, *ARGS, flag, capfd=capfd)
        assert code == 2 and "array 'x'" in line and "not an object" in line and "AttributeError" not in line, line
    assert tree(out) == before


def unreadable(monkeypatch, *paths: Path) -> None:
    """Reading ``paths`` fails as a file of mode 000 fails for a user who is not root (the tests may run as root)."""
    real = os.open
    denied = {os.fspath(p) for p in paths}

    def open_(path, flags, *args, **kwargs):
        if os.fspath(path) in denied and not flags & (os.O_WRONLY | os.O_RDWR):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fspath(path))
        return real(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_)


@pytest.mark.parametrize("where", ["_streamacc/zarr.json", "x/zarr.json", "x/c/2"])
def test_a_file_that_cannot_be_read_is_named_with_its_fix(cli_outputs, tmp_path, capfd, monkeypatch, where):
    out = copied(cli_outputs[0], tmp_path)
    unreadable(monkeypatch, out / where)
    commands = [["info", out], ["verify", out], ["write", out, "--size", SIZE, *ARGS, "--resume"]]
    for args in commands if where != "x/c/2" else commands[1:]:  # info reads no chunk
        code, line = run(*args, capfd=capfd)
        assert code == 1 and f"{out / where} inside {out} cannot be read (Permission denied)" in line, (args, line)
        assert "chmod u+r" in line
    with pytest.raises(StoreError, match=re.escape(f"{out / where} inside {out} cannot be read")):
        streamacc.open(out)["x"].values  # noqa: B018  # the read is the test


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root reads a file of mode 000")
def test_a_file_of_mode_000_is_named(cli_outputs, tmp_path, capfd):
    out = copied(cli_outputs[0], tmp_path)
    manifest = out / "_streamacc" / "zarr.json"
    manifest.chmod(0)
    try:
        code, line = run("info", out, capfd=capfd)
        assert code == 1 and f"{manifest} inside {out} cannot be read (Permission denied)" in line, line
    finally:
        manifest.chmod(0o644)


READ_ONE_UNREADABLE = """
import errno, os, pathlib, sys
import streamacc

denied = sys.argv[1]
real_open, real_read = os.open, pathlib.Path.read_bytes

def open_(path, flags, *args, **kwargs):
    if os.fspath(path) == denied and not flags & (os.O_WRONLY | os.O_RDWR):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), denied)
    return real_open(path, flags, *args, **kwargs)

def read_bytes(self):
    if os.fspath(self) == denied:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), denied)
    return real_read(self)

os.open, pathlib.Path.read_bytes = open_, read_bytes
try:
    streamacc.open(sys.argv[2])["x"].values
except Exception as exc:
    print(type(exc).__name__, flush=True)
"""


def test_reading_a_chunk_that_cannot_be_read_prints_nothing_more_at_exit(tmp_path):
    """The reads zarr gathered with the one refused end before the interpreter does: no line per read at exit."""
    out = tmp_path / "many.zarr"
    assert main(["write", str(out), "--size", "4096", "--block-size", "64", "--no-summaries", "--no-progress"]) == 0
    proc = run_warm([sys.executable, "-c", READ_ONE_UNREADABLE, str(out / "x" / "c" / "4"), str(out)], text=True,
                    timeout=120)  # fmt: skip
    assert proc.stderr == "", proc.stderr
    assert proc.stdout.split() == ["StoreError"], proc.stdout


def test_a_loop_of_links_is_named_at_plot_s_picture_and_at_an_input(cli_outputs, tmp_path, capfd):
    loop = tmp_path / "loop"
    loop.symlink_to("loop")
    code, line = run("plot", cli_outputs[0], "-o", loop / "p.png", capfd=capfd)
    assert code == 2 and f"-o {loop / 'p.png'} runs into a loop of symbolic links" in line, line
    code, line = run("write", tmp_path / "sum.zarr", "--recipe", "cumsum", "--input", loop / "x", "--no-progress",
                     capfd=capfd)  # fmt: skip
    assert code == 2 and f"--input {loop / 'x'} runs into a loop of symbolic links" in line, line
    assert not (tmp_path / "sum.zarr").exists()


def test_attributes_that_decode_numbers_as_text_are_refused_up_front(tmp_path):
    out = tmp_path / "text.zarr"
    with pytest.raises(InputError, match=r"array_attrs of 'x' hold _Encoding='utf-8'.*leave out _Encoding"):
        streamacc.write(out, affine, np.float64(0.5), XS[:10], names="x", array_attrs={"x": {"_Encoding": "utf-8"}},
                        progress=False)  # fmt: skip
    assert not out.exists()


# --- a run that ended on its condition ---------------------------------------------------------------------------


def grows(c, x):
    c = 0.999 * c + 0.01 * jnp.sin(x) + x * c * 1e-3
    return c, {"c": c, "sq": c * c}


def above(c, y):
    return c > 1.5


ENDED = {"block_size": 32, "chunks": 16, "until": above, "progress": False, "unroll": 1, "summaries": [16, 64]}
XS_ENDED = np.linspace(0.0, 5.0, 600)


def test_readers_read_an_ended_run_killed_during_its_final_cut(tmp_path):
    """Killed at each write from the arrays cut after the step where the run ended to its root's refresh: info, open
    (the reference's steps, bit for bit) and overview read its committed steps, as they read any lagging root."""
    whole = jax.tree_util.tree_map(np.asarray, lax.scan(grows, np.float64(1.0), XS_ENDED)[1])
    k = int(np.flatnonzero(whole["c"] > 1.5)[0])
    writes: list[str] = []
    with dies_at(0, writes):
        streamacc.write(tmp_path / "dry" / "out.zarr", grows, np.float64(1.0), XS_ENDED, **ENDED)
    cut = writes.index("write c/zarr.json") + 1
    for n in range(cut, len(writes) + 1):
        out = tmp_path / str(n) / "out.zarr"
        with dies_at(n), pytest.raises(Exception, match=f"^{re.escape(writes[n - 1])}$"):
            streamacc.write(out, grows, np.float64(1.0), XS_ENDED, **ENDED)
        assert streamacc.info(out).committed_steps == k + 1, writes[n - 1]
        ds = streamacc.open(out)
        for name in ("c", "sq"):
            np.testing.assert_array_equal(ds[name].values, whole[name][: k + 1], err_msg=writes[n - 1])
        assert float(streamacc.overview(out)["c_max"].max()) == whole["c"][k], writes[n - 1]


class Killed(Exception):
    """The process died before this write."""


@contextlib.contextmanager
def killed_at(n: int, seen: list[str] | None = None):
    """Within this block, local write number ``n`` (1-based: metadata and manifests, chunks) fails, and every one after
    it: the process died there. ``seen`` collects what each write was (``n=0``: none fails)."""
    real_write, real_chunk = testing.current("store.atomic_write"), testing.current("store.write_new")
    count, dead = itertools.count(1), []

    def gate(what: str) -> None:
        if seen is not None:
            seen.append(what)
        if dead or next(count) == n:
            dead.append(what)
            raise Killed(what)

    def write(path, data):
        gate(f"write {path.relative_to(path.parents[2])}")
        return real_write(path, data)

    def chunk(path, data):
        gate(f"chunk {path.relative_to(path.parents[2])}")
        return real_chunk(path, data)

    with testing.patched("store.atomic_write", write), testing.patched("store.write_new", chunk):
        yield


def test_a_repair_killed_at_any_write_is_done_again_to_the_same_files(cli_outputs, tmp_path):
    """Two kept carries and their arrays' metadata damaged: a repair killed at each of its writes leaves an output
    the next repair mends, file for file."""
    from streamacc.run import verify_recipe_output

    ref = cli_outputs[0]

    def damaged(folder: str) -> Path:
        out = copied(ref, tmp_path, folder)
        for boundary in (2, 4):
            (out / "_streamacc" / "carries" / "leaf_0" / "c" / str(boundary)).unlink()
        leaf = out / "_streamacc" / "carries" / "leaf_0" / "zarr.json"
        doc = json.loads(leaf.read_bytes())
        doc["attributes"] = {"edited": 1}
        leaf.write_text(json.dumps(doc))
        return out

    writes: list[str] = []
    with killed_at(0, writes):
        verify_recipe_output(damaged("dry"), repair=True)
    assert [w for w in writes if w.startswith("chunk")] == ["chunk leaf_0/c/2", "chunk leaf_0/c/4"], writes
    for n in range(1, len(writes) + 1):
        out = damaged(str(n))
        with killed_at(n), pytest.raises(Killed, match=f"^{re.escape(writes[n - 1])}$"):
            verify_recipe_output(out, repair=True)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            verify_recipe_output(out, repair=True)
        assert tree(out) == tree(ref), (n, writes[n - 1])


def test_an_ended_run_extended_with_a_later_condition_and_killed_at_any_write_finishes_as_one_run(tmp_path):
    """A kill chain with ``until=``: the extension of an ended run killed at each of its writes is read meanwhile, and
    the same call again finishes it to the files of one uninterrupted extension."""

    def later(c, y):
        return c > 1.6

    def extend(out):
        return streamacc.write(out, grows, np.float64(1.0), XS_ENDED, **{**ENDED, "until": later, "mode": "extend"})

    ref = tmp_path / "ref" / "out.zarr"
    streamacc.write(ref, grows, np.float64(1.0), XS_ENDED, **ENDED)
    shutil.copytree(ref, tmp_path / "dry" / "out.zarr")
    writes: list[str] = []
    with dies_at(0, writes):
        extend(tmp_path / "dry" / "out.zarr")
    extend(ref)
    for n in range(1, len(writes) + 1):
        out = tmp_path / str(n) / "out.zarr"
        streamacc.write(out, grows, np.float64(1.0), XS_ENDED, **ENDED)
        with dies_at(n), pytest.raises(Exception, match=f"^{re.escape(writes[n - 1])}$"):
            extend(out)
        assert streamacc.info(out).committed_steps > 0 and streamacc.open(out)["c"].size > 0, writes[n - 1]
        if read_manifest(out) == read_manifest(ref):  # killed as its root caught up: a resume rewrites it
            with pytest.warns(StreamaccWarning, match="already complete"):
                streamacc.write(out, grows, np.float64(1.0), XS_ENDED, **{**ENDED, "until": later, "mode": "resume"})
        else:  # the same call again: it resumes the longer run where its manifest was saved, else extends afresh
            extend(out)
        assert tree(out) == tree(ref), writes[n - 1]
