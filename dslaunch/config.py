"""DeepSpeed-style JSON config: read once, keys picked by the areas that own them."""

from __future__ import annotations

import json
from typing import Any


class ConfigError(ValueError):
    pass


def load_config(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as exc:
        raise ConfigError(f"cannot read config {path!r}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"config {path!r} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(f"config {path!r} must hold a JSON object, not {type(data).__name__}")
    return data
