"""A small torch job for the launch timeline test: process group, mesh, three timed steps."""

import torch
import torch.distributed as dist

import dslaunch

eng = dslaunch.engine()
total = torch.zeros(1)
for _ in range(3):
    with eng.timers("step"):
        t = torch.ones(1)
        dist.all_reduce(t)
        total += t
    eng.timers.step()
print(f"timeline-done {total.item():.1f}", flush=True)
