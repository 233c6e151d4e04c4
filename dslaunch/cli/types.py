"""Number option types that read ASCII digits only and refuse nan, inf and values past a cap.

click's INT and FLOAT call ``int``/``float``, which accept '٢', '1_000', 'nan' and 'inf'.
"""

from __future__ import annotations

import math
import re
from typing import Any

import click

from dslaunch.limits import MAX_SLOTS_PER_HOST, MAX_WORLD_SIZE, ascii_int

_WHOLE = re.compile(r"-?[0-9]+")
_DECIMAL = re.compile(r"[0-9]+(?:\.[0-9]*)?|\.[0-9]+")


def _range(low: float | None, high: float | None) -> str:
    if high is None:
        return f"x>={low}"
    return f"{low}<=x<={high}"


class Whole(click.ParamType):  # type: ignore[type-arg]  # generic only from click 8.5
    """A whole number in ``[low, high]``."""

    name = "integer"

    def __init__(self, low: int, high: int | None = None) -> None:
        self.low, self.high = low, high

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        else:
            text = str(value).strip()
            if not _WHOLE.fullmatch(text):
                self.fail(f"{value!r} is not a whole number (digits 0-9)", param, ctx)
            number = int(text)
        if number < self.low or (self.high is not None and number > self.high):
            self.fail(f"{number} is not in the range {_range(self.low, self.high)}.", param, ctx)
        return number


class Seconds(click.ParamType):  # type: ignore[type-arg]
    """A finite number of seconds in ``[low, high]``."""

    name = "seconds"

    def __init__(self, low: float, high: float) -> None:
        self.low, self.high = low, high

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            seconds = float(value)
        else:
            text = str(value).strip()
            if not _DECIMAL.fullmatch(text):
                self.fail(f"{value!r} is not a number of seconds, e.g. 5 or 0.5", param, ctx)
            seconds = float(text)
        if not math.isfinite(seconds) or not self.low <= seconds <= self.high:
            self.fail(f"{value} is not in the range {_range(self.low, self.high)}.", param, ctx)
        return seconds


WORDS = ("gpu", "cpu", "auto")


class NprocType(click.ParamType):  # type: ignore[type-arg]
    """Ranks per node: a positive whole number, ``gpu`` (one per visible GPU), ``cpu`` (one per usable CPU)
    or ``auto`` (GPUs if any, else CPUs), as torchrun spells them."""

    name = "N|gpu|cpu|auto"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int | str:
        if isinstance(value, int) or value in WORDS:
            return value  # type: ignore[no-any-return]
        text = str(value).strip().lower()
        if text in WORDS:
            return text
        number = ascii_int(text)
        if number is None or number < 1:
            self.fail(f"{value!r} is not a positive whole number, gpu, cpu or auto", param, ctx)
        if number > MAX_SLOTS_PER_HOST:
            self.fail(f"{number} is more than {MAX_SLOTS_PER_HOST} ranks on one node", param, ctx)
        return number


def pet(name: str, torchrun: str | None = None) -> list[str]:
    """An option's environment variables: ``DSLAUNCH_<NAME>``, then torchrun's ``PET_<NAME>`` (how Kubernetes
    operators configure one launcher per pod); the command line wins over both."""
    return [f"DSLAUNCH_{name.upper()}", f"PET_{(torchrun or name).upper()}"]


class NodesType(click.ParamType):  # type: ignore[type-arg]
    """torchrun's ``--nnodes``: ``N`` or ``MIN:MAX``, as ``(MIN, MAX)`` (``N`` is ``(N, N)``)."""

    name = "N|MIN:MAX"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> tuple[int, int]:
        if isinstance(value, tuple):
            return value
        if isinstance(value, int):
            return value, value
        low, sep, high = str(value).strip().partition(":")
        first, last = ascii_int(low), ascii_int(high) if sep else ascii_int(low)
        if first is None or last is None or first < 1:
            self.fail(f"{value!r} is not a node count: give N or MIN:MAX, whole numbers from 1", param, ctx)
        if first > last:
            self.fail(f"{value!r}: MIN is above MAX: give MIN:MAX with MIN <= MAX, e.g. {last}:{first}", param, ctx)
        if last > MAX_WORLD_SIZE:
            self.fail(f"{last} is more than {MAX_WORLD_SIZE} nodes", param, ctx)
        return first, last
