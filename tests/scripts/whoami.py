"""Print how this rank was started: forked from the preload zygote or exec'd, and what it was given."""

import os
import sys

with open("/proc/self/cmdline", "rb") as f:
    forked = b"dslaunch.agent.preload.server" in f.read()
stdin = os.readlink("/proc/self/fd/0")
print(
    f"rank={os.environ['RANK']} forked={forked} preloaded={'preload_plain' in sys.modules}"
    f" leader={os.getpgid(0) == os.getpid()} argv={sys.argv[1:]} cwd={os.getcwd()} stdin={stdin}"
    f" main={sys.modules['__main__'].__file__ == os.path.abspath(__file__)} pid={os.getpid()} ppid={os.getppid()}",
    flush=True,
)
printed = os.environ.get("RANK0_PRINTED")  # a file: rank 0 makes it once it printed; the others wait for it
if printed and os.environ["RANK"] == "0":
    open(printed, "w").close()
elif printed:
    import time

    deadline = time.monotonic() + 30
    while not os.path.exists(printed) and time.monotonic() < deadline:
        time.sleep(0.01)
code = int(os.environ.get("EXIT_RANK_" + os.environ["RANK"], "0"))
if code == 99:
    raise RuntimeError(f"rank {os.environ['RANK']} fails")
sys.exit(code)
