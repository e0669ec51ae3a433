"""streamacc on an accelerator, measured in one process: what to choose the chip's defaults by, and its promises.

Runs every scenario on JAX's default device (a TPU or GPU where there is one) and writes
one JSON document (``--json``), rewritten after each scenario, so that a run cut short
keeps what it measured; each scenario's failure is recorded and the next one runs.
``python benchmarks/convert.py accelerator FILE`` brings the file into the harness's
results, which the documentation's Accelerators page shows. Scenarios, in order:

- ``user-steps``: steps as users write them (``_user_steps``), with nothing given: the unroll
  chosen for each against each unroll's compute (``--user-unrolls``), and ``write``'s time
  against the fastest compute (a write's copy to the host made early, and when handed over);
- ``d2h``: device-to-host copies per size (1 to 512 MiB), by ``jax.device_get`` and by
  ``copy_to_host_async``: the block bytes a write should use there;
- ``compute``: one jitted ``lax.scan`` of each recipe in float32 per unroll (1, 8, 64,
  128 for gp): the recipes' unroll there;
- ``exact``: each recipe, and a multiply-add step, blocked by ``streamacc.scan`` against
  one ``lax.scan`` with the same unroll, bit for bit, at a few unrolls and block sizes;
- ``compensated``: every step of gp, affine, cumsum and cumprod in float32, plain and
  compensated, against exact values (Python's ``decimal``): at most 1 ulp, compensated;
- ``write``: gp in float32, ``iter_blocks`` against ``write`` (the default block there
  and another), the encode's and the disk's floors; a wide ensemble (2**20 float32
  members) written;
- ``stream-ordered``, ``stream-chained``, ``stream-pinned`` (last): the job of ``write``
  through a ``Stream`` whose blocks cross to the host each way (``stream.handover``),
  against the write's wall and bytes; ``stream-wide``: the wide ensemble streamed the
  fastest way;
- ``accuracy``: gp in float32 over 2**24 steps, plain, compensated and ``jnp.cumprod``,
  against exact values;
- ``seed``: the seed's question at 2**26 float32 steps, streamacc against the seed's
  full-buffer scan (as posted, unroll 1) and ``jnp.cumprod``: wall, device peak, error;
- ``ensemble``: 2**12 steps of 2**20 float32 members (16 GiB): the full buffer's failure
  past the device's memory, ``iter_blocks``'s wall and device peak;
- ``float64``: gp in float64 (emulated on a TPU) beside float32, plain and compensated;
- ``loops``: the Stream's loop of blocks alone, handing each block over each way (what
  ``gpu_check.py`` measured, before this script grew from it), the host doing nothing.

On a chip (see CONTRIBUTING.md, "On an accelerator")::

    python benchmarks/accelerator.py --json OUT.json --dir /tmp/streamacc-accelerator

Every size is an option (``--write-steps '2**26'``); ``--budget`` seconds (default 520)
stops the run where it is, JSON written (a scenario still running 30 s past it ends the
process); a compile longer than ``--compile-limit`` seconds (60) is recorded as too slow
and the scenario goes on; ``--only`` runs some scenarios. ``--smoke`` runs
every scenario at toy sizes, on the CPU in seconds (the test suite does, so that this
script keeps working without a chip).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import shlex
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import jax  # noqa: E402

jax.config.update("jax_enable_x64", False)  # the chip's numbers are float32; the float64 scenario turns it on itself

import _accel  # noqa: E402
import _accel_compute  # noqa: E402
import _accel_costs  # noqa: E402
import _accel_user  # noqa: E402
import _accel_write  # noqa: E402
from _machine import load, machine  # noqa: E402

import streamacc  # noqa: E402
from streamacc.cli import parse_int  # noqa: E402

SCENARIOS = {
    "user-steps": _accel_user.user_steps,
    "costs": _accel_costs.costs,
    "d2h": _accel_compute.d2h,
    "compute": _accel_compute.compute,
    "exact": _accel_compute.exact,
    "compensated": _accel_compute.compensated,
    "write": _accel_write.write,
    "stream-ordered": _accel_write.stream("ordered"),
    "stream-chained": _accel_write.stream("chained"),
    "stream-wide": _accel_write.stream_wide,
    "accuracy": _accel_compute.accuracy,
    "seed": _accel_write.seed,
    "ensemble": _accel_write.ensemble,
    "float64": _accel_compute.float64,
    "loops": _accel_write.loops,
    "stream-pinned": _accel_write.stream("pinned"),
}
"""The scenarios in the order they run: the unroll chosen for users' steps and what the defaults are chosen by
first, the long seed scan late, the ensemble that exhausts the device's memory near the end, and last the Stream
whose blocks cross through pinned host memory, which no chip has run yet."""


def _sizes(text: str, many: bool) -> Any:
    values = [parse_int(v, name="size", minimum=1) for v in text.split(",") if v.strip()]
    return values if many else values[0]


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", type=Path, required=True, help="the JSON document to write (rewritten per scenario)")
    p.add_argument("--dir", type=Path, default=None, help="scratch folder for outputs (default: a temporary one)")
    p.add_argument("--smoke", action="store_true", help="toy sizes: every scenario, on a CPU in seconds")
    p.add_argument("--budget", type=float, default=520.0, help="seconds after which no scenario starts or goes on")
    p.add_argument("--compile-limit", type=float, default=60.0,
                   help="seconds a compile may take before the scenario records it as too slow and goes on")
    p.add_argument("--only", default="", help=f"comma-separated scenarios (of {', '.join(SCENARIOS)})")
    p.add_argument("--commit", default="", help="the commit measured, where the machine has no git")
    p.add_argument("--cases", default="", help="comma-separated recipes the compute scenario measures (default: all)")
    for field in dataclasses.fields(_accel.Sizes):
        many = str(field.type).startswith("list")
        p.add_argument(f"--{field.name.replace('_', '-')}", dest=field.name, default=None,
                       help=f"{'comma-separated ' if many else ''}{field.name.replace('_', ' ')}, e.g. "
                            f"'{_example(getattr(_accel.FULL, field.name))}'")  # fmt: skip
    return p.parse_args(argv)


def _example(value: Any) -> str:
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)


def _device() -> dict[str, Any]:
    d = jax.devices()[0]
    stats = _accel.memory(d) or {}
    return {"platform": d.platform, "kind": getattr(d, "device_kind", ""), "devices": jax.device_count(),
            "memory_gib": round(stats["bytes_limit"] / 2**30, 2) if "bytes_limit" in stats else None,
            "jax": jax.__version__, "streamacc": streamacc.__version__}  # fmt: skip


def _save(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(path.name + ".tmp")
    temp.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    os.replace(temp, path)


def _say(started: float, text: str) -> None:
    print(f"[{time.monotonic() - started:7.1f} s] {text}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    base = _accel.SMOKE if args.smoke else _accel.FULL
    sizes = dataclasses.replace(base, **{
        f.name: _sizes(getattr(args, f.name), str(f.type).startswith("list"))
        for f in dataclasses.fields(_accel.Sizes) if getattr(args, f.name) is not None})  # fmt: skip
    only = [s.strip() for s in args.only.split(",") if s.strip()] or list(SCENARIOS)
    unknown = [s for s in only if s not in SCENARIOS]
    if unknown:
        raise SystemExit(f"--only {','.join(unknown)}: no such scenario; choose among {', '.join(SCENARIOS)}")
    started = time.monotonic()
    folder = Path(tempfile.mkdtemp(prefix="streamacc-accelerator-", dir=args.dir and _made(args.dir)))
    ctx = _accel.Context(sizes, jax.devices()[0], folder, started + args.budget, args.compile_limit,
                         cases=tuple(c.strip() for c in args.cases.split(",") if c.strip()))  # fmt: skip
    info = _machine()
    info["git"] = args.commit or info.get("git")  # the copy on a chip may hold another checkout's .git
    command = shlex.join(["python", "benchmarks/accelerator.py", *(sys.argv[1:] if argv is None else argv)])
    doc: dict[str, Any] = {"format": "accelerator", "command": command, "machine": info, "device": _device(),
                           "smoke": args.smoke, "sizes": dataclasses.asdict(sizes), "scenarios": {}}  # fmt: skip
    _say(started, f"{doc['device']['kind'] or doc['device']['platform']}: {', '.join(only)} into {args.json}")
    _watchdog(args, doc, started)
    try:
        for name in only:
            if ctx.out_of_time():
                doc["scenarios"][name] = {"status": "skipped", "why": f"past the budget of {args.budget:.0f} s"}
                _say(started, f"{name}: skipped, past the budget")
                _save(args.json, doc)
                continue
            _say(started, f"{name} ...")
            doc["running"] = name
            t0 = time.monotonic()
            try:
                result = SCENARIOS[name](ctx)
                doc["scenarios"][name] = {"status": "ok", "seconds": round(time.monotonic() - t0, 2), **result}
            except Exception as exc:
                doc["scenarios"][name] = {
                    "status": "failed", "seconds": round(time.monotonic() - t0, 2),
                    "error": f"{type(exc).__name__}: {str(exc).strip()[:2000]}",
                    "traceback": traceback.format_exc()[-4000:]}  # fmt: skip
            entry = doc["scenarios"][name]
            _say(started, f"{name}: {entry['status']} in {entry['seconds']} s" + (
                f" ({entry['error'].splitlines()[0][:200]})" if entry["status"] == "failed" else ""))  # fmt: skip
            doc["machine"]["load_end"] = _load()
            doc.pop("running")
            _save(args.json, doc)
    finally:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
    failed = [n for n, s in doc["scenarios"].items() if s["status"] == "failed"]
    _say(started, f"done: {len(only) - len(failed)} of {len(only)} scenarios without failure; wrote {args.json}")
    return 1 if failed else 0


HUNG_AFTER_S = 30.0
"""Seconds past the budget after which a scenario still running is taken to hang (a program that never returns)."""


def _watchdog(args: argparse.Namespace, doc: dict[str, Any], started: float) -> None:
    """A thread that, once a scenario runs ``HUNG_AFTER_S`` past the budget, records it as hung and ends the
    process, so that the command that started it still has time to keep the JSON."""

    def watch() -> None:
        while time.monotonic() < started + args.budget + HUNG_AFTER_S:
            time.sleep(1.0)
        name = doc.get("running")
        if name is None:
            return
        doc["scenarios"][name] = {"status": "failed", "seconds": round(time.monotonic() - started, 2),
                                  "error": f"still running {HUNG_AFTER_S:.0f} s past the budget: ended"}  # fmt: skip
        _save(args.json, doc)
        _say(started, f"{name}: still running past the budget; ended, the JSON kept")
        os._exit(3)

    threading.Thread(target=watch, daemon=True).start()


def _machine() -> dict[str, Any]:
    """``_machine.machine()``, or what of it this machine tells (a sandbox may have no load average)."""
    try:
        return machine()
    except OSError:
        import platform

        return {"date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "cores": os.cpu_count(),
                "python": platform.python_version(), "git": ""}  # fmt: skip


def _made(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _load() -> list[float] | None:
    try:
        return load()
    except OSError:
        return None


if __name__ == "__main__":
    sys.exit(main())
