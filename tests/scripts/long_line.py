"""Write LONG_MB MiB on one line without a newline, 1 MiB per write, each MiB its own digits."""

import os
import sys

mb = int(os.environ.get("LONG_MB", "20"))
for block in range(mb):
    sys.stdout.buffer.write(b"%08d" % block * 131072)
sys.stdout.buffer.flush()
