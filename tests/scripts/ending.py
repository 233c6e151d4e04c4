"""Ways a torch script ends; each must leave its rank with exit 0 (MODE picks one).

A sentinel in builtins reports, from interpreter finalisation, how many gloo worker
threads are still alive then (0 means nothing can abort there).
"""

import builtins
import os
import sys

import torch
import torch.distributed as dist

import dslaunch

MODE = os.environ.get("MODE", "engine")
OUT = os.environ.get("OUT_DIR", "")


class _AtFinalisation:
    # Module globals may be gone when this runs: everything it needs is bound now.
    def __del__(self, listdir=os.listdir, read=open, write=os.write) -> None:
        names = []
        for tid in listdir("/proc/self/task"):
            with read(f"/proc/self/task/{tid}/comm") as f:
                names.append(f.read().strip())
        write(1, f"gloo workers at finalisation: {names.count('pt_gloo_runloop')}\n".encode())


builtins._dslaunch_test_sentinel = _AtFinalisation()  # type: ignore[attr-defined]


def collectives(group=None, rounds: int = 20) -> float:
    total = 0.0
    for _ in range(rounds):
        # A temporary tensor: C++ owns its Python object once Python drops it (the race's ingredient).
        total += dist.all_reduce(torch.ones(8), group=group, async_op=True).get_future().wait()[0][0].item()
    return total


if MODE in ("adopt", "user_destroys_adopted"):
    dist.init_process_group("gloo")
engine = dslaunch.engine()

if MODE in ("ddp", "global_ddp"):
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 4))
    for _ in range(5):
        model(torch.randn(3, 4)).sum().backward()
    if MODE == "ddp":
        del model
elif MODE == "exit_in_loop":
    for step in range(1000):
        collectives(rounds=3)
        if step == 5:
            print(f"rank {engine.rank}: finished", flush=True)
            sys.exit(0)
elif MODE == "async_left":
    works = [dist.all_reduce(torch.ones(1000), async_op=True) for _ in range(10)]  # never waited on
else:
    collectives()
    if engine.built_mesh is not None and engine.size("tp") > 1:
        collectives(group=engine.group("tp"))

if OUT:  # written, never closed: must reach the disk however the rank ends
    open(os.path.join(OUT, f"rank{engine.rank}.txt"), "w").write("unclosed file flushed\n")
if MODE in ("user_destroys", "user_destroys_adopted"):
    dist.destroy_process_group()
if MODE == "raise" and engine.rank == 1:
    raise RuntimeError("rank 1 fails after its collectives")
if MODE == "exit3" and engine.rank == 1:
    sys.exit(3)
if MODE == "abort" and engine.rank == 1:
    os.abort()  # a real native crash before the script finished
print(f"rank {engine.rank}: finished", flush=True)
