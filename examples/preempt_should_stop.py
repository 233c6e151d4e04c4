"""Stop at one step on every rank with ``dslaunch.should_stop()``: called once per step by every rank at the same
point, it turns True on every rank at the same call once a stop was requested anywhere in the job (SIGTERM to
dslaunch, a pod's SIGTERM, scancel), so every rank saves the same step; the loop saves and exits 0.

    dslaunch --nproc-per-node 4 examples/preempt_should_stop.py --out /tmp/ckpt

The same loop as ``preempt_handler.py`` (4 gloo CPU ranks, ``DataLoader(num_workers=2)``, ``OUT/step.RANK``,
``OUT/ckpt.RANK.pt`` then ``OUT/saved.RANK``), without a signal handler: a rank that calls ``should_stop()`` gets
no signal at the request, it stops at the agreed step (docs/stopping.md).
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

import dslaunch


class Synthetic(Dataset):
    """Random samples, the same for a given index on every rank."""

    def __len__(self):
        return 1 << 20

    def __getitem__(self, index):
        g = torch.Generator().manual_seed(index)
        x = torch.randn(16, generator=g)
        return x, x.sum().reshape(1)


def write(path, text):
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--step-time", type=float, default=0.1, help="seconds of 'compute' per step")
    parser.add_argument("--max-steps", type=int, default=3000)
    args, _ = parser.parse_known_args()  # DeepSpeed's launcher may add --local_rank
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Synthetic(), batch_size=32, num_workers=2, sampler=range(rank, 1 << 20, dist.get_world_size()))
    for step, (x, y) in enumerate(loader, start=1):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= dist.get_world_size()
        opt.step()
        time.sleep(args.step_time)
        write(os.path.join(args.out, f"step.{rank}"), str(step))
        if dslaunch.should_stop() or step >= args.max_steps:
            torch.save({"step": step, "model": model.state_dict()}, os.path.join(args.out, f"ckpt.{rank}.pt"))
            write(os.path.join(args.out, f"saved.{rank}"), str(step))
            break
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
