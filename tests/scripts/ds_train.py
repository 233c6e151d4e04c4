"""DeepSpeed's own engine (ZeRO stage $ZERO) on the dslaunch mesh: 3 SGD steps, then the summed weights."""

import os
import sys

import deepspeed
import deepspeed.ops
import torch

import dslaunch
from dslaunch.compat import mpu

# DeepSpeed's CPU accelerator would JIT-build its shared-memory allreduce op in every rank's first job (3 to 7
# minutes a torch on this 2-core machine, then a lock file a killed build leaves behind): an optimisation of its own
# that this test is not about. With no op marked compatible, DeepSpeed's comm stays on the gloo process group, under
# torchrun and dslaunch alike (SGD needs no op either).
deepspeed.ops.__compatible_ops__ = {}  # type: ignore[attr-defined]
engine = dslaunch.engine()
stage = int(os.environ.get("ZERO", "0"))
torch.manual_seed(0)
model = torch.nn.Linear(8, 4)
config = {
    "train_batch_size": 2 * engine.world_size,
    "train_micro_batch_size_per_gpu": 2,
    "optimizer": {"type": "SGD", "params": {"lr": 0.1}},
    "zero_optimization": {"stage": stage},
    "zero_allow_untested_optimizer": True,
}
ds_engine, _opt, _, _ = deepspeed.initialize(model=model, config=config, mpu=mpu, model_parameters=model.parameters())
torch.manual_seed(0)
for _step in range(3):
    x = torch.randn(2, 8)
    loss = ds_engine(x).pow(2).mean()
    ds_engine.backward(loss)
    ds_engine.step()
w = ds_engine.module.weight.detach().clone()
torch.distributed.all_reduce(w)
# One write per line: torchrun does not prefix rank output, so two ranks' print() calls can interleave.
sys.stdout.write(f"rank={engine.rank} stage={stage} dp={ds_engine.dp_world_size} wsum={w.sum().item():.4f}\n")
sys.stdout.flush()
