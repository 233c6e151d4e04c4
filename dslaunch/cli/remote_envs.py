"""Which environment variables reach remote ranks: prefixes, ``--export`` and env files (pure)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from dslaunch.errors import DslaunchError

# DeepSpeed's EXPORT_ENVS + the CUDA accelerator's NCCL, plus what users keep asking for.
EXPORT_PREFIXES: tuple[str, ...] = (
    "DSLAUNCH_",
    "NCCL",
    "PYTHON",
    "UCX",
    "MV2",
    "MLFLOW",
    "WANDB",
    "HF_",
    "HUGGING",
    "TORCH",
    "CUDA",
    "OMP_",
    "GLOO",
    "FI_",
    "TRANSFORMERS",
)
# Launcher-local facts that must not overwrite the remote node's own.
NEVER_EXPORTED = frozenset(
    {
        "CUDA_VISIBLE_DEVICES",
        "DSLAUNCH_RUN_ID",
        "DSLAUNCH_ERROR_FILE",
        "DSLAUNCH_HOST",
        "PYTHONHOME",
        "PYTHONEXECUTABLE",
    }
)
DEFAULT_ENV_FILE = ".deepspeed_env"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class EnvError(DslaunchError):
    """A bad ``--export`` value or env-file line; the message says what is valid."""


@dataclass(frozen=True)
class Export:
    name: str
    value: str


def prefixed_exports(environ: Mapping[str, str], prefixes: Iterable[str] = EXPORT_PREFIXES) -> dict[str, str]:
    prefixes = tuple(prefixes)
    return {k: v for k, v in environ.items() if k.startswith(prefixes) and k not in NEVER_EXPORTED}


def parse_export(spec: str, environ: Mapping[str, str]) -> Export:
    """``NAME=VALUE``, or ``NAME`` to send the launcher's current value."""
    name, sep, value = spec.partition("=")
    if not _NAME.match(name):
        shown = repr(name) if sep else repr(spec)  # never the value: it may be a secret
        raise EnvError(
            f"{shown} is not a variable name (letters, digits, '_', not starting with a digit): use NAME or NAME=VALUE"
        )
    if not sep:
        if name not in environ:
            raise EnvError(f"{name} is not set in the launcher's environment; give a value with {name}=VALUE")
        value = environ[name]
    return Export(name, value)


def _unquote(raw: str, where: str) -> str:
    raw = raw.strip()
    if not raw:
        return ""
    quote = raw[0]
    if quote in "'\"":
        end = _closing_quote(raw, quote)
        if end < 0:
            raise EnvError(f"{where}: unterminated {quote} quote")
        tail = raw[end + 1 :].strip()
        if tail and not tail.startswith("#"):
            raise EnvError(f"{where}: unexpected text after the quoted value (not shown: it may be a secret)")
        body = raw[1:end]
        if quote == "'":
            return body
        return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), body)
    # Unquoted: an inline comment needs whitespace before '#', as in shells and python-dotenv.
    return re.split(r"\s+#", raw, maxsplit=1)[0].strip()


def _closing_quote(raw: str, quote: str) -> int:
    i = 1
    while i < len(raw):
        if quote == '"' and raw[i] == "\\":
            i += 2
            continue
        if raw[i] == quote:
            return i
        i += 1
    return -1


def parse_env_file(text: str, path: str = "<env file>") -> dict[str, str]:
    """``[export] NAME=VALUE`` lines; blank lines and ``#`` comments skipped; quoted values unquoted."""
    result: dict[str, str] = {}
    for lineno, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        where = f"{path}:{lineno}"
        if stripped.startswith("export ") or stripped.startswith("export\t"):
            stripped = stripped[len("export") :].lstrip()
        name, sep, value = stripped.partition("=")
        name = name.strip()
        if not sep or not _NAME.match(name):
            shown = f"name {name!r}" if sep else "a line without '='"  # never the value: it may be a secret
            raise EnvError(f"{where}: expected NAME=VALUE, got {shown}")
        result[name] = _unquote(value, where)
    return result


def env_file_paths(environ: Mapping[str, str], home: str, cwd: str) -> list[str]:
    """DeepSpeed's lookup: ``DS_ENV_FILE`` (default .deepspeed_env) in ~ then '.', the later overriding."""
    name = environ.get("DS_ENV_FILE", DEFAULT_ENV_FILE)
    if os.path.isabs(name):
        return [name]
    seen: list[str] = []
    for folder in (home, cwd):
        path = os.path.normpath(os.path.join(folder, name))
        if path not in seen:
            seen.append(path)
    return seen
