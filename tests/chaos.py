"""The adversarial run: kill chains, S3 pauses and restarts, tampering, signals, deletions.

    python tests/chaos.py                         # every category, default trial counts
    python tests/chaos.py --only signals tamper   # some categories
    python tests/chaos.py --trials 3 --json benchmarks/results/adversarial.json

A test run by hand, with many more trials than the suite affords (pytest collects only
``test_*.py``; ``test_faults.py`` checks that the script starts). Real processes (the
``streamacc`` command line in fresh interpreters), real signals (SIGKILL, SIGSTOP/SIGCONT,
SIGINT, SIGTERM) and moto's S3 server (started here, on 127.0.0.1, in a process of its own
so that it can be paused and wiped). What is counted is what a user would see: exit codes
and messages, outputs compared file for file with an uninterrupted run, and ``streamacc
verify``. Each category prints one line of counts; "wrong" counts the outcomes that must
never happen (data accepted that verify refuses, a write after a lost lease, a signal
ignored, a user's file deleted). The seed makes the kill points and delays reproducible;
timings still vary with the machine's load.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
LOCAL = ["--size", "2**20", "--block-size", "2**14", "--codec", "none", "--no-progress"]  # 64 blocks
S3 = ["--size", "2**18", "--block-size", "2**12", "--codec", "none", "--no-progress"]  # 64 blocks
SMALL = ["--size", "5000", "--block-size", "512", "--no-progress", "--no-summaries"]  # 10 blocks; interruptions
# are faked below by editing the manifest, which summaries (their tail is in it) would contradict
LONG_BLOCK = ["--recipe", "logistic", "--size", "1000", "--block-size", "64", "--inner", "2**40", "--no-progress"]
TTL = "2"
DEADLINE = 120.0
AS_AT_A_TERMINAL = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])"
)


def env(**extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
        **extra,
    }


def streamacc(*args: object, **extra: str) -> list[str]:
    return [PY, "-c", AS_AT_A_TERMINAL, PY, "-m", "streamacc", *map(str, args)]


def run(*args: object, timeout: float = DEADLINE, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(streamacc(*args), capture_output=True, text=True, timeout=timeout, env=env(**extra))


def start(*args: object, **extra: str) -> subprocess.Popen:
    cmd = streamacc(*args)
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(**extra))


def files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(Path(out).rglob("*")) if p.is_file()}


def manifest_of(raw: bytes) -> dict:
    return json.loads(json.loads(raw)["attributes"]["streamacc_manifest"])


def committed(out: Path) -> int:
    try:
        return manifest_of((out / "_streamacc/zarr.json").read_bytes())["committed_blocks"]
    except (OSError, ValueError, KeyError):
        return -1


def wait(condition: Callable[[], bool], proc: subprocess.Popen | None = None, deadline: float = DEADLINE) -> bool:
    """Poll ``condition``; False when ``proc`` ended first or the deadline passed."""
    end = time.monotonic() + deadline
    while not condition():
        if (proc is not None and proc.poll() is not None) or time.monotonic() > end:
            return False
        time.sleep(0.005)
    return True


class Tally:
    """Counts of one category: trials, the outcomes that held, and those that must never happen."""

    def __init__(self, name: str) -> None:
        self.name, self.counts, self.notes = name, {"trials": 0, "held": 0, "wrong": 0}, []

    def add(self, held: bool, note: str = "", **counts: int) -> None:
        self.counts["trials"] += 1
        self.counts["held" if held else "wrong"] += 1
        for key, value in counts.items():
            self.counts[key] = self.counts.get(key, 0) + value
        if not held:
            self.notes.append(note)
            print(f"  WRONG ({self.name}): {note}", flush=True)

    def report(self) -> dict:
        print(f"{self.name}: " + ", ".join(f"{k} {v}" for k, v in self.counts.items()), flush=True)
        return {**self.counts, "wrong_notes": self.notes}


# --- kill chains -----------------------------------------------------------------------------


def kill_chain(out: Path, args: list[str], rng: random.Random, kills: int, blocks: int, **extra: str) -> int:
    """SIGKILL writers of ``args`` ``kills`` times at random commit counts, then let one finish; its exit code."""
    for i in range(kills):
        proc = start("write", out, *args, *(["--resume"] if i else []), **extra)
        target, delay = rng.randrange(-1, blocks), rng.uniform(0, 0.05)
        wait((lambda: out.exists()) if target < 0 else (lambda target=target: committed(out) >= target), proc)
        time.sleep(delay)
        proc.kill()
        proc.communicate()
    return run("write", out, *args, "--resume", **extra).returncode


def kills(work: Path, trials: int, rng: random.Random) -> dict:
    tally = Tally("local kill chains")
    ref = work / "ref.zarr"
    assert run("write", ref, *LOCAL).returncode == 0
    reference = files(ref)
    for chain in range(trials):
        out = work / f"kill-{chain}.zarr"
        code = kill_chain(out, LOCAL, rng, 3, 64)
        same = code == 0 and files(out) == reference
        verified = run("verify", out, "--blocks", "8").returncode == 0
        tally.add(same and verified, f"chain {chain}: exit {code}, identical {same}, verify {verified}", kills=3)
        shutil.rmtree(out)
    return tally.report()


# --- object storage: moto in a process of its own ---------------------------------------------


@contextlib.contextmanager
def moto_server() -> Iterator[tuple[subprocess.Popen, str]]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = (
        "from moto.server import ThreadedMotoServer; import time\n"
        f"ThreadedMotoServer(ip_address='127.0.0.1', port={port}, verbose=False).start()\n"
        "time.sleep(10**9)"
    )
    server = subprocess.Popen([PY, "-c", code], env=env(), stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        import urllib.request

        def up() -> bool:
            with contextlib.suppress(OSError):
                return urllib.request.urlopen(endpoint, timeout=1) is not None
            return False

        wait(up, server)
        yield server, endpoint
    finally:
        server.kill()
        server.communicate()


def s3fs_for(endpoint: str):
    import s3fs

    return s3fs.S3FileSystem(endpoint_url=endpoint, key="testing", secret="testing", skip_instance_cache=True)


def objects(fs, root: str) -> dict[str, bytes]:
    fs.invalidate_cache()
    found = {p[len(root) + 1 :]: fs.cat_file(p) for p in fs.find(root)}
    found.pop("_streamacc/lease/zarr.json", None)
    return found


def s3_committed(fs, root: str) -> int:
    try:
        return manifest_of(fs.cat_file(f"{root}/_streamacc/zarr.json"))["committed_blocks"]
    except (OSError, ValueError, KeyError):
        return -1


def lease_expired(fs, root: str) -> bool:
    sys.path.insert(0, str(ROOT))
    from streamacc.store import open_lease_object

    seen = open_lease_object(fs, f"{root}/_streamacc/lease/zarr.json").read(5.0)
    return seen is None or seen.remaining(float(TTL)) <= 0


def object_storage(work: Path, trials: int, rng: random.Random) -> dict:
    chains, pauses, stalls, losses = (
        Tally(n)
        for n in ("S3 kill chains", "S3 writer paused past its lease", "S3 server paused", "S3 server lost its data")
    )
    with moto_server() as (server, endpoint):
        fs = s3fs_for(endpoint)
        opt = ["--storage-option", f"endpoint_url={endpoint}"]
        fs.mkdir("adv")
        assert run("write", "s3://adv/ref.zarr", *S3, *opt).returncode == 0
        reference = objects(fs, "adv/ref.zarr")
        for chain in range(trials):
            url, root = f"s3://adv/kill-{chain}.zarr", f"adv/kill-{chain}.zarr"
            code = 0
            for i in range(2):
                proc = start("write", url, *S3, *opt, *(["--resume"] if i else []), STREAMACC_LEASE_SECONDS=TTL)
                target = rng.randrange(0, 64)
                wait(lambda root=root, target=target: s3_committed(fs, root) >= target, proc)
                time.sleep(rng.uniform(0, 0.05))
                proc.kill()
                proc.communicate()
            code = run("write", url, *S3, *opt, "--resume", STREAMACC_LEASE_SECONDS=TTL).returncode
            same = code == 0 and objects(fs, root) == reference
            chains.add(same, f"chain {chain}: exit {code}, identical {same}", kills=2)
        assert run("write", "s3://adv/ref2.zarr", *S3, *opt, "--ratio", "1+2e-8").returncode == 0
        references = {"--resume": reference, "--overwrite": objects(fs, "adv/ref2.zarr")}
        for trial in range(trials):  # a writer paused at a random moment, past its lease; another takes over
            url, root = f"s3://adv/pause-{trial}.zarr", f"adv/pause-{trial}.zarr"
            a = start("write", url, *S3, *opt, STREAMACC_LEASE_SECONDS=TTL)
            wait(lambda root=root: s3_committed(fs, root) >= 2 + rng.randrange(0, 20), a)
            a.send_signal(signal.SIGSTOP)
            wait(lambda root=root: lease_expired(fs, root))
            takeover = rng.choice([["--overwrite", "--ratio", "1+2e-8"], ["--resume"]])
            b = run("write", url, *S3, *opt, *takeover, STREAMACC_LEASE_SECONDS=TTL)
            after_b = objects(fs, root)
            a.send_signal(signal.SIGCONT)
            _, err = a.communicate(timeout=DEADLINE)
            after_a = objects(fs, root)
            late = sorted(k for k in after_a.keys() | after_b.keys() if after_a.get(k) != after_b.get(k))
            # a request A had sent past its lease check when it was frozen may land late (the documented
            # exception): then verify must refuse the output, or the output must still be exactly B's run
            verified = run("verify", url, *opt).returncode == 0
            exact = after_a == references[takeover[0]]
            held = b.returncode == 0 and a.returncode == 1 and (not late or not verified or exact)
            pauses.add(
                held,
                f"{takeover[0]}: B exit {b.returncode}, A exit {a.returncode} ({err.strip()}), late writes {late}, "
                f"verify {verified}, B's run exactly {exact}",
                late_writes=int(bool(late)),
                late_found_by_verify=int(bool(late) and not verified),
                late_harmless=int(bool(late) and verified and exact),
            )
        for trial in range(trials):  # the server stops answering for twice the lease, then comes back
            url, root = f"s3://adv/stall-{trial}.zarr", f"adv/stall-{trial}.zarr"
            w = start("write", url, *S3, *opt, STREAMACC_LEASE_SECONDS=TTL)
            wait(lambda root=root: s3_committed(fs, root) >= 2 + rng.randrange(0, 20), w)
            server.send_signal(signal.SIGSTOP)
            time.sleep(2 * float(TTL) + 2)
            server.send_signal(signal.SIGCONT)
            _, err = w.communicate(timeout=DEADLINE)
            done = run("write", url, *S3, *opt, "--resume", STREAMACC_LEASE_SECONDS=TTL).returncode
            same = done == 0 and objects(fs, root) == reference
            honest = w.returncode == 0 or (w.returncode == 1 and err.count("\n") == 1)
            stalls.add(
                same and honest,
                f"writer exit {w.returncode} ({err.strip()}), resumed {done}, same {same}",
                writer_finished=int(w.returncode == 0),
                writer_stopped=int(w.returncode == 1),
            )
        for trial in range(trials):  # the server restarts without its data
            url, root = f"s3://adv/lost-{trial}.zarr", f"adv/lost-{trial}.zarr"
            w = start("write", url, *S3, *opt, STREAMACC_LEASE_SECONDS=TTL)
            wait(lambda root=root: s3_committed(fs, root) >= 2 + rng.randrange(0, 20), w)
            import urllib.request

            urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST"))
            _, err = w.communicate(timeout=DEADLINE)
            fs.mkdir("adv")
            honest = w.returncode == 1 and "safely committed" not in err and "no longer holds" in err
            losses.add(honest, f"writer exit {w.returncode}: {err.strip()}")
            assert run("write", "s3://adv/ref.zarr", *S3, *opt).returncode == 0
    return {t.name: t.report() for t in (chains, pauses, stalls, losses)}


# --- tampering ----------------------------------------------------------------------------------


def _records(out: Path) -> list[dict]:
    return json.loads(
        json.loads((out / "_streamacc/records_000000/zarr.json").read_text())["attributes"]["streamacc_records"]
    )


def _set_manifest(out: Path, **changes: object) -> None:
    path = out / "_streamacc/zarr.json"
    doc = json.loads(path.read_text())
    manifest = json.loads(doc["attributes"]["streamacc_manifest"])
    manifest.update(changes)
    doc["attributes"]["streamacc_manifest"] = json.dumps(manifest)
    path.write_text(json.dumps(doc))


def _interrupted(out: Path, blocks: int = 3) -> None:
    """A legitimate state: killed after ``blocks`` blocks (root as its last refresh left it)."""
    _set_manifest(
        out,
        committed_blocks=blocks,
        committed_steps=blocks * 512,
        carry=_records(out)[blocks]["carry_in"],
        complete=False,
    )
    doc = json.loads((out / "zarr.json").read_text())
    doc["attributes"].update(streamacc_complete=0, streamacc_committed_steps=blocks * 512, streamacc_committed_start=0)
    (out / "zarr.json").write_text(json.dumps(doc))
    for k in range(blocks, 10):
        (out / "x/c" / str(k)).unlink()


def _edit_json(path: Path, edit: Callable[[dict], None]) -> None:
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))


def _flip_a_bit(out: Path) -> None:
    raw = bytearray((out / "x/c/4").read_bytes())
    raw[0] ^= 1
    (out / "x/c/4").write_bytes(bytes(raw))


def _fifo(out: Path) -> None:
    (out / "x/zarr.json").unlink()
    os.mkfifo(out / "x/zarr.json")


def _later_manifest(out: Path) -> None:
    _interrupted(out, 3)
    _set_manifest(out, committed_blocks=6, committed_steps=6 * 512, carry=_records(out)[6]["carry_in"])


def _flipped_carry(out: Path) -> None:
    import base64

    _interrupted(out, 3)
    carry = _records(out)[3]["carry_in"]
    raw = bytearray(base64.b64decode(carry[0]["data"]))
    raw[0] ^= 1
    carry[0]["data"] = base64.b64encode(bytes(raw)).decode()
    _set_manifest(out, carry=carry)


def _records_cut_short(out: Path) -> None:
    _interrupted(out, 6)
    path = out / "_streamacc/records_000000/zarr.json"
    _edit_json(path, lambda d: d["attributes"].update(streamacc_records=json.dumps(_records(out)[:4])))


def _forged_complete(out: Path) -> None:
    _interrupted(out, 3)
    _edit_json(out / "zarr.json", lambda d: d["attributes"].update(streamacc_complete=1))


def _shrunk(out: Path) -> None:
    _edit_json(out / "zarr.json", lambda d: d["consolidated_metadata"]["metadata"]["x"].update(shape=[1536]))


def _complete_with_blocks_missing(out: Path) -> None:
    _interrupted(out, 3)
    _set_manifest(out, complete=True)


def _step_count_wrong(out: Path) -> None:
    _interrupted(out, 3)
    _set_manifest(out, committed_steps=2048)


def tamperings(other: Path, victim: Path) -> dict[str, tuple[Callable[[Path], None], list[str]]]:
    """Kind -> (damage, commands that must refuse it); 'resume' is write --resume, 'open' streamacc.open."""

    def link_out(rel: str) -> Callable[[Path], None]:
        def damage(out: Path) -> None:
            shutil.rmtree(out / rel) if (out / rel).is_dir() else (out / rel).unlink()
            (out / rel).symlink_to(other / rel)

        return damage

    def foreign_chunk(out: Path) -> None:
        _interrupted(out, 6)
        shutil.copyfile(other / "x/c/2", out / "x/c/2")

    def move_out(rel: str) -> Callable[[Path], None]:
        def damage(out: Path) -> None:
            shutil.move(out / rel, victim / "moved")
            (out / rel).symlink_to(victim / "moved")

        return damage

    readers = ["verify", "info", "open"]
    return {
        "chunk bytes flipped": (_flip_a_bit, ["verify"]),
        "chunk deleted": (lambda out: (out / "x/c/7").unlink(), ["verify", "resume"]),
        "chunk of another run in an earlier block": (foreign_chunk, ["resume", "verify --blocks 1"]),
        "chunk linked outside": (link_out("x/c/3"), [*readers, "resume"]),
        "array linked to another output's": (link_out("x"), [*readers, "resume"]),
        "array fill value changed": (
            lambda o: _edit_json(o / "x/zarr.json", lambda d: d.update(fill_value=0.0)),
            [*readers, "resume"],
        ),
        "scale_factor added": (
            lambda o: _edit_json(o / "x/zarr.json", lambda d: d["attributes"].update(scale_factor=2.0)),
            readers,
        ),
        "array metadata a named pipe": (_fifo, readers),
        "root deleted": (lambda out: (out / "zarr.json").unlink(), readers),
        "root consolidated shape shrunk": (_shrunk, readers),
        "root forged complete": (_forged_complete, readers),
        "root linked outside": (move_out("zarr.json"), [*readers, "resume"]),
        "manifest complete with blocks missing": (_complete_with_blocks_missing, ["verify", "resume"]),
        "manifest step count wrong": (_step_count_wrong, ["verify", "resume"]),
        "manifest carry bit flipped": (_flipped_carry, ["resume"]),
        "manifest of a later state of the run": (_later_manifest, ["verify", "resume"]),
        "block records cut short": (_records_cut_short, ["verify", "resume"]),
        "manifest deleted": (lambda out: (out / "_streamacc/zarr.json").unlink(), [*readers, "resume"]),
        "bookkeeping folder linked outside": (move_out("_streamacc"), ["verify", "resume", "overwrite"]),
    }


def tamper(work: Path, trials: int, rng: random.Random) -> dict:
    tally = Tally("tampering")
    ref, other, victim = work / "tref.zarr", work / "tother.zarr", work / "victim"
    assert run("write", ref, *SMALL).returncode == 0
    assert run("write", other, *SMALL, "--ratio", "1+2e-8").returncode == 0
    opener = "import sys, streamacc; streamacc.open(sys.argv[1]); print('opened')"
    for kind, (damage, commands) in tamperings(other, victim).items():
        shutil.rmtree(victim, ignore_errors=True)
        victim.mkdir()
        (victim / "precious.txt").write_text("mine")
        out = work / "t.zarr"
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(ref, out)
        damage(out)
        for command in commands:
            args = {
                "resume": ["write", out, *SMALL, "--resume"],
                "overwrite": ["write", out, *SMALL, "--overwrite"],
                "verify --blocks 1": ["verify", out, "--blocks", "1"],
            }.get(command, [command, out])
            try:
                if command == "open":
                    proc = subprocess.run(
                        [PY, "-c", opener, str(out)], capture_output=True, text=True, timeout=60, env=env()
                    )
                    accepted = "opened" in proc.stdout
                else:
                    proc = run(*args, timeout=60)
                    accepted = proc.returncode == 0
                hung = False
            except subprocess.TimeoutExpired:
                accepted, hung = False, True
            intact = (victim / "precious.txt").read_text() == "mine"
            tally.add(
                not (accepted or hung) and intact,
                f"{kind}: {command} accepted {accepted}, hung {hung}, victim intact {intact}",
            )
    return tally.report()


# --- signals ------------------------------------------------------------------------------------


LIBRARY = (
    "import sys, time, numpy as np, jax, streamacc\n"
    "jax.config.update('jax_enable_x64', True)\n"
    "def f(x, _):\n"
    "    x = jax.lax.fori_loop(0, 2**40, lambda i, v: 3.9 * v * (1 - v), x)\n"
    "    return x, x\n"
    "try:\n"
    "    streamacc.write(sys.argv[1], f, np.float64(0.5), length=1000, block_size=64, progress=False)\n"
    "except KeyboardInterrupt:\n"
    "    print('KeyboardInterrupt', flush=True)\n"
    "    import os; os._exit(0)\n"
)


def signal_in_block(proc: subprocess.Popen, out: Path, signum: int) -> tuple[str, str, float]:
    """Send ``signum`` once ``proc`` computes its first block (2 s after its run started: inside XLA);
    return its stdout, stderr and the seconds it took to end (it is killed after a minute)."""
    wait(lambda: committed(out) == 0, proc)
    time.sleep(2.0)
    sent = time.monotonic()
    proc.send_signal(signum)
    try:
        stdout, stderr = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
    return stdout, stderr, time.monotonic() - sent


def signals(work: Path, trials: int, rng: random.Random) -> dict:
    early, long_block, library = (
        Tally("signal at a random moment"),
        Tally("signal in a long block"),
        Tally("Ctrl-C in write() from Python, in a long block"),
    )
    args = ["--size", "2**26", "--block-size", "2**16", "--codec", "none", "--no-progress"]
    for trial in range(trials * 3):
        out = work / f"sig-{trial}.zarr"
        signum = rng.choice([signal.SIGINT, signal.SIGTERM])
        proc = start("write", out, *args)
        time.sleep(rng.uniform(0.2, 2.5))
        sent = time.monotonic()
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=DEADLINE)
        took = time.monotonic() - sent
        expected = 130 if signum == signal.SIGINT else 143
        clean = proc.returncode in (0, expected) and "Exception ignored" not in err and err.count("\n") <= 1
        resumed = run("write", out, *args, "--resume").returncode == 0 if proc.returncode else True
        early.add(
            clean and resumed and took < 30,
            f"signal {signum}: exit {proc.returncode} after {took:.1f} s, stderr {err.strip()!r}, resumed {resumed}",
            finished_first=int(proc.returncode == 0),
            stopped=int(proc.returncode == expected),
        )
        shutil.rmtree(out)
    for trial in range(trials):
        out = work / f"long-{trial}.zarr"
        signum = rng.choice([signal.SIGINT, signal.SIGTERM])
        proc = start("write", out, *LONG_BLOCK)
        _, _, took = signal_in_block(proc, out, signum)
        expected = 130 if signum == signal.SIGINT else 143
        long_block.add(
            proc.returncode == expected and took < 30,
            f"exit {proc.returncode} after {took:.1f} s",
            seconds_x10=round(10 * took),
        )
        shutil.rmtree(out)
    for trial in range(trials):
        out = work / f"lib-{trial}.zarr"
        proc = subprocess.Popen(
            [PY, "-c", AS_AT_A_TERMINAL, PY, "-c", LIBRARY, str(out)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env(),
        )
        stdout, _, took = signal_in_block(proc, out, signal.SIGINT)
        library.add("KeyboardInterrupt" in stdout and took < 30, f"stdout {stdout!r} after {took:.1f} s")
        shutil.rmtree(out)
    return {t.name: t.report() for t in (early, long_block, library)}


# --- deletions ----------------------------------------------------------------------------------


def deletions(work: Path, trials: int, rng: random.Random) -> dict:
    tally = Tally("nothing deleted that is not ours")
    ref = work / "dref.zarr"
    assert run("write", ref, *SMALL).returncode == 0
    cases = []
    for name in ("sub/thesis.partial", "draft.streamacc-tmp", "a/b/c.partial", "_streamacc/notes.partial"):
        cases.append(("write", name, None))
        cases.append(("--overwrite", name, None))
    cases += [("--overwrite", "NOTES.txt", how) for how in (".", "$PWD", "link")]
    for flag, name, how in cases:
        folder = work / "d.zarr"
        shutil.rmtree(folder, ignore_errors=True)
        if how is None:
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
        else:
            shutil.copytree(ref, folder)
        (folder / name).write_text("mine")
        flags = [] if flag == "write" else [flag]
        if how == "link":
            link = work / "l.zarr"
            link.unlink(missing_ok=True)
            link.symlink_to(folder)
            proc = run("write", link, *SMALL, *flags)
        elif how is not None:
            arg = "." if how == "." else str(folder)
            proc = subprocess.run(
                streamacc("write", arg, *SMALL, *flags),
                capture_output=True,
                text=True,
                cwd=folder,
                env=env(),
                timeout=DEADLINE,
            )
        else:
            proc = run("write", folder, *SMALL, *flags)
        kept = (folder / name).exists()
        tally.add(kept and proc.returncode == 2, f"{flag} {name} via {how}: exit {proc.returncode}, kept {kept}")
    return tally.report()


CATEGORIES = {"kills": kills, "s3": object_storage, "tamper": tamper, "signals": signals, "deletions": deletions}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="+", choices=list(CATEGORIES), default=list(CATEGORIES))
    parser.add_argument("--trials", type=int, default=5, help="chains or trials per category (signals: 3x)")
    parser.add_argument("--seed", type=int, default=19)
    parser.add_argument("--json", help="write the counts here")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    results = {}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="streamacc-chaos-") as tmp:
        for name in args.only:
            work = Path(tmp, name)
            work.mkdir()
            results[name] = CATEGORIES[name](work, args.trials, rng)
    results["seconds"] = round(time.monotonic() - started)
    results["command"] = " ".join(["python", "tests/chaos.py", *sys.argv[1:]])
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    wrong = sum(
        v.get("wrong", 0)
        for c in results.values()
        if isinstance(c, dict)
        for v in ([c] if "wrong" in c else c.values())
        if isinstance(v, dict)
    )
    print(f"wrong outcomes: {wrong} (in {results['seconds']} s)")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
