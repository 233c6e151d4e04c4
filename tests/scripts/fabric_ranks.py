"""Lightning Fabric on CPU/gloo: Fabric(devices=argv[1], num_nodes=argv[2]); each rank prints what Fabric sees."""

import sys

import torch
from lightning.fabric import Fabric

fabric = Fabric(accelerator="cpu", strategy="ddp", devices=int(sys.argv[1]), num_nodes=int(sys.argv[2]))
fabric.launch()
total = fabric.all_reduce(torch.tensor(fabric.global_rank), reduce_op="sum")
env = type(fabric.strategy.cluster_environment).__name__
print(f"FABRIC rank={fabric.global_rank} world={fabric.world_size} node={fabric.node_rank} env={env} sum={int(total)}")
