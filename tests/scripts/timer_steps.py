"""Three timers.step() calls, no torch: the first one is a phase of the launch timeline."""

from dslaunch.bootstrap.timers import Timers

timers = Timers()
for _ in range(3):
    with timers("work"):
        pass
    timers.step()
print("steps-done", flush=True)
