"""A DeepSpeed-style script: parses --local_rank, joins gloo from the env, all-reduces its rank."""

import argparse
import datetime

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, default=-1)
args = parser.parse_args()
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
t = torch.tensor([float(dist.get_rank())])
dist.all_reduce(t)
print(f"SUM {dist.get_rank()} {args.local_rank} {int(t.item())}", flush=True)
dist.destroy_process_group()
