"""Every rank writes its pid, starts a grandchild, and sleeps; IGNORE_TERM=1 makes it ignore SIGTERM."""

import os
import signal
import subprocess
import sys
import time

if os.environ.get("IGNORE_TERM") == "1":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
with open(os.path.join(os.environ["OUT_DIR"], f"rank{os.environ['RANK']}.pid"), "w") as f:
    f.write(f"{os.getpid()} {child.pid}")
print("ready", flush=True)
time.sleep(120)
