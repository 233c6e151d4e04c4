"""Mesh option: ``--mesh SPEC`` (or the config's mesh keys), checked against the plan's world size.

The spec reaches every rank as ``DSLAUNCH_MESH``; the rank bootstrap resolves it again
(ranks started by hand or by another launcher get the same checks there).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from dslaunch.cli.help_sections import MESH, Option
from dslaunch.errors import DslaunchError

if TYPE_CHECKING:
    from dslaunch.mesh import MeshSpec
    from dslaunch.plan import NodePlan

# Kept in step with dslaunch.mesh.VALID_INPUT by a test; importing dslaunch.mesh here would slow --help.
VALID_INPUT = "pp, dp_replicate, dp_shard (alias dp), cp, sp, tp, ep, etp"

PARAMS: list[click.Parameter] = [
    Option(
        ["--mesh"],
        section=MESH,
        metavar="SPEC",
        envvar="DSLAUNCH_MESH",
        help=f"Device mesh, e.g. 'pp=2,dp=-1,tp=2'. Dims: {VALID_INPUT}; one may be -1 (the rest of the ranks). "
        "Order outermost first: pp, dp_replicate, dp_shard, cp|sp, tp. [default: the config's mesh, else dp=-1]",
    ),
]


@dataclass(frozen=True)
class MeshChoice:
    spec: MeshSpec
    option: str  # where it came from, for errors: --mesh or --config


def parse(values: Mapping[str, Any], config: Mapping[str, Any]) -> MeshChoice | None:
    """The mesh asked for (None: ranks default to pure data parallel); checked against the world in ``decide``."""
    text = values.get("mesh")
    if text is None and not config:
        return None
    from dslaunch.mesh import MeshConfigError, parse_spec, spec_from_config

    option = "--mesh" if text is not None else "--config"
    try:
        spec = parse_spec(text) if text is not None else spec_from_config(config)
    except MeshConfigError as exc:
        raise DslaunchError(exc.message, option=option) from None
    return None if spec is None else MeshChoice(spec, option)


def check(choice: MeshChoice, nodes: Sequence[NodePlan]) -> list[str]:
    """Resolve the mesh for the plan's world size (errors name the option); the locality warnings."""
    from dslaunch.mesh import MeshConfigError, locality_warnings, resolve

    world = sum(node.nproc for node in nodes)
    try:
        layout = resolve(choice.spec, world)
    except MeshConfigError as exc:
        raise DslaunchError(f"{exc.message} (the plan has {world} ranks)", option=choice.option) from None
    return [f"dslaunch: warning: {w}" for w in locality_warnings(layout, min(node.nproc for node in nodes))]
