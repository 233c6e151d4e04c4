"""Write FLOOD_MB MiB of numbered 100-byte lines to stdout, 1 MiB per write."""

import os
import sys

mb = int(os.environ.get("FLOOD_MB", "100"))
rank = int(os.environ.get("RANK", "0"))
out = sys.stdout.buffer
for block in range(mb):
    out.write(b"".join(b"%d %09d %s\n" % (rank, block * 10485 + i, b"x" * 86) for i in range(10485)))
out.flush()
