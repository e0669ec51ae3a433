"""What the accelerator benchmark's scenarios share: their sizes, the device's memory, timing, jobs, exact values.

Every figure of ``accelerator.py`` is measured in one process on one device. Device memory
is sampled by a thread while a scenario runs (``DevicePeak``: the most ``bytes_in_use``
that ``device.memory_stats()`` reported, above what was in use before); a CPU reports no
memory statistics, and its figures say so with ``None``. Compiled programs are timed apart
from their compile (``timed``). Exact values are computed on the host by Python's
``decimal`` at 60 digits, which every Python has (the chip's machine has no mpmath):
iterated for every step of a modest length, or ``ratio ** k`` for a step far along.
"""

from __future__ import annotations

import dataclasses
import decimal
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jax
import numpy as np

MiB = 2**20
RATIO = 1.0 + 2.0**-20
"""The progressions' ratio in float32 (the seed's ``1 + 1e-8`` rounds to 1 there), exact in every dtype."""
DIGITS = 60


@dataclasses.dataclass
class Sizes:
    """Every size a scenario takes; each is an option of ``accelerator.py`` (``--write-steps 2**28``)."""

    d2h_mib: list[int]
    compute_steps: int
    sweep_unrolls: list[int]
    recipe_unrolls: list[int]
    exact_length: int
    exact_unrolls: list[int]
    exact_blocks: list[int]
    ulp_steps: int
    write_steps: int
    write_blocks: list[int]
    wide_members: int
    wide_steps: int
    wide_blocks: list[int]
    disk_mib: int
    accuracy_steps: int
    seed_steps: int
    ensemble_members: int
    ensemble_steps: int
    f64_steps: int
    user_steps: int
    user_length: int
    user_unrolls: list[int]
    user_write_mib: int


FULL = Sizes(
    d2h_mib=[1, 4, 16, 32, 64, 128, 256, 512], compute_steps=2**22, sweep_unrolls=[1, 8, 64, 128],
    recipe_unrolls=[8], exact_length=5000, exact_unrolls=[8], exact_blocks=[128, 1024], ulp_steps=2**16,
    write_steps=2**28, write_blocks=[2**23], wide_members=2**20, wide_steps=256, wide_blocks=[16], disk_mib=1024,
    accuracy_steps=2**24, seed_steps=2**26, ensemble_members=2**20, ensemble_steps=2**12, f64_steps=2**22,
    user_steps=10, user_length=0, user_unrolls=[1, 8, 64, 128], user_write_mib=1024,
)  # fmt: skip
"""The sizes on a chip: about six minutes on a TPU v5e in all (the seed's own scan, unroll 1, a minute of it)."""

SMOKE = Sizes(
    d2h_mib=[1, 2], compute_steps=2**12, sweep_unrolls=[1, 8], recipe_unrolls=[], exact_length=200,
    exact_unrolls=[2], exact_blocks=[48], ulp_steps=2**12, write_steps=2**14, write_blocks=[2**12],
    wide_members=2**8, wide_steps=32, wide_blocks=[8], disk_mib=1, accuracy_steps=2**12, seed_steps=2**12,
    ensemble_members=2**8, ensemble_steps=2**6, f64_steps=2**10, user_steps=3, user_length=512,
    user_unrolls=[1, 2], user_write_mib=1,
)  # fmt: skip
"""Toy sizes, for the CPU in seconds: every scenario runs, nothing is measured."""


@dataclasses.dataclass
class Context:
    """What every scenario is given: the sizes, the device, a scratch folder, the time left, the longest a
    compile may take, and what one leaves for another (the outputs a Stream is checked against)."""

    sizes: Sizes
    device: Any
    folder: Path
    deadline: float
    compile_limit: float = 60.0
    shared: dict[str, Any] = dataclasses.field(default_factory=dict)
    cases: tuple[str, ...] = ()
    """The recipes the compute scenario measures (``--cases``); all of them when empty."""

    @property
    def platform(self) -> str:
        return str(self.device.platform)

    def out_of_time(self) -> bool:
        return time.monotonic() > self.deadline


# --- device memory ----------------------------------------------------------------------------------------------


def memory(device: Any) -> dict[str, int] | None:
    stats = device.memory_stats()
    return None if stats is None else {k: int(v) for k, v in stats.items() if isinstance(v, (int, float))}


class DevicePeak:
    """``with DevicePeak(device) as peak:``: the most device memory in use meanwhile, sampled every millisecond."""

    def __init__(self, device: Any) -> None:
        self.device = device
        self.before = memory(device)
        self.most = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.001):
            self.most = max(self.most, (memory(self.device) or {}).get("bytes_in_use", 0))

    def __enter__(self) -> DevicePeak:
        if self.before is not None:
            self.most = self.before.get("bytes_in_use", 0)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def result(self) -> dict[str, Any]:
        """Bytes in use before, the most seen meanwhile, and the most above before; None on a CPU."""
        if self.before is None:
            return {"device peak MB": None, "device peak above before MB": None}
        base = self.before.get("bytes_in_use", 0)
        return {"device peak MB": round(self.most / 1e6, 1),
                "device peak above before MB": round((self.most - base) / 1e6, 1)}  # fmt: skip


# --- timing -----------------------------------------------------------------------------------------------------


class TooSlow(Exception):
    """A compile (or a check that compiles) that took longer than the scenario allows; it goes on, unwaited for."""


def bounded(fn: Callable[[], Any], limit_s: float, what: str) -> Any:
    """``fn()`` on a thread of its own, or :class:`TooSlow` after ``limit_s``: XLA's compile of a long unrolled
    body can take many minutes, and cannot be interrupted; the thread is left to finish on its own."""
    done: dict[str, Any] = {}

    def run() -> None:
        try:
            done["value"] = fn()
        except BaseException as exc:
            done["error"] = exc

    thread = threading.Thread(target=run, daemon=True, name=f"bounded: {what}")
    thread.start()
    thread.join(limit_s)
    if thread.is_alive():
        raise TooSlow(f"{what} took over {limit_s:.0f} s")
    if "error" in done:
        raise done["error"]
    return done["value"]


def timed(fn: Callable[..., Any], *args: Any, reps: int = 3, budget_s: float = 2.0,
          compile_limit: float = 600.0) -> dict[str, Any]:  # fmt: skip
    """``jax.jit(fn)(*args)`` compiled (:class:`TooSlow` past ``compile_limit``), then run until ``reps`` runs or
    ``budget_s``: compile s, median run s."""
    lowered = jax.jit(fn).lower(*args)
    t0 = time.perf_counter()
    compiled = bounded(lowered.compile, compile_limit, "the compile")
    compile_s = time.perf_counter() - t0
    walls: list[float] = []
    while len(walls) < reps and (not walls or sum(walls) < budget_s):
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        walls.append(time.perf_counter() - t0)
    kept = walls[1:] or walls  # the first run pays for its arguments' transfer and the program's first load
    return {"compile_s": compile_s, "wall_s": statistics.median(kept), "runs": len(walls)}


def clock() -> Callable[[], float]:
    """A stopwatch: ``elapsed = clock(); ...; elapsed()``."""
    t0 = time.perf_counter()
    return lambda: time.perf_counter() - t0


# --- jobs in float32 --------------------------------------------------------------------------------------------

CASES = ("gp", "gp-compensated", "affine", "affine-compensated", "logistic", "randomwalk", "lorenz", "cumsum",
         "cumsum-compensated", "cumprod", "cumprod-compensated")  # fmt: skip
"""The built-in recipes, each compensated one also as it is, in float32."""

PARAMS = {"gp": {"ratio": RATIO}, "affine": {"a": 1.0 - 2.0**-16, "b": 2.0**-16, "x0": 0.0}}
"""``affine`` with ``x[k] = 1 - a**k``, which moves over 2**16 steps rather than settling at once."""


def input_values(recipe: str, n: int) -> np.ndarray:
    """The input a cumulative recipe accumulates: values in [0, 1) to sum, factors near 1 to multiply."""
    rng = np.random.default_rng(2026)
    if recipe == "cumsum":
        return rng.random(n, dtype=np.float32)
    return (1.0 + rng.uniform(-(2.0**-10), 2.0**-10, n)).astype(np.float32)


def job(case: str, n: int, folder: Path, dtype: str = "float32") -> Any:
    """The recipe job of ``case`` (``gp-compensated``: gp with ``compensated=True``) over ``n`` steps."""
    import zarr

    from streamacc.recipes import get_recipe

    name, _, mode = case.partition("-")
    params: dict[str, Any] = dict(PARAMS.get(name, {}))
    if mode:
        params["compensated"] = True
    if name in ("cumsum", "cumprod"):
        path = folder / f"{name}-{n}.zarr"
        if not path.exists():
            zarr.create_array(str(path), shape=(n,), dtype="float32", chunks=(min(n, 2**22),))[...] = input_values(
                name, n)  # fmt: skip
        params["input"] = str(path)
    return get_recipe(name).build(n, dtype, **params)


def device_xs(j: Any) -> Any:
    """A job's inputs, all of them, on the device (for one ``lax.scan`` over the whole length)."""
    return None if j.xs is None else jax.numpy.asarray(np.asarray(j.xs[0 : j.length]))


def leaves(tree: Any) -> list[np.ndarray]:
    """The leaves of ``tree`` as numpy arrays (a PRNG key's as its data)."""
    keys = jax.dtypes.extended
    return [np.asarray(jax.random.key_data(x) if jax.numpy.issubdtype(x.dtype, keys) else x)
            for x in jax.tree_util.tree_leaves(tree)]  # fmt: skip


def first_difference(a: np.ndarray, b: np.ndarray) -> int | None:
    """The first row where ``a`` and ``b`` differ in their bits (None: none)."""
    if a.shape != b.shape:
        return 0
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)  # a chip's arrays may come back in another layout
    rows = a.reshape(len(a), -1).view(np.uint8) if a.ndim else a.reshape(1, -1).view(np.uint8)
    other = b.reshape(len(b), -1).view(np.uint8) if b.ndim else b.reshape(1, -1).view(np.uint8)
    differ = np.flatnonzero((rows != other).any(axis=1))
    return int(differ[0]) if len(differ) else None


# --- exact values -----------------------------------------------------------------------------------------------


def exact_series(case: str, n: int) -> np.ndarray:
    """The exact value of every one of ``n`` steps of a float32 case's output, rounded to float64 (whose error,
    2**-53 relative, is far below the float32 ulp these are compared in)."""
    name = case.partition("-")[0]
    with decimal.localcontext() as ctx:
        ctx.prec = DIGITS
        d = decimal.Decimal
        out = np.empty(n)
        if name == "gp":
            x, r = d(1), d(RATIO)
            for k in range(n):
                out[k] = float(x)
                x *= r
        elif name == "affine":
            p = PARAMS["affine"]
            x, a, b = d(p["x0"]), d(p["a"]), d(p["b"])
            for k in range(n):
                out[k] = float(x)
                x = a * x + b
        else:
            values = input_values(name, n)
            acc = d(0) if name == "cumsum" else d(1)
            for k in range(n):
                v = d(float(values[k]))
                acc = acc + v if name == "cumsum" else acc * v
                out[k] = float(acc)
        return out


def gp_exact(steps: Iterator[int] | list[int], ratio: float = RATIO) -> np.ndarray:
    """``ratio ** k`` for each step ``k``, exact to 60 digits, rounded to float64."""
    with decimal.localcontext() as ctx:
        ctx.prec = DIGITS
        return np.array([float(decimal.Decimal(ratio) ** k) for k in steps])


def ulps(got: np.ndarray, exact: np.ndarray, bits: int = 24) -> np.ndarray:
    """How far ``got`` is from ``exact``, in units in the last place of a float of ``bits`` significant bits."""
    _, e = np.frexp(exact)
    return (np.asarray(got, np.float64) - exact) / np.ldexp(1.0, e - bits)


def error_row(got: np.ndarray, exact: np.ndarray, bits: int = 24) -> dict[str, Any]:
    """The largest and median error in ulp, and the relative error at the last step."""
    u = np.abs(ulps(got, exact, bits))
    last = float(exact[-1])
    return {"largest ulp": float(u.max()), "median ulp": float(np.median(u)),
            "last step's error %": 100 * abs(float(got[-1]) - last) / abs(last)}  # fmt: skip
