"""A rank that trains as the issue's user did: a real ``DataLoader(num_workers=2)`` and a SIGTERM handler that lets
the step finish, saves (``torch.save``) and exits 0. Killing its workers fails it inside the step ("DataLoader
worker (pid N) is killed by signal").

argv: OUT_DIR. Writes OUT_DIR/rank<R>.ready (its pid and its workers') once training runs, and
OUT_DIR/rank<R>.saved (the step) when stopped.
"""

from __future__ import annotations

import os
import signal
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

out = sys.argv[1]
rank = int(os.environ["RANK"])
stop_requested = False


class Slow(Dataset[torch.Tensor]):
    def __len__(self) -> int:
        return 1 << 30

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(0.005)
        return torch.tensor([float(index % 7)])


def _on_term(_signum: int, _frame: object) -> None:
    global stop_requested
    stop_requested = True


signal.signal(signal.SIGTERM, _on_term)
torch.set_num_threads(1)
model = torch.nn.Linear(1, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
batches = iter(DataLoader(Slow(), batch_size=4, num_workers=2))
for step, batch in enumerate(batches):
    if step == 0:
        workers = [w.pid for w in batches._workers]  # type: ignore[attr-defined]
        with open(os.path.join(out, f"rank{rank}.ready"), "w") as f:
            f.write(" ".join(str(p) for p in (os.getpid(), *workers)))
    model(batch).sum().backward()
    optimizer.step()
    optimizer.zero_grad()
    if stop_requested:
        time.sleep(0.2)  # a save takes a while; the workers keep prefetching meanwhile
        tmp = os.path.join(out, f".rank{rank}.pt")
        torch.save({"step": step, "model": model.state_dict()}, tmp)
        os.replace(tmp, os.path.join(out, f"rank{rank}.saved"))
        sys.exit(0)
