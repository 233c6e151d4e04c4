"""A module that initialises CUDA when it is imported, as some libraries do: a zygote that preloaded it must not
fork ranks (docs/preload.md), whichever of its checks trips first (the runtime's threads, torch.cuda, /dev/nvidia*)."""

import torch

torch.cuda.init()
