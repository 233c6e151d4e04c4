"""The dslaunch CLI, writing its peak resident memory (VmHWM, kB) to $PEAK_FILE when it exits."""

import atexit
import os
import sys


def _write_peak() -> None:
    with open("/proc/self/status") as f:
        peak = next(line.split()[1] for line in f if line.startswith("VmHWM:"))
    with open(os.environ["PEAK_FILE"], "w") as f:
        f.write(peak)


atexit.register(_write_peak)
sys.argv[0] = "dslaunch"
from dslaunch.cli import main  # noqa: E402

main()
