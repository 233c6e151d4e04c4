"""Mesh bootstrap cost: dslaunch.engine(mesh=SPEC) vs a bare init_process_group + init_device_mesh of the
same shape, in the same run, alternating, each under the same launcher.

    .venv/bin/python bench/bench_mesh.py [--reps 3] [--nproc 4] [--spec dp=2,tp=2]

Per launch it takes the slowest rank's (a) start -> mesh ready, from the process's creation time,
and (b) the build alone (after `import torch`: process group, consistency guard, mesh, views).
Prints a markdown table with medians and the dslaunch/bare ratios (target: total <= 1.1x).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def rank_main(variant: str, spec: str, out_dir: str) -> None:
    import psutil

    started = psutil.Process().create_time()
    import torch  # noqa: F401  (both variants pay the same import before the clock for "build")
    import torch.distributed as dist

    imported = time.time()
    if variant == "dslaunch":
        import dslaunch

        engine = dslaunch.engine(mesh=spec)
        mesh, rank = engine.mesh, engine.rank
    else:
        mesh, rank = _bare_mesh(spec)
    ready = time.time()
    assert mesh.get_coordinate() is not None
    Path(out_dir, f"{variant}-{rank}.json").write_text(
        json.dumps({"total": ready - started, "build": ready - imported})
    )
    if variant == "dslaunch":
        _micro(spec, out_dir, rank)
    dist.barrier()


def _bare_mesh(spec: str) -> tuple[Any, int]:
    import datetime

    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from dslaunch.mesh import parse_spec, resolve

    layout = resolve(parse_spec(spec), int(os.environ["WORLD_SIZE"]))  # only to get the same shape
    if not dist.is_initialized():
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    names = layout.active
    return init_device_mesh("cpu", tuple(layout.size(n) for n in names), mesh_dim_names=names), dist.get_rank()


def _micro(spec: str, out_dir: str, rank: int, reps: int = 9) -> None:
    """Mesh build alone, both ways, alternating in the same processes (slowest rank per try)."""
    import torch
    import torch.distributed as dist

    from dslaunch.bootstrap.mesh_build import bootstrap

    times: dict[str, list[float]] = {"bare": [], "dslaunch": []}
    for i in range(reps * 2):
        variant = ("bare", "dslaunch")[(i + i // 2) % 2]
        dist.barrier()
        start = time.perf_counter()
        if variant == "bare":
            _bare_mesh(spec)
        else:
            bootstrap(spec, int(os.environ.get("LOCAL_WORLD_SIZE", "1")), "cpu")
        took = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
        dist.all_reduce(took, op=dist.ReduceOp.MAX)
        times[variant].append(took.item())
    if rank == 0:
        Path(out_dir, "micro.json").write_text(json.dumps(times))


def launch(variant: str, spec: str, nproc: int) -> tuple[dict[str, float], dict[str, list[float]]]:
    with tempfile.TemporaryDirectory() as out:
        cmd = [
            sys.executable,
            "-m",
            "dslaunch",
            "--nproc-per-node",
            str(nproc),
            "--master-port",
            "0",
            __file__,
            "--rank",
            variant,
            spec,
            out,
        ]
        env = {**os.environ, "DSLAUNCH_PG_TIMEOUT": "60", "PYTHONPATH": str(ROOT)}
        subprocess.run(cmd, check=True, capture_output=True, timeout=300, env=env, cwd=ROOT)
        rows = [json.loads(p.read_text()) for p in Path(out).glob(f"{variant}-*.json")]
        micro_path = Path(out, "micro.json")
        micro = json.loads(micro_path.read_text()) if micro_path.exists() else {}
    assert len(rows) == nproc, rows
    return {key: max(r[key] for r in rows) for key in ("total", "build")}, micro


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=4)
    parser.add_argument("--nproc", type=int, default=4)
    parser.add_argument("--spec", default="dp=2,tp=2")
    parser.add_argument("--rank", nargs=3, metavar=("VARIANT", "SPEC", "OUT"))
    args = parser.parse_args()
    if args.rank:
        rank_main(*args.rank)
        return
    runs: dict[str, list[dict[str, float]]] = {"bare": [], "dslaunch": []}
    ratios: list[float] = []
    micro: dict[str, list[float]] = {"bare": [], "dslaunch": []}
    for rep in range(args.reps):
        pair = {}
        for variant in ("bare", "dslaunch") if rep % 2 == 0 else ("dslaunch", "bare"):
            pair[variant], extra = launch(variant, args.spec, args.nproc)
            runs[variant].append(pair[variant])
            for key, values in extra.items():
                micro[key].extend(values)
        ratios.append(pair["dslaunch"]["total"] / pair["bare"]["total"])
    med = {v: {k: statistics.median(r[k] for r in rows) for k in ("total", "build")} for v, rows in runs.items()}
    print(
        f"mesh {args.spec} on {args.nproc} CPU ranks (gloo); {args.reps} launch pairs, order alternating; "
        "slowest rank per launch; medians"
    )
    print("| variant | start -> mesh ready (s) | after `import torch` -> mesh ready (s) | mesh build alone (s) |")
    print("|---|---|---|---|")
    for variant in ("bare", "dslaunch"):
        print(
            f"| {variant} | {med[variant]['total']:.3f} | {med[variant]['build']:.3f} | "
            f"{statistics.median(micro[variant]):.4f} |"
        )
    ratio = statistics.median(ratios)
    print(
        f"| dslaunch / bare | {ratio:.3f}x (median of pairs) | "
        f"{med['dslaunch']['build'] / med['bare']['build']:.2f}x | "
        f"{statistics.median(micro['dslaunch']) / statistics.median(micro['bare']):.2f}x |"
    )
    print(f"target start -> mesh ready <= 1.1x: {'met' if ratio <= 1.1 else 'NOT met'}")


if __name__ == "__main__":
    main()
