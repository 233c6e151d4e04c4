"""Parent-death signal and child subreaper (dslaunch/oslib/prctl.py), seen through real processes' /proc."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.launch

SUBREAPER = """
import os, sys, time
from dslaunch.oslib import prctl
assert prctl.set_child_subreaper()
r, w = os.pipe()
if os.fork() == 0:  # a child that forks a grandchild and exits at once: the grandchild is orphaned
    if os.fork() == 0:
        time.sleep(0.3)
        os.write(w, str(os.getppid()).encode())
        os._exit(0)
    os._exit(0)
os.wait()
print(os.read(r, 32).decode() == str(os.getpid()))
time.sleep(0.2)
"""

DEATH_SIGNAL = """
import os, signal, sys, time
from dslaunch.oslib import prctl
r, w = os.pipe()
middle = os.fork()
if middle == 0:
    if os.fork() == 0:
        prctl.set_parent_death_signal(signal.SIGKILL)
        os.write(w, str(os.getpid()).encode())
        time.sleep(30)
        os._exit(0)
    time.sleep(30)
    os._exit(0)
orphan = int(os.read(r, 32))
os.kill(middle, signal.SIGKILL)
os.waitpid(middle, 0)
for _ in range(200):
    try:
        os.kill(orphan, 0)
    except ProcessLookupError:
        print("gone")
        break
    with open(f"/proc/{orphan}/stat") as f:
        if f.read().rsplit(")", 1)[1].split()[0] == "Z":
            print("gone")
            break
    time.sleep(0.02)
else:
    os.kill(orphan, signal.SIGKILL)
    print("alive")
"""


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_an_orphaned_grandchild_is_adopted_by_the_subreaper() -> None:
    assert _run(SUBREAPER) == "True"


def test_a_child_dies_with_its_parent_when_it_asked_for_the_signal() -> None:
    assert _run(DEATH_SIGNAL) == "gone"
