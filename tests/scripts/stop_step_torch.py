"""4 gloo ranks in lockstep: each step is an allreduce, and ``engine.should_stop()`` is called once per step at its
start. On True the rank writes the step it stopped at (and the allreduced sum, the same on every rank when they
stopped together) to OUT_DIR/saved.RANK and exits 0. After 3 steps it writes OUT_DIR/ready.RANK."""

from __future__ import annotations

import os
import sys
import time

import torch
import torch.distributed as dist

import dslaunch

out = os.environ["OUT_DIR"]
engine = dslaunch.engine()
total = torch.zeros(1)
for step in range(1, 100_000):
    if engine.should_stop():
        with open(os.path.join(out, f"saved.{engine.rank}"), "w") as f:
            f.write(f"{step} {int(total.item())}\n")
        sys.exit(0)
    time.sleep(0.01)  # the step's compute
    grad = torch.ones(1)
    dist.all_reduce(grad)
    total += grad
    if step == 3:
        open(os.path.join(out, f"ready.{engine.rank}"), "w").close()
