"""Icechunk repositories as outputs: the same bytes as a plain folder, commits as the durable points, refs.

A run written into a local repository holds, key for key, the bytes of the same run in a
plain folder; a writer SIGKILLed between commits resumes from the branch head to the
uninterrupted result; a second writer is refused by the lock, and a foreign commit on the
branch stops the writer without losing what the branch holds; readers open a branch, a
tag or a snapshot, and an extension keeps the shorter output readable at its tag.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import MANIFEST, Popen, stopped

import streamacc
from streamacc.cli import main
from streamacc.errors import InputError, NoOutputError

icechunk = pytest.importorskip("icechunk")

SMALL = ["--size", "5000", "--block-size", "512", "--codec", "blosc-lz4"]  # 10 blocks, the last one short
BIG = ["--size", "2**21", "--block-size", "2**14", "--codec", "none"]  # 128 blocks, about a second of writing

# a writer that commits after every block, so that a kill lands between two commits
FREQUENT = (
    "import sys\nfrom streamacc import testing\nfrom streamacc.cli import main\n"
    "testing.replace('store.icechunk_commit_seconds', 0.0)\nsys.exit(main(sys.argv[1:]))\n"
)

# the same writer, which stops itself (SIGSTOP) once a commit holds 2**16 steps: between two commits,
# holding its lock, wherever the machine's load would have let it run to by then
PAUSING = FREQUENT.replace(
    "sys.exit(",
    "import os, signal\nfrom streamacc.run import Output\nreal = Output.commit\n"
    "def commit(self, *results):\n    real(self, *results)\n"
    "    if self.manifest.committed_steps >= 2**16 and not hasattr(commit, 'paused'):\n"
    "        commit.paused = True\n        os.kill(os.getpid(), signal.SIGSTOP)\n"
    "Output.commit = commit\nsys.exit(",
)


# the same writer, which stops itself (SIGSTOP) as it is about to commit its first block: before any commit
BEFORE_FIRST_COMMIT = FREQUENT.replace(
    "sys.exit(",
    "import os, signal\nfrom streamacc.run import Output\nreal = Output.commit\n"
    "def commit(self, *results):\n    os.kill(os.getpid(), signal.SIGSTOP)\n    real(self, *results)\n"
    "Output.commit = commit\nsys.exit(",
)


def repository(path: Path):
    return icechunk.Repository.open(icechunk.local_filesystem_storage(str(path)))


def keys_of(store) -> dict[str, bytes]:
    """Every key of a zarr store with its bytes."""
    from zarr.buffer import default_buffer_prototype

    from streamacc.store import sync

    async def collect() -> list[str]:
        return [key async for key in store.list_prefix("")]

    return {key: sync(store.get(key, default_buffer_prototype())).to_bytes() for key in sync(collect())}


def folder_keys(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def head_steps(path: Path) -> int:
    """Steps the manifest at the branch head of the repository at ``path`` commits (-1 before its first commit)."""
    if not (path / "refs").exists():
        return -1
    try:
        store = repository(path).readonly_session(branch="main").store
    except Exception:  # the repository being created
        return -1
    from zarr.buffer import default_buffer_prototype

    from streamacc.store import sync

    raw = sync(store.get(MANIFEST, default_buffer_prototype()))
    if raw is None:
        return -1
    return int(json.loads(json.loads(raw.to_bytes())["attributes"]["streamacc_manifest"])["committed_steps"])


def commits(path: Path) -> list[str]:
    return [c.message for c in repository(path).ancestry(branch="main")]


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    """Uninterrupted runs into plain folders, one per argument list."""
    made: dict[tuple[str, ...], Path] = {}

    def get(args: list[str]) -> Path:
        if tuple(args) not in made:
            out = tmp_path_factory.mktemp("plain") / "out.zarr"
            assert main(["write", str(out), *args, "--no-progress"]) == 0
            made[tuple(args)] = out
        return made[tuple(args)]

    return get


def test_a_repository_holds_the_plain_folders_bytes_and_verifies(tmp_path, plain):
    repo_path = tmp_path / "repo"
    url = f"icechunk://{repo_path}"
    assert main(["write", url, *SMALL, "--no-progress"]) == 0
    session = repository(repo_path).readonly_session(branch="main")
    assert keys_of(session.store) == folder_keys(plain(SMALL))  # data, summaries, bookkeeping: key for key
    assert main(["verify", url]) == 0
    assert commits(repo_path)[0] == "streamacc: 5000 of 5000 steps complete"
    assert repository(repo_path).list_tags() == {"main-5000-steps"}

    import xarray as xr

    with xr.open_zarr(session.store) as ds:  # plain Icechunk data to xarray
        np.testing.assert_array_equal(ds["x"].values, streamacc.open(plain(SMALL))["x"].values)
    opened = streamacc.open(url)
    assert opened.sizes["step"] == 5000
    info, folder = streamacc.info(url), streamacc.info(plain(SMALL))
    assert info.complete
    assert info.arrays["x"].stored_bytes == folder.arrays["x"].stored_bytes  # sizes from the manifest
    assert info.summaries == folder.summaries  # none, for an output this small
    assert streamacc.overview(url) is not None


def test_between_commits_the_writer_reads_its_group_documents_and_the_commit_holds_the_last(tmp_path):
    from zarr.buffer import default_buffer_prototype

    from streamacc.store import open_target, sync

    repo_path = tmp_path / "repo"
    target = open_target(f"icechunk://{repo_path}")
    docs = [json.dumps({"zarr_format": 3, "node_type": "group", "attributes": {"n": n}}).encode() for n in (1, 2)]
    array = b'{"zarr_format": 3, "node_type": "array"}'  # not a group: set in the session at once (and refused)

    def head(key: str) -> bytes | None:
        got = sync(repository(repo_path).readonly_session(branch="main").store.get(key, default_buffer_prototype()))
        return None if got is None else got.to_bytes()

    with target.lock("--resume"):
        for doc in docs:
            target.write("meta/zarr.json", doc)
        assert target.read("meta/zarr.json") == docs[1]
        assert target.size("meta/zarr.json") == len(docs[1])
        assert sync(target.store.exists("meta/zarr.json"))
        assert target.list_keys() == ["meta/zarr.json"]  # listed once passed on to the session
        with pytest.raises(icechunk.IcechunkError, match="bad metadata"):
            target.write("bad/zarr.json", array)
        assert head("meta/zarr.json") is None  # nothing reaches the branch before a commit
    assert head("meta/zarr.json") == docs[1]
    assert commits(repo_path)[0] == "streamacc: the writer stopped"


def test_python_api_with_a_repository_object_and_a_session_to_read(tmp_path):
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "repo")))

    def f(c, x):
        return c * 0.5 + x, c

    xs = np.arange(3000, dtype=np.float64)
    streamacc.write(repo, f, np.float64(1.0), xs, block_size=1024, progress=False, storage_options={"branch": "try"})
    assert "try" in repo.list_branches()
    ds = streamacc.open(repo.readonly_session(branch="try"))
    import jax

    want = jax.lax.scan(f, np.float64(1.0), xs)[1]
    np.testing.assert_array_equal(ds["y"].values, np.asarray(want))
    with pytest.raises(InputError, match=r"pass the icechunk\.Repository"):
        streamacc.write(repo.writable_session("main"), f, np.float64(1.0), xs, progress=False)
    with pytest.raises(InputError, match="a session's store is written outside any commit"):
        streamacc.write(repo.writable_session("main").store, f, np.float64(1.0), xs, progress=False)


def test_extend_is_a_new_commit_and_the_shorter_output_stays_readable(tmp_path, plain):
    repo_path = tmp_path / "repo"
    url = f"icechunk://{repo_path}"
    args = [*SMALL[2:], "--no-progress"]
    assert main(["write", url, "--size", "3000", *args]) == 0
    first = repository(repo_path).lookup_branch("main")
    assert main(["write", url, "--size", "5000", *args, "--extend"]) == 0
    assert repository(repo_path).list_tags() == {"main-3000-steps", "main-5000-steps"}
    longer = streamacc.open(url)
    np.testing.assert_array_equal(longer["x"].values, streamacc.open(plain(SMALL))["x"].values)
    for ref in ("main-3000-steps", first):  # a tag and a snapshot id
        shorter = streamacc.open(url, storage_options={"ref": ref})
        assert shorter.sizes["step"] == 3000
        np.testing.assert_array_equal(shorter["x"].values, longer["x"].values[:3000])
    assert streamacc.info(url, storage_options={"ref": "main-3000-steps"}).committed_steps == 3000
    with pytest.raises(NoOutputError, match="no branch, tag or snapshot 'nope'"):
        streamacc.open(url, storage_options={"ref": "nope"})


def test_a_virtual_output_in_a_repository_reads_recomputed_and_materializes_as_a_new_commit(tmp_path, plain):
    repo_path = tmp_path / "repo"
    url = f"icechunk://{repo_path}"
    virtual = tmp_path / "virtual.zarr"
    assert main(["write", str(virtual), *SMALL, "--virtual", "--no-progress"]) == 0
    assert main(["write", url, *SMALL, "--virtual", "--no-progress"]) == 0
    assert keys_of(repository(repo_path).readonly_session(branch="main").store) == folder_keys(virtual)
    stored = streamacc.open(plain(SMALL))["x"].values
    np.testing.assert_array_equal(streamacc.open(url)["x"].values, stored)  # recomputed on reading
    before = repository(repo_path).lookup_branch("main")
    assert main(["materialize", url, "--no-progress"]) == 0
    assert main(["verify", url]) == 0
    session = repository(repo_path).readonly_session(branch="main")
    assert session.snapshot_id != before
    plain_keys, now = folder_keys(plain(SMALL)), keys_of(session.store)
    data = [key for key in plain_keys if key.startswith("x/c/")]
    assert data and {key: now[key] for key in data} == {key: plain_keys[key] for key in data}
    then = repository(repo_path).readonly_session(snapshot_id=before).store
    assert not any(key.startswith("x/c/") for key in keys_of(then))  # the virtual snapshot stays as it was


def test_refusals_are_one_line(tmp_path, capsys, monkeypatch):
    assert main(["info", f"icechunk://{tmp_path / 'none'}"]) == 2  # no output there
    assert "is not an Icechunk repository" in capsys.readouterr().err
    with pytest.raises(InputError, match="do not take 'key'"):
        streamacc.open(f"icechunk://{tmp_path}", storage_options={"key": "x"})
    monkeypatch.setitem(sys.modules, "icechunk", None)  # not installed
    with pytest.raises(InputError, match=r"pip install 'streamacc\[icechunk\]'"):
        streamacc.open(f"icechunk://{tmp_path}")


def test_a_branch_a_ref_could_not_tell_from_a_tag_is_refused_before_anything_is_written(tmp_path, capsys):
    repo_path = tmp_path / "repo"
    url = f"icechunk://{repo_path}"
    args = [*SMALL[2:], "--no-progress"]
    assert main(["write", url, "--size", "3000", *args]) == 0
    assert main(["write", url, "--size", "5000", *args, "--extend"]) == 0
    refs = (repository(repo_path).list_branches(), repository(repo_path).list_tags())
    assert refs == ({"main"}, {"main-3000-steps", "main-5000-steps"})
    capsys.readouterr()
    for branch in ("main-3000-steps", "x-1-steps-2"):
        assert main(["write", url, "--size", "6000", *args, "--storage-option", f"branch={branch}"]) == 2
        err = capsys.readouterr().err
        assert f"--storage-option branch={branch} has the form of the tags streamacc gives finished runs" in err
    for branch in ("", "..", "a/b", "a..b", "-x", "x y"):
        assert main(["write", url, "--size", "6000", *args, "--storage-option", f"branch={branch}"]) == 2
        err = capsys.readouterr().err
        assert "is not a branch name streamacc writes to" in err and err.count("\n") == 1, err
    with pytest.raises(InputError, match=r"storage_options=\{'branch': 'main-3000-steps'\} has the form of the tags"):
        streamacc.write(url, lambda c, _: (c, c), np.float64(1.0), length=10, progress=False,
                        storage_options={"branch": "main-3000-steps"})  # fmt: skip
    assert main(["write", url, "--size", "3000", *args, "--storage-option", "branch=side"]) == 2  # refused there
    assert "already exists and holds a finished run" in capsys.readouterr().err
    assert (repository(repo_path).list_branches(), repository(repo_path).list_tags()) == refs  # nothing was made
    assert streamacc.info(url, storage_options={"ref": "main-3000-steps"}).committed_steps == 3000
    fresh = tmp_path / "fresh"
    assert main(["write", f"icechunk://{fresh}", "--size", "3000", *args, "--extend"]) == 2  # nothing to extend
    assert not fresh.exists()


def test_a_ref_naming_both_a_branch_and_a_tag_is_refused_unless_it_says_which(tmp_path, capsys):
    repo_path = tmp_path / "repo"
    url = f"icechunk://{repo_path}"
    args = [*SMALL[2:], "--no-progress"]
    assert main(["write", url, "--size", "3000", *args]) == 0
    assert main(["write", url, "--size", "5000", *args, "--extend"]) == 0
    repo = repository(repo_path)
    repo.create_branch("main-3000-steps", repo.lookup_branch("main"))  # another tool makes it, at 5000 steps
    with pytest.raises(InputError, match=r"ref': 'main-3000-steps'\} names both a branch and a tag of .*; say which "
                                         r"with storage_options=\{'ref': 'branch:main-3000-steps'\} or"):  # fmt: skip
        streamacc.open(url, storage_options={"ref": "main-3000-steps"})
    assert main(["info", url, "--storage-option", "ref=main-3000-steps"]) == 2
    assert "--storage-option ref=tag:main-3000-steps" in capsys.readouterr().err
    tagged = streamacc.open(url, storage_options={"ref": "tag:main-3000-steps"})
    branched = streamacc.open(url, storage_options={"ref": "branch:main-3000-steps"})
    assert tagged.sizes["step"] == 3000 and branched.sizes["step"] == 5000
    np.testing.assert_array_equal(tagged["x"].values, branched["x"].values[:3000])
    assert streamacc.info(url, storage_options={"ref": "tag:main-5000-steps"}).committed_steps == 5000
    with pytest.raises(NoOutputError, match="has no tag 'main'"):
        streamacc.open(url, storage_options={"ref": "tag:main"})
    with pytest.raises(NoOutputError, match="has no branch 'main-5000-steps'"):
        streamacc.open(url, storage_options={"ref": "branch:main-5000-steps"})


def user_repository(path: Path, *, group: bool) -> None:
    """A repository made by another tool: empty, or holding a user's array on main."""
    import zarr

    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(path)))
    if group:
        session = repo.writable_session("main")
        zarr.open_group(session.store, mode="w").create_array("mine", data=np.arange(5))
        session.commit("the user's data")


def test_a_repository_without_a_streamacc_output_says_so(tmp_path, capsys):
    empty, theirs = tmp_path / "empty", tmp_path / "theirs"
    user_repository(empty, group=False)
    user_repository(theirs, group=True)
    for command in ("info", "verify", "plot"):
        assert main([command, f"icechunk://{empty}"]) == 2, command
        err = capsys.readouterr().err
        assert f"icechunk://{empty} holds nothing at 'main', not a streamacc output; check the path" in err, err
    readers = [streamacc.open, streamacc.overview, streamacc.info]
    if importlib.util.find_spec("arviz") is not None:
        readers.append(streamacc.to_arviz)
    for reader in readers:
        with pytest.raises(NoOutputError, match="holds nothing at 'main', not a streamacc output"):
            reader(f"icechunk://{empty}")
    assert main(["info", f"icechunk://{theirs}"]) == 2
    assert "has no streamacc manifest; it was not written by streamacc" in capsys.readouterr().err
    for flags in ([], ["--overwrite"], ["--resume"]):
        assert main(["write", f"icechunk://{theirs}", *SMALL, "--no-progress", *flags]) == 2
        err = capsys.readouterr().err
        assert "exists and is not a streamacc output" in err and "choose another repository" in err, err
    import zarr

    assert commits(theirs)[0] == "the user's data"
    session = repository(theirs).readonly_session(branch="main")
    np.testing.assert_array_equal(zarr.open_group(session.store, mode="r")["mine"][:], np.arange(5))
    assert main(["write", f"icechunk://{theirs}", *SMALL, "--no-progress", "--storage-option", "branch=runs"]) == 2
    assert "exists and is not a streamacc output" in capsys.readouterr().err  # the branch starts at main's head
    assert repository(theirs).list_branches() == {"main"}


def test_a_write_given_a_ref_is_refused_before_anything_is_written(tmp_path, capsys):
    """A writer commits to a branch: ``ref`` (what a reader opens) extended main and then read the tag for its
    summary ("nothing to write, all 65536 steps were committed already")."""
    url = f"icechunk://{tmp_path / 'repo'}"
    assert main(["write", url, *SMALL, "--no-progress"]) == 0
    head, tags = repository(tmp_path / "repo").lookup_branch("main"), repository(tmp_path / "repo").list_tags()
    capsys.readouterr()
    for flag in ("--extend", "--overwrite"):
        argv = ["write", url, "--size", "10000", "--block-size", "512", flag, "--storage-option", "ref=main-5000-steps"]
        assert main([*argv, "--no-progress"]) == 2
        out, err = capsys.readouterr()
        assert out == "" and err == (
            "streamacc: error: --storage-option ref=main-5000-steps names what a reader opens (a branch, tag or "
            "snapshot), and a write commits to a branch: pass --storage-option branch=NAME instead (main by default)\n"
        )
    with pytest.raises(InputError, match=r"storage_options=\{'ref': 'main'\} names what a reader opens"):
        streamacc.write(url, lambda c, _: (c + 1.0, c), np.float64(0.0), length=10, mode="overwrite",
                        storage_options={"ref": "main"}, progress=False)  # fmt: skip
    repo = repository(tmp_path / "repo")
    assert repo.lookup_branch("main") == head and repo.list_tags() == tags  # nothing committed
    assert streamacc.info(url, storage_options={"ref": "main-5000-steps"}).committed_steps == 5000  # readers take it


def frequent_writer(url: str, args: list[str], *, resume: bool = False, script: str = FREQUENT) -> Popen:
    flags = ["--resume"] if resume else []
    return Popen(
        [sys.executable, "-c", script, "write", url, *args, "--no-progress", *flags],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def wait_for_steps(proc: Popen, path: Path, steps: int, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while head_steps(path) < steps:
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.monotonic() < deadline, f"{path} never committed {steps} steps"
        time.sleep(0.005)


# the command line as its own program, with Python's report of a fatal signal on (as PYTHONFAULTHANDLER=1 turns it on)
AS_A_PROGRAM = "import faulthandler, sys\nfaulthandler.enable()\nfrom streamacc.cli import main\nsys.exit(main())\n"


@pytest.mark.slow
def test_commands_on_a_repository_exit_cleanly_whatever_icechunks_threads_do(tmp_path):
    """Icechunk's threads, about as the interpreter exited, aborted about one `info` in 15 after its answer on a
    busy machine (SIGABRT, "Fatal Python error: Aborted"): 20 processes, 4 at a time, each exits with 0."""
    url = f"icechunk://{tmp_path / 'repo'}"
    assert main(["write", url, *SMALL, "--no-progress"]) == 0
    runs = []
    for _ in range(5):
        batch = [Popen([sys.executable, "-c", AS_A_PROGRAM, "info", url], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True) for _ in range(4)]  # fmt: skip
        runs += [(proc.returncode, out, err) for proc in batch for out, err in [proc.communicate(timeout=120)]]
    for code, out, err in runs:
        assert (code, err) == (0, ""), err[-2000:]
        assert out.startswith(f"{url}: 5000 of 5000 steps committed, complete")


@pytest.mark.slow
def test_sigkill_between_commits_then_resume_is_the_uninterrupted_run(tmp_path, plain):
    repo_path = tmp_path / "repo"
    url = f"icechunk://{repo_path}"
    proc = frequent_writer(url, BIG)
    try:
        wait_for_steps(proc, repo_path, 2**17)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    kept = head_steps(repo_path)
    assert 2**17 <= kept < 2**21
    assert main(["write", url, *BIG, "--no-progress", "--resume"]) == 0
    session = repository(repo_path).readonly_session(branch="main")
    assert keys_of(session.store) == folder_keys(plain(BIG))
    assert main(["verify", url]) == 0


@pytest.mark.slow
def test_a_first_write_killed_before_its_first_commit_leaves_no_streamacc_output(tmp_path, capsys):
    repo_path = tmp_path / "repo"
    url = f"icechunk://{repo_path}"
    proc = frequent_writer(url, SMALL, script=BEFORE_FIRST_COMMIT)
    try:
        deadline = time.monotonic() + 120
        while not stopped(proc):  # its manifest, arrays and first block in its session, none committed
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read().decode()
            time.sleep(0.005)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    assert head_steps(repo_path) == -1
    for command in ("info", "verify", "plot"):
        assert main([command, url]) == 2, command
        assert "holds nothing at 'main', not a streamacc output" in capsys.readouterr().err
    with pytest.raises(NoOutputError, match="holds nothing at 'main', not a streamacc output"):
        streamacc.open(url)
    assert main(["write", url, *SMALL, "--no-progress", "--resume"]) == 0
    assert "nothing to resume" in capsys.readouterr().err


@pytest.mark.slow
def test_a_second_writer_is_refused_and_a_foreign_commit_stops_the_writer(tmp_path, capsys):
    repo_path = tmp_path / "repo"
    url = f"icechunk://{repo_path}"
    proc = frequent_writer(url, BIG, script=PAUSING)
    try:
        deadline = time.monotonic() + 120
        while not stopped(proc):  # alive, holding the lock, between two commits
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read().decode()
            time.sleep(0.005)
        seen = head_steps(repo_path)
        assert seen >= 2**16
        assert main(["write", url, *BIG, "--no-progress", "--resume"]) == 1
        assert f"being written by pid {proc.pid}" in capsys.readouterr().err
        reader = streamacc.info(url)  # a reader meanwhile sees the last whole commit
        assert reader.committed_steps == seen and not reader.complete
        session = repository(repo_path).writable_session("main")  # another tool commits to the branch
        import zarr

        zarr.open_group(session.store, mode="r+").attrs["note"] = "someone else"
        session.commit("a foreign commit")
        proc.send_signal(signal.SIGCONT)
        assert proc.wait(timeout=120) == 1
        err = proc.stderr.read().decode()
        assert "another writer committed to branch 'main'" in err, err
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
            proc.wait(timeout=60)
    assert commits(repo_path)[0] == "a foreign commit"


def test_writes_and_reads_on_s3(s3_bucket, tmp_path, plain):
    url = f"icechunk+s3://{s3_bucket.name}/repo"
    options = {
        "endpoint_url": s3_bucket.server.endpoint,
        "allow_http": True,
        "force_path_style": True,
        "region": "us-east-1",
        "access_key_id": "testing",
        "secret_access_key": "testing",
    }
    spelled = [f"--storage-option={k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in options.items()]
    assert main(["write", url, *SMALL, "--no-progress", *spelled]) == 0
    assert main(["verify", url, *spelled]) == 0
    ds = streamacc.open(url, storage_options=options)
    np.testing.assert_array_equal(ds["x"].values, streamacc.open(plain(SMALL))["x"].values)
