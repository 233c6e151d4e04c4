"""Mesh option: ``--mesh SPEC`` (or the config's mesh keys), checked against the plan's world size.

The spec reaches every rank as ``DSLAUNCH_MESH``; the rank bootstrap resolves it again
(ranks started by hand or by another launcher get the same checks there).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from dslaunch.cli.draft import PlanDraft

if TYPE_CHECKING:
    from dslaunch.mesh import MeshSpec

# Kept in step with dslaunch.mesh.VALID_INPUT by a test; importing dslaunch.mesh here would slow --help.
VALID_INPUT = "pp, dp_replicate, dp_shard (alias dp), cp, sp, tp, ep"

PARAMS: list[click.Parameter] = [
    click.Option(
        ["--mesh"],
        metavar="SPEC",
        envvar="DSLAUNCH_MESH",
        help=f"Device mesh, e.g. 'pp=2,dp=-1,tp=2'. Dims: {VALID_INPUT}; one may be -1 (the rest of the ranks). "
        "Order outermost first: pp, dp_replicate, dp_shard, cp|sp, tp. [default: the config's mesh, else dp=-1]",
    ),
]


def contribute(values: dict[str, Any], draft: PlanDraft) -> None:
    text = values.get("mesh")
    if text is None and not draft.config:
        return  # nothing to check: ranks default to pure data parallel
    from dslaunch.mesh import MeshConfigError, locality_warnings, parse_spec, resolve, spec_from_config

    spec: MeshSpec | None
    try:
        if text is not None:
            spec, hint = parse_spec(text), "'--mesh'"
        else:
            spec, hint = spec_from_config(draft.config), "'--config'"
    except MeshConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="'--mesh'" if text is not None else "'--config'") from None
    if spec is None:
        return
    world = sum(node.nproc for node in draft.nodes)
    if world:
        try:
            layout = resolve(spec, world)
        except MeshConfigError as exc:
            raise click.BadParameter(f"{exc} (the plan has {world} ranks)", param_hint=hint) from None
        per_node = min(node.nproc for node in draft.nodes)
        for warning in locality_warnings(layout, per_node):
            click.echo(f"dslaunch: warning: {warning}", err=True)
    draft.env["DSLAUNCH_MESH"] = spec.text()
