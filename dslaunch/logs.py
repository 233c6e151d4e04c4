"""The dslaunch logger tree (``dslaunch.<module>``).

Placeholder on the standard library until the unified structlog pipeline lands;
``get_logger`` is the stable entry point either way.
"""

from __future__ import annotations

import logging


def get_logger(module: str) -> logging.Logger:
    return logging.getLogger(f"dslaunch.{module}")
