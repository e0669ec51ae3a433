"""Scale-out: what the two passes cost, cluster runs against one process, and a model of wall time.

    python benchmarks/bench_dist.py parts --size 2**27 --block 2**22
        per recipe: the carry pass's time per block on the driver (a), a block task's time
        (recompute, encode, checksum, write, fsync: b) and the per-task cost of the
        scheduler round trip (o), all measured in this process and on a LocalCluster
    python benchmarks/bench_dist.py runs --size 2**28 --block 2**22 [--s3]
        `streamacc write` in one process, with --workers 1 and --workers 2, to local disk
        (or to a moto S3 server on 127.0.0.1): the whole command under /usr/bin/time -v,
        then the write alone on a cluster already started and warmed up
    python benchmarks/bench_dist.py pinned --size 2**28 --block 2**22
        the same cluster runs pinned with taskset: 1 worker on 1 core, 2 workers on 2 cores
    python benchmarks/bench_dist.py model
        wall time against workers (1 to 64) from the measured parts, with the carry pass
        as the critical path, checked against the measured runs; writes dist_model.png

Each section adds to ``--out``/dist.json; ``model`` also writes dist.md.
The model: T(W) = a + b + (n - 1) * max(a + o, b / W) for n blocks on W workers with a
core each, where o is the scheduler's round trip shared by the blocks of one task: the
driver's per-block work (carry pass plus scheduling) bounds the rate however many
workers there are.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from _timing import time_command  # noqa: E402

RECIPES = {"gp": {}, "affine": {}, "logistic": {"inner": 32}, "randomwalk": {}}
WORKERS = (1, 2, 4, 8, 16, 32, 64)


def _load(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def _save(path: Path, section: str, data: object) -> None:
    doc = _load(path)
    doc[section] = data
    path.write_text(json.dumps(doc, indent=1))


def _cluster(workers: int):
    from distributed import Client, LocalCluster

    t0 = time.perf_counter()
    cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None)
    client = Client(cluster)
    return cluster, client, time.perf_counter() - t0


def parts(size: int, block: int, workdir: Path, blocks_measured: int) -> dict:
    """Per recipe: carry-pass seconds per block (a), block-task seconds (b), scheduler seconds per task (o)."""
    import jax

    jax.config.update("jax_enable_x64", True)
    from streamacc.base import check_request
    from streamacc.engine import carry_pass, make_plan, to_host
    from streamacc.recipes import get_recipe
    from streamacc.run import BLOCKS_PER_TASK, BlockTask, SinkSpec, open_output, output_spec, run_block_tasks
    from streamacc.store import open_target

    results = {}
    for name, params in RECIPES.items():
        job = get_recipe(name).build(size, "float64", **params)
        plan = make_plan(job.f, job.init, job.xs, length=job.length, block_size=block, unroll=job.unroll)
        carries = carry_pass(plan)
        next(carries)  # compile
        times = []
        for _ in range(min(blocks_measured, plan.block_count - 1)):
            t0 = time.perf_counter()
            next(carries)
            times.append(time.perf_counter() - t0)
        a = statistics.median(times)
        # block tasks exactly as a worker runs them (groups of BLOCKS_PER_TASK, each written while the
        # next computes), into a real output; b is the time per block of a group
        out = workdir / f"parts-{name}.zarr"
        request = check_request(mode="create", length=job.length, block_size=block, unroll=job.unroll, attrs=job.attrs)
        spec = output_spec(plan, request, names=job.names)
        target = open_target(out)
        with target.lock("another output path"):
            output = open_output(target, spec, mode="create", init=to_host(plan.init), check_resumable=lambda o: None)
            sink = SinkSpec.of(output)
            bounds = list(plan.bounds())[: 1 + blocks_measured]
            carries_in = [to_host(plan.init)]
            for _, _, carry in carry_pass(plan):
                if len(carries_in) == len(bounds):
                    break
                carries_in.append(to_host(carry))
            tasks = [BlockTask(k, start, stop, carries_in[k]) for k, (start, stop) in enumerate(bounds)]
            run_block_tasks(plan, sink, tasks[:1], True)  # compiles
            task_times = []
            for first in range(1, len(tasks), BLOCKS_PER_TASK):
                group = tasks[first : first + BLOCKS_PER_TASK]
                t0 = time.perf_counter()
                run_block_tasks(plan, sink, group, True)
                task_times += [(time.perf_counter() - t0) / len(group)] * len(group)
        shutil.rmtree(out)
        b = statistics.median(task_times)
        results[name] = {
            "a_s": a,
            "b_s": b,
            "ratio": b / a,
            "a_ns_per_step": a / block * 1e9,
            "b_ns_per_step": b / block * 1e9,
        }
        print(name, json.dumps(results[name]), flush=True)
    cluster, client, start_s = _cluster(1)
    try:
        window, count = 5, 400
        futures = []
        t0 = time.perf_counter()
        for i in range(count):
            futures.append(client.submit(int, i, pure=False))
            if len(futures) >= window:
                futures.pop(0).result()
        for f in futures:
            f.result()
        o = (time.perf_counter() - t0) / count
    finally:
        client.close()
        cluster.close()
    print(f"scheduler round trip per task {o * 1e3:.2f} ms; LocalCluster(1) start {start_s:.2f} s", flush=True)
    return {
        "size": size,
        "block": block,
        "recipes": results,
        "o_s": o,
        "blocks_per_task": BLOCKS_PER_TASK,
        "cluster_start_s": start_s,
    }


def _moto():
    from moto.server import ThreadedMotoServer

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # a log line per request otherwise
    server.start()
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1")
    import boto3

    endpoint = f"http://127.0.0.1:{port}"
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="bench")
    return server, endpoint


def write_only(size: int, block: int, out: str, workers: int, endpoint: str | None) -> dict:
    """In this process: start the cluster (if ``workers``), warm it up, then time ``streamacc.write`` alone.

    The warm-up writes one block elsewhere, so that every worker has imported JAX and
    compiled the block function, as on a cluster that has run before; what is timed is
    the write itself, carry pass, tasks, commits and all.
    """
    import jax

    jax.config.update("jax_enable_x64", True)
    import streamacc
    from streamacc.recipes import get_recipe
    from streamacc.run import cluster_client

    job = get_recipe("gp").build(size, "float64")
    options = {"endpoint_url": endpoint} if endpoint else None
    kw = dict(block_size=block, unroll=job.unroll, names=job.names, storage_options=options, progress=False)
    t0 = time.perf_counter()
    with cluster_client(workers or None, None) as client:
        started = time.perf_counter() - t0
        for i in range(max(1, 2 * workers)):  # one block on every worker
            warm = out.rstrip("/").rsplit("/", 1)[0] + f"/warm-{i}.zarr"
            streamacc.write(warm, job.f, job.init, length=block, client=client, mode="overwrite", **kw)
        warmed = time.perf_counter() - t0 - started
        t1 = time.perf_counter()
        streamacc.write(out, job.f, job.init, length=size, client=client, mode="overwrite", **kw)
        write_s = time.perf_counter() - t1
    return {"cluster_start_s": started, "warm_up_s": warmed, "write_s": write_s}


def runs(size: int, block: int, workdir: Path, s3: bool, pin: bool) -> list[dict]:
    """One process and --workers 1, 2: the whole command under /usr/bin/time -v, then the write alone, warm."""
    server = endpoint = None
    if s3:
        server, endpoint = _moto()
    rows = []
    try:
        configs = (
            [("1 core, 1 worker", ["0"], 1), ("2 cores, 2 workers", ["0", "1"], 2)]
            if pin
            else [("one process", None, 0), ("--workers 1", None, 1), ("--workers 2", None, 2)]
        )
        for label, cores, workers in configs:
            name = label.replace(" ", "-").replace(",", "")
            out = f"s3://bench/{name}.zarr" if s3 else str(workdir / f"{name}.zarr")
            cmd = [sys.executable, "-m", "streamacc", "write", out, "--size", str(size), "--block-size", str(block)]
            cmd += ["--no-progress", "--overwrite"]
            if workers:
                cmd += ["--workers", str(workers)]
            if s3:
                cmd += ["--storage-option", f"endpoint_url={endpoint}"]
            child = [sys.executable, __file__, "write-only", "--size", str(size), "--block", str(block)]
            child += ["--target", out, "--workers", str(workers)] + (["--endpoint", endpoint] if s3 else [])
            if cores:
                cmd = ["taskset", "-c", ",".join(cores), *cmd]
                child = ["taskset", "-c", ",".join(cores), *child]
            measured = time_command(cmd)
            if measured["returncode"] != 0:
                raise SystemExit(f"{label} failed: {measured['stderr']}")
            row = {"run": label, "workers": workers, "cores": cores, "target": "s3 (moto)" if s3 else "local disk"}
            row.update({k: v for k, v in measured.items() if k not in ("stdout", "stderr")})
            row["steps_per_s"] = size / measured["wall_s"]
            warm = subprocess.run(child, capture_output=True, text=True, check=True)
            row.update(json.loads(warm.stdout.strip().splitlines()[-1]))
            row["write_steps_per_s"] = size / row["write_s"]
            rows.append(row)
            print(json.dumps(row), flush=True)
            if not s3:
                shutil.rmtree(workdir, ignore_errors=True)
                workdir.mkdir()
    finally:
        if server is not None:
            server.stop()
    return rows


def predict(part: dict, o: float, start: float, n: int, workers: int) -> float:
    """Wall time of ``n`` blocks on ``workers`` workers: the driver's per-block work (carry pass ``a`` plus its
    share ``o`` of a task's scheduling) and the workers' (a block task ``b`` each) run side by side."""
    a, b = part["a_s"], part["b_s"]
    return start + a + b + (n - 1) * max(a + o, b / workers)


def model(doc: dict, out: Path) -> str:
    """The model's speedups and the measured runs, as markdown; draws dist_model.png."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    p = doc["parts"]
    n = -(-p.get("model_size", 2**32) // p["block"])
    o = p["o_s"] / p["blocks_per_task"]  # the scheduler's cost per block
    lines = [
        f"Model for {p.get('model_size', 2**32)} steps in blocks of {p['block']} ({n} blocks); the scheduler's "
        f"round trip {p['o_s'] * 1e3:.2f} ms per task of {p['blocks_per_task']} blocks, "
        f"o = {o * 1e3:.2f} ms per block.",
        "",
        "| recipe | a (carry pass) ms/block | b (block task) ms/block | b / a | "
        + " | ".join(f"speedup at {w}" for w in WORKERS)
        + " |",
        "|---|--:|--:|--:|" + "--:|" * len(WORKERS),
    ]
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, part in p["recipes"].items():
        base = predict(part, o, 0.0, n, 1)
        speed = [base / predict(part, o, 0.0, n, w) for w in WORKERS]
        ax.plot(WORKERS, speed, marker="o", label=f"{name} (b/a = {part['ratio']:.0f})")
        cells = " | ".join(f"{s:.1f}x" for s in speed)
        lines.append(f"| {name} | {part['a_s'] * 1e3:.1f} | {part['b_s'] * 1e3:.1f} | {part['ratio']:.1f} | {cells} |")
    ax.plot(WORKERS, WORKERS, color="grey", linestyle=":", label="linear")
    for section, marker in (("runs", "x"), ("pinned", "+")):
        rows = {row["workers"]: row["write_s"] for row in doc.get(section, []) if row["workers"]}
        if 1 in rows:
            points = sorted(rows)
            label = f"gp measured, {section} (driver, scheduler and workers share 2 cores)"
            ax.plot(points, [rows[1] / rows[w] for w in points], marker, color="black", markersize=9, label=label)
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="workers",
        ylabel="speedup over 1 worker (model)",
        title="Cluster wall time model: the carry pass bounds the speedup",
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "dist_model.png", dpi=120)
    checks = []
    for section in ("runs", "pinned"):
        rows = doc.get(section, [])
        size = doc.get(f"{section}_size")
        for row in rows:
            if not row["workers"] or size is None:
                continue
            predicted = predict(p["recipes"]["gp"], o, 0.0, -(-size // p["block"]), row["workers"])
            checks.append(f"| {section} | {row['run']} | {row['write_s']:.2f} | {predicted:.2f} |")
    if checks:
        header = "| runs | run | measured write s (warm cluster) | model s (gp) |"
        lines += ["", header, "|---|---|--:|--:|", *checks]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("section", choices=["parts", "runs", "pinned", "model", "write-only"])
    parser.add_argument("--target", help="write-only: the output path or URL")
    parser.add_argument("--workers", type=int, default=0, help="write-only: worker processes (0: one process)")
    parser.add_argument("--endpoint", help="write-only: the S3 endpoint")
    parser.add_argument("--size", default="2**26")
    parser.add_argument("--block", default="2**22")
    parser.add_argument("--blocks", type=int, default=16, help="blocks timed per recipe in parts")
    parser.add_argument("--model-size", default="2**32", help="the length the model predicts for")
    parser.add_argument("--s3", action="store_true", help="runs: write to a moto S3 server instead of local disk")
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "out" / "dist")
    args = parser.parse_args()
    from streamacc.cli._expr import parse_int

    size, block = parse_int(args.size, name="--size"), parse_int(args.block, name="--block")
    if args.section == "write-only":
        print(json.dumps(write_only(size, block, args.target, args.workers, args.endpoint)))
        return
    args.out.mkdir(parents=True, exist_ok=True)
    store = args.out / "dist.json"
    with tempfile.TemporaryDirectory(dir=args.out) as tmp:
        work = Path(tmp)
        if args.section == "parts":
            data = parts(size, block, work, args.blocks)
            data["model_size"] = parse_int(args.model_size, name="--model-size")
            _save(store, "parts", data)
        elif args.section in ("runs", "pinned"):
            key = "pinned" if args.section == "pinned" else "runs_s3" if args.s3 else "runs"
            _save(store, key, runs(size, block, work, args.s3, args.section == "pinned"))
            _save(store, f"{key}_size", size)
        else:
            text = model(_load(store), args.out)
            (args.out / "dist.md").write_text(text + "\n")
            print(text)


if __name__ == "__main__":
    main()
