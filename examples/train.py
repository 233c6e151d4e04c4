"""A tiny data-parallel step on CPU ranks: every rank all-reduces its rank number.

    dslaunch --nproc-per-node 4 examples/train.py --steps 3
"""

import argparse

import torch
import torch.distributed as dist

import dslaunch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()

    engine = dslaunch.engine()
    expected = engine.world_size * (engine.world_size - 1) / 2
    for step in range(args.steps):
        value = torch.tensor([float(engine.rank)], device=engine.device)
        dist.all_reduce(value)
        if value.item() != expected:
            raise SystemExit(f"rank {engine.rank}: all_reduce gave {value.item()}, expected {expected}")
        if engine.rank == 0:
            print(f"step {step}: all_reduce over {engine.world_size} ranks = {value.item():.0f} (ok)")
    dist.barrier()
    if engine.rank == 0:
        print(f"done: {engine.world_size} ranks, backend {engine.backend}, device {engine.device}")


if __name__ == "__main__":
    main()
