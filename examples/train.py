"""Train a tiny MLP on CPU ranks: tensor parallel over ``tp``, FSDP2 over ``dp``.

dslaunch --nproc-per-node 4 --mesh dp=2,tp=2 examples/train.py --steps 8
"""

import argparse
import warnings

import torch
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

import dslaunch


class MLP(torch.nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.up = torch.nn.Linear(dim, hidden)
        self.down = torch.nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--dim", type=int, default=16)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()

    # FSDP2 warns about any view returned by the root module; this model never edits its output in place.
    warnings.filterwarnings("ignore", message="FSDP2-wrapped module")
    engine = dslaunch.engine()
    torch.manual_seed(0)  # same initial weights everywhere; TP/FSDP then keep only their shard
    model = MLP(args.dim, 4 * args.dim).to(engine.device)
    if engine.size("tp") > 1:
        parallelize_module(model, engine.submesh("tp"), {"up": ColwiseParallel(), "down": RowwiseParallel()})
    if engine.size("dp") > 1:
        fully_shard(model, mesh=engine.submesh("dp"))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.3)

    # Each data-parallel rank draws its own batches; ranks of one tp group share them.
    data = torch.Generator().manual_seed(1 + engine.coordinate["dp"])
    target = torch.randn(args.dim, args.dim, generator=torch.Generator().manual_seed(7)).to(engine.device)
    target /= args.dim**0.5
    losses: list[float] = []
    expected = engine.world_size * (engine.world_size - 1) / 2
    for step in range(1, args.steps + 1):
        x = torch.randn(args.batch, args.dim, generator=data).to(engine.device)  # drawn on the CPU: same on any device
        with engine.timers("forward"):
            loss = torch.nn.functional.mse_loss(model(x), x @ target)
        with engine.timers("backward"):
            loss.backward()
        with engine.timers("optimizer"):
            optimizer.step()
            optimizer.zero_grad()
        with engine.timers("allreduce_loss"):
            mean = engine.comm.all_reduce(loss.detach().clone(), axis="dp", op="avg").item()
        losses.append(mean)
        # A launcher sanity check each step: the sum of all ranks over the whole world.
        total = engine.comm.all_reduce(torch.tensor([float(engine.rank)], device=engine.device), axis="world").item()
        if total != expected:
            raise SystemExit(f"rank {engine.rank}: all_reduce gave {total}, expected {expected}")
        times = engine.timers.step(step)
        if engine.is_main:
            parts = "  ".join(f"{name} {seconds * 1e3:5.1f} ms" for name, seconds in times.items())
            print(
                f"step {step}: all_reduce over {engine.world_size} ranks = {total:.0f} (ok) "
                f"| loss {mean:.4f} | {parts}",
                flush=True,
            )
    if engine.is_main:
        print(
            f"done: {engine.world_size} ranks, backend {engine.backend}, device {engine.device}, "
            f"{engine.mesh_layout.summary()}, loss {losses[0]:.4f} -> {losses[-1]:.4f}"
        )
    if len(losses) >= 6 and sum(losses[-3:]) >= sum(losses[:3]):
        raise SystemExit(f"rank {engine.rank}: loss did not go down: {losses}")


if __name__ == "__main__":
    main()
