"""Secret masking (pure, stdlib only): the CLI's dry run and launch log, and the node agent's debug log."""

from __future__ import annotations

import re
from collections.abc import Set as AbstractSet

_SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|KEY|CREDENTIAL|AUTH)", re.I)
MASK = "****"


def is_secret_name(name: str) -> bool:
    return bool(_SECRET_NAME.search(name))


def mask_value(name: str, value: str, secrets: AbstractSet[str] = frozenset()) -> str:
    return MASK if is_secret_name(name) or value in secrets else value


def mask(text: str, secrets: AbstractSet[str] = frozenset()) -> str:
    """Replace known secret values, and values of secret-looking NAME=VALUE pairs."""
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        text = text.replace(secret, MASK)
    return re.sub(
        r"(\b[A-Za-z_][A-Za-z0-9_]*=)('[^']*'|\"[^\"]*\"|\S+)",
        lambda m: m.group(1) + MASK if is_secret_name(m.group(1)[:-1]) else m.group(0),
        text,
    )
