"""Save on SIGTERM, as every framework recommends for preemption: a handler sets a flag, the loop finishes the
current step, saves a checkpoint for this rank (with the step number in it) and exits 0.

    dslaunch --nproc-per-node 4 examples/preempt_handler.py --out /tmp/ckpt
    torchrun --nproc-per-node 4 examples/preempt_handler.py --out /tmp/ckpt

4 gloo CPU ranks, a ``DataLoader(num_workers=2)`` over a small synthetic dataset, data parallel by hand (one
all_reduce of the gradients per step). Each step writes ``OUT/step.RANK`` (its step number) so that a watcher can
tell how far each rank is; the save writes ``OUT/ckpt.RANK.pt`` and then ``OUT/saved.RANK`` (the step saved).
``bench/bench_stop.py`` sends SIGTERM to the launcher and counts the saves; ``preempt_should_stop.py`` is the same
loop with ``dslaunch.should_stop()`` instead of the handler.
"""

import argparse
import os
import signal
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

stop_requested = False


def on_sigterm(_signum, _frame):
    global stop_requested
    stop_requested = True


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
    signal.signal(signal.SIGTERM, on_sigterm)
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
        if stop_requested or step >= args.max_steps:
            torch.save({"step": step, "model": model.state_dict()}, os.path.join(args.out, f"ckpt.{rank}.pt"))
            write(os.path.join(args.out, f"saved.{rank}"), str(step))
            break
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
