"""Two gloo ranks: collectives through dslaunch's comm layer, torch's own loggers and warnings."""

import logging

import torch

import dslaunch

eng = dslaunch.engine()
t = torch.ones(4)
eng.comm.all_reduce(t)
logging.getLogger("torch.distributed").warning("torch-own-logger-warning")
logging.getLogger("torch.distributed").info("torch-own-logger-info")
torch.tensor(torch.tensor(1.0))  # torch itself warns (UserWarning) about copy-constructing a tensor
print("torch-done", float(t[0]), flush=True)
