"""Build the torch DeviceMesh for a resolved layout (torch imported inside functions only).

Order matters: group creation is a collective that every rank must run in the same
sequence, so the consistency guard runs first and everything after it follows one
fixed code path (root mesh, then views in ``VIEWS`` order, then the expert view).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dslaunch.bootstrap.mesh_names import check_private, name_views
from dslaunch.mesh import (
    EXPERT_VIEWS,
    ORDER,
    VIEWS,
    MeshConfigError,
    MeshLayout,
    MeshSpec,
    as_spec,
    locality_warnings,
    resolve,
    spec_from_config,
)


def requested_spec(arg: Any = None, env: Mapping[str, str] | None = None) -> tuple[MeshSpec, str]:
    """The spec this rank was asked for and where it came from (argument > env > config > default)."""
    env = os.environ if env is None else env
    if arg is not None:
        return as_spec(arg), "engine(mesh=...)"
    if env.get("DSLAUNCH_MESH"):
        return as_spec(env["DSLAUNCH_MESH"]), "DSLAUNCH_MESH"
    path = env.get("DSLAUNCH_CONFIG")
    if path:
        from dslaunch.inputs.config import ConfigError, load_config

        try:
            spec = spec_from_config(load_config(path))
        except ConfigError as exc:
            raise MeshConfigError(str(exc)) from None
        if spec is not None:
            return spec, f"config {path}"
    return MeshSpec(), "default"


def agree(text: str) -> None:
    """Fail on every rank, naming the difference, if ranks hold different texts.

    One all_gather of a 63-bit digest (on the CPU unless the default group is NCCL only);
    the texts themselves are gathered only when digests differ, on every rank alike.
    """
    import torch
    import torch.distributed as dist

    # A default group made by user code may be NCCL only: then the digest must live on the GPU.
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    digest = torch.tensor([int(hashlib.sha1(text.encode()).hexdigest()[:15], 16)], dtype=torch.int64, device=device)
    gathered = torch.empty(dist.get_world_size(), dtype=torch.int64, device=device)
    (getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor)(gathered, digest)
    odd = [r for r, d in enumerate(gathered.tolist()) if d != gathered[0].item()]
    if not odd:
        return
    texts: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(texts, text)
    raise MeshConfigError(
        f"mesh: ranks disagree on the mesh spec: rank 0 has {texts[0]!r} but rank {odd[0]} has "
        f"{texts[odd[0]]!r} ({len(odd)} rank(s) differ from rank 0: {odd[:8]}); "
        "give every rank the same --mesh / DSLAUNCH_MESH / config"
    )


@dataclass
class BuiltMesh:
    """The root DeviceMesh plus a 1-D mesh for every dim or view larger than 1."""

    layout: MeshLayout
    rank: int
    root: Any  # torch DeviceMesh over layout.active
    meshes: dict[str, Any]  # name -> 1-D DeviceMesh
    requested: str = ""  # the spec text asked for, before -1 was filled
    embedding: Any = None  # with pp > 2: this rank's [first, last] stage group, if it is in one
    _singleton: Any = field(default=None, repr=False)
    _ranks: dict[str, list[int]] = field(default_factory=dict, repr=False)

    def size(self, name: str) -> int:
        return self.layout.size(name)

    def submesh(self, name: str) -> Any | None:
        self.layout.size(name)  # validates the name
        return self.meshes.get(name)

    def group(self, name: str) -> Any:
        """Process group of a dim or view; size-1 names share one lazily made singleton group."""
        import torch.distributed as dist

        if name == "world":
            return dist.group.WORLD
        if name in self.meshes:
            return self.meshes[name].get_group()
        if self.layout.size(name) != 1:
            raise MeshConfigError(f"mesh: {name} has no process group on this mesh")
        return self._single()

    def _single(self) -> Any:
        import torch.distributed as dist

        if self.layout.world_size == 1:
            return dist.group.WORLD
        if self._singleton is None:
            # Only this rank takes part: no world-wide barrier, no W groups per size-1 dim.
            self._singleton = dist.new_group([self.rank], use_local_synchronization=True)
        return self._singleton

    def embedding_group(self) -> Any | None:
        """Megatron's embedding group: the first and last stage of this rank's pp group; None elsewhere."""
        stages = self.ranks("pp")
        if self.rank not in (stages[0], stages[-1]):
            return None
        return self.group("pp") if len(stages) <= 2 else self.embedding

    def position_embedding_group(self) -> Any | None:
        """Megatron's position-embedding group: the first stage alone; None on the other stages."""
        return self._single() if self.rank == self.ranks("pp")[0] else None

    def own_groups(self) -> list[Any]:
        """The live process groups this mesh created (not WORLD), each once."""
        import torch.distributed as dist

        found = [mesh.get_group() for mesh in self.meshes.values()]
        found += [g for g in (self.embedding, self._singleton) if g is not None]
        live = dist.distributed_c10d._world.pg_map
        unique = {id(g): g for g in found if g is not dist.group.WORLD and g in live}
        return list(unique.values())

    def ranks(self, name: str) -> list[int]:
        """Global ranks of this rank's group of a dim or view, in group-rank order (cached)."""
        found = self._ranks.get(name)
        if found is None:
            found = self._ranks[name] = self.layout.group_of(name, self.rank)
        return list(found)

    def coordinate(self) -> dict[str, int]:
        return {n: self.layout.local_rank(n, self.rank) for n in (*ORDER, *VIEWS, *EXPERT_VIEWS)}


def check_torch(layout: MeshLayout) -> None:
    """Views need DeviceMesh._flatten (torch >= 2.5); two or more expert dims > 1 need _unflatten (>= 2.10); the
    names on the root need the private members of mesh_names (checked on a mesh made from WORLD: no new group).
    """
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh

    dense = [n for n in ("dp_shard", "cp", "sp", "tp") if getattr(layout, n) > 1]
    expert = layout.expert_dims()
    needs = []
    if layout.built_views() or (expert and len(dense) > 1):
        needs.append(("_flatten", "2.5", f"views {', '.join(layout.built_views()) or expert[0]}"))
    if len(expert) > 1:
        shape = " ".join(f"{n}={layout.size(n)}" for n in expert)
        needs.append(("_unflatten", "2.10", f"the expert dims {shape}"))
    for attr, version, why in needs:
        if not hasattr(DeviceMesh, attr):
            raise MeshConfigError(
                f"mesh: {layout.summary()} needs torch >= {version} for {why} "
                f"(DeviceMesh.{attr}); this is torch {torch.__version__}"
            )
    world = dist.group.WORLD  # not None: the default group exists before the mesh
    check_private(DeviceMesh, DeviceMesh.from_group(world, "cpu"), torch.__version__)  # type: ignore[arg-type]


def build(layout: MeshLayout, device_type: str, rank: int) -> BuiltMesh:
    from torch.distributed.device_mesh import init_device_mesh

    active = layout.active or ("dp_shard",)
    shape = tuple(layout.size(n) for n in active)
    root = init_device_mesh(device_type, shape, mesh_dim_names=active)
    meshes: dict[str, Any] = {n: root[n] for n in active}
    by_members: dict[tuple[str, ...], Any] = {(n,): meshes[n] for n in active}
    for view, on in layout.view_sources().items():
        if on not in by_members:
            by_members[on] = root[on]._flatten(view)
        meshes[view] = by_members[on]
    meshes.update(_expert(layout, root, by_members))
    # One rank: its data-parallel views are the root's one dim, by name too (submesh() still answers None).
    one_rank = {v: root for v, m in VIEWS.items() if "dp_shard" in m} if layout.world_size == 1 else {}
    name_views(root, {**one_rank, **meshes})
    return BuiltMesh(layout=layout, rank=rank, root=root, meshes=meshes, embedding=_embedding(layout, rank))


def _embedding(layout: MeshLayout, rank: int) -> Any:
    """With pp > 2 the first and last stages need a group of their own (pp <= 2: the pp group itself)."""
    import torch.distributed as dist

    mine = None
    for stages in layout.groups("pp") if layout.pp > 2 else []:
        group = dist.new_group([stages[0], stages[-1]])
        if rank in (stages[0], stages[-1]):
            mine = group
    return mine


def _expert(layout: MeshLayout, root: Any, by_members: dict[tuple[str, ...], Any]) -> dict[str, Any]:
    """Reshape the dense region (dp_shard, cp|sp, tp) into (efsdp, ep, etp), etp innermost; emp = (ep, etp)."""
    dense = tuple(n for n in ("dp_shard", "cp", "sp", "tp") if n in layout.active)
    expert = layout.expert_dims()
    if layout.ep == 1 and layout.etp == layout.tp:
        # The default without MoE: reuse tp, and dp_shard*cp*sp (a view or a flatten) for efsdp.
        rest = tuple(n for n in dense if n != "tp")
        out = {"etp": by_members[("tp",)], "emp": by_members[("tp",)]} if layout.tp > 1 else {}
        if rest:
            out["efsdp"] = by_members[rest] if rest in by_members else root[rest]._flatten("efsdp")
        return out
    if not expert:
        return {}
    base = by_members[dense] if dense in by_members else root[dense]._flatten("_dense")
    if len(expert) == 1:
        return {expert[0]: base, **({"emp": base} if expert[0] != "efsdp" else {})}
    sparse = base._unflatten(0, tuple(layout.size(n) for n in expert), expert)
    out = {n: sparse[n] for n in expert}
    if layout.ep > 1 and layout.etp > 1:
        out["emp"] = base if len(expert) == 2 else sparse[("ep", "etp")]._flatten("emp")
    elif "efsdp" in expert:
        out["emp"] = out[expert[1]]  # the one of ep, etp that is > 1
    return out


# Set when group creation failed part-way: a retry would create groups in a different order than
# ranks that never failed (or hang), so later attempts fail at once instead.
_failed: str | None = None


def bootstrap(arg: Any, local_world_size: int, device_type: str) -> BuiltMesh:
    """Resolve, agree across ranks, then build; every rank raises the same MeshConfigError on a bad spec.

    The spec is resolved before the guard but any error is raised only after it, so a
    rank with a different (or broken) spec cannot leave the others waiting in a collective.
    """
    import torch
    import torch.distributed as dist

    from dslaunch.logs import get_logger

    global _failed
    if _failed is not None:
        raise MeshConfigError(
            f"mesh: an earlier mesh build in this process failed ({_failed}); its process groups "
            "may be half made, so ranks cannot safely try again: restart the job"
        )
    rank, world = dist.get_rank(), dist.get_world_size()
    error: MeshConfigError | None = None
    try:
        spec, source = requested_spec(arg)
        layout = resolve(spec, world)
        check_torch(layout)
        text = f"{spec.text()} (torch {torch.__version__})"
    except MeshConfigError as exc:
        error, text, source = exc, f"<invalid: {exc}>", ""
    if world > 1:
        agree(text)
    if error is not None:
        raise error
    log = get_logger("mesh")
    if rank == 0:
        for warning in locality_warnings(layout, local_world_size):
            log.warning(warning)
    try:
        built = build(layout, device_type, rank)
    except BaseException as exc:
        _failed = f"{type(exc).__name__}: {exc}"
        raise
    built.requested = spec.text()
    if rank == 0:
        log.info(f"{layout.summary()} | new groups={layout.new_group_count()} | from {source}")
    return built
