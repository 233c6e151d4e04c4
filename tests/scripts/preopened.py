"""A module that opens a file when imported (for ``--preload preopened``): the rank's writes into it must arrive."""

import os

LOG = open(os.path.join(os.environ["OUT_DIR"], f"preopened.{os.getpid()}.txt"), "w", buffering=1 << 20)
