"""A growing output followed: every committed step once, in order, never one that is not committed.

``streamacc.follow`` is asked for items between the writes a test makes (a run killed at a
store write, then resumed; a reverse scan; a run rewritten by another), so what it sees does
not depend on the machine's speed; ``streamacc plot --watch`` runs as a process beside the
writes, and each of its pictures is awaited before the next write. References: numpy's
running product (the ``gp`` recipe), and the manifest as a file.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import Popen, ReadCounting, cli, dies_at, gp, read_manifest
from zarr.storage import LocalStore

import streamacc
from streamacc.cli import main
from streamacc.errors import InputError, StoreError

SIZE = 5000
ARGS = ["--size", str(SIZE), "--block-size", "512", "--no-progress"]  # 10 blocks, the last short


def write(out: Path, *flags: str, dies: int | None = None) -> int:
    if dies is None:
        return main(["write", str(out), *ARGS, *flags])
    with dies_at(dies):
        return main(["write", str(out), *ARGS, *flags])


def committed_steps(out: Path) -> int:
    return read_manifest(out)["committed_steps"]


def steps_of(items: list) -> np.ndarray:
    return np.concatenate([ds.step.values for ds in items]) if items else np.array([], dtype=np.int64)


def values_of(items: list) -> np.ndarray:
    return np.concatenate([ds.x.values for ds in items])


def test_a_finished_output_is_one_item_and_the_iteration_ends(tmp_path):
    out = tmp_path / "out.zarr"
    assert write(out) == 0
    items = list(streamacc.follow(out))
    assert len(items) == 1 and items[0].x.chunks is not None  # lazily read, through dask
    np.testing.assert_array_equal(values_of(items), gp(SIZE))
    assert items[0].encoding["streamacc_complete"] == 1


def test_each_committed_step_comes_once_in_order_through_kills_and_resumes(tmp_path):
    out = tmp_path / "out.zarr"
    assert write(out, dies=14) == 1  # killed at its 14th store write: some blocks committed
    items = streamacc.follow(out, interval=0.01, timeout=60)
    first = next(items)
    assert first.sizes["step"] == committed_steps(out) > 0  # exactly what the manifest commits
    got = [first]
    assert write(out, "--resume", dies=8) == 1  # resumed, and killed again
    if committed_steps(out) > first.sizes["step"]:
        got.append(next(items))
        assert steps_of(got)[-1] == committed_steps(out) - 1
    assert write(out, "--resume") == 0
    got += list(items)  # the rest, and the iteration ends: the run is complete
    np.testing.assert_array_equal(steps_of(got), np.arange(SIZE))  # each step once, in order
    np.testing.assert_array_equal(values_of(got), gp(SIZE))


def grow(c, _):
    c = c * 1.00000001
    return c, c


def write_reverse(out: Path, **kw) -> None:
    streamacc.write(out, grow, np.float64(1.0), length=SIZE, block_size=512, reverse=True, names="x", summaries=False,
                    progress=False, **kw)  # fmt: skip


def test_a_reverse_scan_is_followed_in_scan_order(tmp_path):
    out = tmp_path / "out.zarr"
    with dies_at(14), pytest.raises(Exception, match=r"write _streamacc/zarr\.json"):
        write_reverse(out)
    items = streamacc.follow(out, interval=0.01, timeout=60)
    first = next(items)
    assert first.step.values[-1] == SIZE - 1 and first.step.values[0] == SIZE - committed_steps(out)
    write_reverse(out, mode="resume")
    rest = list(items)
    assert all(ds.step.values[-1] < before.step.values[0] for before, ds in zip([first, *rest], rest, strict=False))
    assert sorted(steps_of([first, *rest]).tolist()) == list(range(SIZE))
    np.testing.assert_array_equal(
        np.concatenate([ds.x.values for ds in [*rest[::-1], first]]), streamacc.open(out).x.values
    )


def test_a_writer_that_never_comes_back_times_out_with_what_is_committed(tmp_path):
    out = tmp_path / "out.zarr"
    assert write(out, dies=14) == 1
    items = streamacc.follow(out, interval=0.01, timeout=0.05)
    held = next(items).sizes["step"]
    with pytest.raises(StoreError, match=rf"no block committed for 0.05 s and no writer holds it \(steps 0 to {held} "
                                         rf"of {SIZE} committed\); resume its run.*longer timeout"):  # fmt: skip
        next(items)


def test_a_poll_reads_the_manifest_alone(tmp_path):
    out = tmp_path / "out.zarr"
    assert write(out, dies=14) == 1
    store = ReadCounting(LocalStore(out, read_only=True))
    items = streamacc.follow(store, interval=0.01, timeout=0)
    next(items)
    store.reads.clear()
    with pytest.raises(StoreError, match="no block committed"):
        next(items)  # one poll finds nothing new, and no writer: nothing read but the manifest, once
    assert {key: len(reads) for key, reads in store.reads.items()} == {"_streamacc/zarr.json": 1}


def test_an_output_rewritten_by_another_run_is_refused(tmp_path):
    out = tmp_path / "out.zarr"
    assert write(out, dies=14) == 1
    items = streamacc.follow(out, interval=0.01, timeout=60)
    next(items)
    assert main(["write", str(out), *ARGS, "--ratio", "1.5", "--overwrite"]) == 0
    with pytest.raises(StoreError, match="rewritten by another run"):
        next(items)


@pytest.mark.parametrize(("kw", "needle"), [({"interval": -1}, "interval=-1"), ({"timeout": "soon"}, "timeout=")])
def test_bad_intervals_are_refused_with_the_fix(tmp_path, kw, needle):
    with pytest.raises(InputError, match=f"{needle}.* must be a number of seconds"):
        next(streamacc.follow(tmp_path / "out.zarr", **kw))


def test_an_output_on_s3_is_followed(s3_bucket):
    pytest.importorskip("s3fs")
    from helpers import s3_args

    url = f"s3://{s3_bucket.name}/out.zarr"
    assert main(["write", url, *ARGS, *s3_args(s3_bucket)]) == 0
    items = list(streamacc.follow(url, storage_options={"endpoint_url": s3_bucket.server.endpoint}, timeout=60))
    np.testing.assert_array_equal(values_of(items), gp(SIZE))


def line_of(proc, deadline: float) -> str:
    line = proc.stdout.readline()
    assert line or time.monotonic() < deadline, "the watch said nothing more"
    return line.strip()


def test_plot_watch_waits_draws_what_is_committed_and_again_until_complete(tmp_path):
    pytest.importorskip("matplotlib")
    out, picture = tmp_path / "out.zarr", tmp_path / "pic.png"
    proc = Popen(cli("plot", out, "--watch", "0.02", "-o", picture), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                 text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        assert "no committed step to draw yet; waiting" in line_of(proc, deadline)
        assert write(out, dies=14) == 1
        held = committed_steps(out)
        drawn = [line_of(proc, deadline)]  # as the killed write went (its commits may be seen one by one)
        while drawn[-1] != f"{picture}: steps 0 to {held} of {SIZE} committed":
            assert int(drawn[-1].split(" to ")[1].split()[0]) < held, drawn
            drawn.append(line_of(proc, deadline))
        assert write(out, "--resume") == 0
        rest = [line.strip() for line in proc.stdout.read().splitlines()]  # to its end: it ends once complete
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert rest[-1] == f"{picture}: complete, steps 0 to {SIZE} of {SIZE} committed"
    between = [int(line.split(" to ")[1].split()[0]) for line in rest[:-1]]  # drawn as the resume went, if it was
    assert between == sorted(between) and all(held < n < SIZE for n in between)
    assert picture.stat().st_size > 0


def test_overview_of_an_unfinished_output_draws_the_committed_steps(tmp_path):
    out = tmp_path / "out.zarr"
    assert write(out, "--summary-windows", "64", dies=20) == 1
    table = streamacc.overview(out, points=16)
    assert table.attrs["stop_step"] == committed_steps(out) and table.encoding["streamacc_complete"] == 0


def test_a_run_ended_on_its_condition_is_followed_to_its_last_step(tmp_path):
    out = tmp_path / "out.zarr"
    streamacc.write(out, grow, np.float64(1.0), length=SIZE, block_size=512, names="x", progress=False,
                    until=lambda c, y: c > gp(3001)[-1] * (1 + 5e-9))  # fmt: skip
    items = list(streamacc.follow(out, interval=0.01, timeout=60))
    np.testing.assert_array_equal(steps_of(items), np.arange(3001))  # the step where it held is its last
    np.testing.assert_array_equal(values_of(items), gp(3002)[1:])


def test_a_reader_beside_a_writer_s_temp_file_sees_no_stray_node(tmp_path):
    """A run replaces its root's metadata through a temp file as it commits; a reader listing the root meanwhile
    sees it, and must neither warn of it (zarr's "not recognized as a component") nor fail."""
    import warnings

    out = tmp_path / "out.zarr"
    assert write(out) == 0
    (out / "zarr.json.streamacc-tmp").write_bytes((out / "zarr.json").read_bytes())  # as a writer leaves it meanwhile
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(values_of(list(streamacc.follow(out))), gp(SIZE))
