"""One NCCL rank that hangs as a real job does: an all_reduce queued behind a long kernel, the main thread waiting
for the device in torch.cuda.synchronize(), nothing printed. --hang-timeout then asks for the flight recorder."""

import os

import torch
import torch.distributed as dist

import dslaunch

engine = dslaunch.engine()
t = torch.ones(1024, device=engine.device)
for _ in range(3):
    dist.all_reduce(t)
torch.cuda.synchronize()
print(f"ready sum={t[0].item():g} backend={engine.backend}", flush=True)
torch.cuda._sleep(int(float(os.environ.get("SPIN_CYCLES", "1e11"))))  # about a minute at the H200's clock
dist.all_reduce(t)  # queued behind the spinning kernel: the dump shows it not completed
torch.cuda.synchronize()
print("not reached", flush=True)
