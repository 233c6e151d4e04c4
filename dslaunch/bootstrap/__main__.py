"""``python -u -m dslaunch.bootstrap [-m] TARGET [ARGS...]``: what every exec'd rank runs (bootstrap/run.py)."""

from __future__ import annotations

import sys

from dslaunch.bootstrap.run import main

if __name__ == "__main__":
    main(sys.argv[1:])
