"""A DeepSpeed-style script: its own --local_rank, and everything after the known options collected with
argparse REMAINDER (so --local_rank is parsed only when it comes before the other arguments)."""

import argparse

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, default=-1)
parser.add_argument("rest", nargs=argparse.REMAINDER)
args = parser.parse_args()
print(f"REMAINDER local_rank={args.local_rank} rest={args.rest}", flush=True)
