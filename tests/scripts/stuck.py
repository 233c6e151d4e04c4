"""Four torch ranks: three steps of gloo all_reduce, then rank 2 sleeps in stuck_here() while the others wait
in the next all_reduce."""

import os
import time

import torch
import torch.distributed as dist

import dslaunch


def stuck_here() -> None:
    time.sleep(float(os.environ.get("STUCK_FOR", "60")))


engine = dslaunch.engine()
t = torch.ones(1)
for _ in range(3):
    dist.all_reduce(t)
    engine.timers.step()
print(f"ready sum={t.item():g}", flush=True)
if engine.rank == 2:
    stuck_here()
dist.all_reduce(t)
