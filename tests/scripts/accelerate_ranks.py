"""Hugging Face accelerate on CPU: each rank prints what Accelerator(cpu=True) sees."""

import torch
from accelerate import Accelerator

acc = Accelerator(cpu=True)
total = acc.reduce(torch.tensor(acc.process_index), reduction="sum")
print(f"ACCELERATE rank={acc.process_index} local={acc.local_process_index} world={acc.num_processes} sum={int(total)}")
