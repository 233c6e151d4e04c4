"""One rank's CUDA facts as one ``gpu-facts {json}`` line (tests/gpu).

MODE=engine (default): dslaunch.engine() makes the process group (nccl for cuda, gloo for the CPU on a GPU);
MODE=gloo: the script makes a gloo group first, which the engine adopts (several ranks on one GPU).
INIT_CUDA_FIRST=1 initialises CUDA before either; ITERS=N repeats the collectives N times.
"""

import json
import os

import torch
import torch.distributed as dist

import dslaunch


def forked() -> bool:
    with open("/proc/self/cmdline", "rb") as f:
        return b"dslaunch.agent.preload.server" in f.read()


def cuda_backend(pg: dist.ProcessGroup, device: torch.device) -> str | None:
    if device.type != "cuda":
        return None
    try:
        return type(pg._get_backend(device)).__name__
    except Exception as exc:  # noqa: BLE001 - the test shows what torch said
        return f"error: {exc}"


facts: dict[str, object] = {"forked": forked(), "cvd": os.environ.get("CUDA_VISIBLE_DEVICES")}
facts["count_before"] = torch.cuda.device_count()  # NVML's answer, before CUDA is initialised
if os.environ.get("INIT_CUDA_FIRST") == "1":
    torch.cuda.init()
    facts["early_sum"] = torch.ones(4, device="cuda").sum().item()
if os.environ.get("MODE") == "gloo":
    dist.init_process_group("gloo")
engine = dslaunch.engine()
device, pg = engine.device, engine.process_group
assert pg is not None
on = device if "nccl" in engine.backend else torch.device("cpu")  # gloo-only: the collective stays on the CPU
for _ in range(int(os.environ.get("ITERS", "1"))):
    summed = torch.full((4,), float(engine.rank + 1), device=on)
    dist.all_reduce(summed)
    on_cpu = torch.full((2,), float(engine.rank + 1))
    dist.all_reduce(on_cpu)  # a CPU tensor: gloo, also in a cuda:nccl,cpu:gloo group
facts.update(
    rank=engine.rank,
    local_rank=engine.local_rank,
    world=engine.world_size,
    device=str(device),
    backend=engine.backend,
    cuda_backend=cuda_backend(pg, device),
    bound=None if pg.bound_device_id is None else str(pg.bound_device_id),
    sum=summed.tolist(),
    sum_device=str(summed.device),
    cpu_sum=on_cpu.tolist(),
    count=torch.cuda.device_count(),
    mesh_device=engine.mesh.device_type if engine.mesh is not None else None,
)
if device.type == "cuda":
    facts.update(
        current=torch.cuda.current_device(),
        gpu_sum=torch.arange(1000, device=device, dtype=torch.float64).sum().item(),
        uuid=str(torch.cuda.get_device_properties(device).uuid),
    )
print("gpu-facts " + json.dumps(facts), flush=True)
