"""A rank for bench/bench_pods_standby.py: ``pod_standby_rank.py DIR``. Joins gloo from the env (env://, the
MASTER_ADDR/PORT dslaunch sets); on attempt 0 writes DIR/ready.RANK (its pid and pod) and sleeps (a pod is deleted
meanwhile); on a later attempt writes DIR/past.RANK right after init_process_group returns and exits 0.

past.RANK: the wall clock then, whether torch was imported before this script ran (a rank forked from a warm
zygote), WORLD_SIZE, the pod it ran on (BENCH_POD, set per pod by the benchmark), its pid, the wall clock at
the script's first line, and the seconds its imports took.
"""

import os
import sys
import time

warm = "torch" in sys.modules  # before any import of ours: True only in a rank forked from a preloaded process
began = time.time()
from datetime import timedelta  # noqa: E402

import torch.distributed as dist  # noqa: E402

imported = time.time() - began
folder = sys.argv[1]
rank = os.environ["RANK"]
dist.init_process_group("gloo", timeout=timedelta(seconds=30))
past = time.time()
pod = os.environ.get("BENCH_POD")


def write(name: str, line: str) -> None:
    with open(os.path.join(folder, f"{name}.tmp"), "w") as f:
        f.write(line)
    os.rename(os.path.join(folder, f"{name}.tmp"), os.path.join(folder, name))  # whole, or not there


if os.environ["TORCHELASTIC_RESTART_COUNT"] == "0":
    write(f"ready.{rank}", f"{os.getpid()} {pod}")
    time.sleep(300)
else:
    write(f"past.{rank}", f"{past!r} {warm} {os.environ['WORLD_SIZE']} {pod} {os.getpid()} {began!r} {imported:.3f}")
    dist.destroy_process_group()
