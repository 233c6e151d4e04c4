"""Mesh spec: parse, resolve against the world size, validate, and lay out ranks (pure, no torch).

Ranks are laid out row-major over ``ORDER`` (outermost first, ``tp`` fastest), the
convention of DeviceMesh, torchtitan, Megatron (order string reversed) and DeepSpeed's
``ProcessTopology(['pipe','data','model'])``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from dslaunch.errors import DslaunchError
from dslaunch.limits import ascii_int

# World-size factors, outermost first. cp and sp share a slot: at most one may be > 1.
ORDER: tuple[str, ...] = ("pp", "dp_replicate", "dp_shard", "cp", "sp", "tp")
DIMS: tuple[str, ...] = (*ORDER, "ep", "etp")
ALIASES: Mapping[str, str] = {"dp": "dp_shard"}
# Flattened views, pre-built where two or more members are > 1 (else aliased or size 1).
VIEWS: Mapping[str, tuple[str, ...]] = {
    "dp": ("dp_replicate", "dp_shard"),
    "dp_cp": ("dp_replicate", "dp_shard", "cp"),
    "dp_sp": ("dp_replicate", "dp_shard", "sp"),
    "dp_shard_cp": ("dp_shard", "cp"),
    "mp": ("pp", "tp"),
    # Megatron's tensor-and-data-parallel groups (tp-dp, and tp-dp-cp with the sequence slot).
    "tp_dp": ("dp_replicate", "dp_shard", "tp"),
    "tp_dp_cp": ("dp_replicate", "dp_shard", "cp", "sp", "tp"),
    # torchtitan's names: batch = dp; loss = dp with the sequence slot (cp or sp, at most one is > 1).
    "batch": ("dp_replicate", "dp_shard"),
    "loss": ("dp_replicate", "dp_shard", "cp", "sp"),
}
# Expert views: dense region dp_shard*cp*sp*tp reshaped to (efsdp, ep, etp), etp innermost, as
# megatron-core's expert RankGenerator lays out one pipeline stage; emp is ep*etp.
EXPERT_VIEWS: tuple[str, ...] = ("ep", "etp", "emp", "efsdp")
EXPERT_DIMS: tuple[str, ...] = ("efsdp", "ep", "etp")
DENSE: tuple[str, ...] = ("dp_shard", "cp", "sp", "tp")
NAMES: tuple[str, ...] = (*ORDER, *VIEWS, *EXPERT_VIEWS, "world")
VALID_INPUT = "pp, dp_replicate, dp_shard (alias dp), cp, sp, tp, ep, etp"


class MeshConfigError(DslaunchError):
    """A mesh spec that cannot describe this job; raised before any process group is made."""


# APIs that already warned about dim= in this process (axis_alias warns once per API, not per call).
_DIM_WARNED: set[str] = set()


def axis_alias(axis: str | None, dim: str | None, *, api: str, call: str, stacklevel: int = 3) -> str | None:
    """The mesh axis from ``axis=`` or its deprecated alias ``dim=`` (None when neither is given).

    ``dim=`` still works but warns once per process for each ``api`` with a DeprecationWarning
    (attributed ``stacklevel`` frames up: the user's call when the helper is called from the API
    function itself); giving both is a TypeError. ``call`` names the function in the messages.
    docs/mesh.md, "Axis keyword: why `axis=`".
    """
    if dim is None:
        return axis
    if axis is not None:
        raise TypeError(f"{call}() got both axis={axis!r} and dim={dim!r}; dim= is the deprecated alias of axis=")
    if api not in _DIM_WARNED:
        warnings.warn(
            f"{call}(dim=...) is deprecated, use axis={dim!r}: dim= names a mesh axis here, but in torch "
            "dim means a tensor dimension (this warning is shown once per process)",
            DeprecationWarning,
            stacklevel=stacklevel,
        )
        _DIM_WARNED.add(api)
    return dim


@dataclass(frozen=True)
class MeshSpec:
    """Requested sizes; ``-1`` means "the ranks left over". Unresolved."""

    pp: int = 1
    dp_replicate: int = 1
    dp_shard: int = -1
    cp: int = 1
    sp: int = 1
    tp: int = 1
    ep: int = 1
    etp: int | None = None  # expert tensor parallel; None is Megatron's default, = tp

    def text(self) -> str:
        """Canonical, order-independent text (dp_shard, every size that is not 1, etp when given)."""
        return ",".join(
            f"{f.name}={getattr(self, f.name)}"
            for f in fields(self)
            if f.name == "dp_shard" or (getattr(self, f.name) != 1 if f.name != "etp" else self.etp is not None)
        )


def _int_value(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise MeshConfigError(f"mesh: {name} must be a whole number or -1 (got {value!r})")
    if isinstance(value, str):
        text = value.strip()
        magnitude = ascii_int(text.removeprefix("-"))
        number = None if magnitude is None else -magnitude if text.startswith("-") else magnitude
        if number is None:
            raise MeshConfigError(f"mesh: {name}={value!r} is not a whole number; use e.g. {name}=2 or {name}=-1")
        return number
    return value


def spec_from_mapping(values: Mapping[str, Any]) -> MeshSpec:
    """Build a spec from ``{dim: size}``; ``dp`` is ``dp_replicate * dp_shard``."""
    sizes: dict[str, int] = {}
    for raw_name, raw in values.items():
        name = str(raw_name).strip()
        if name not in DIMS and name not in ALIASES:
            raise MeshConfigError(f"mesh: unknown dim {name!r}; valid dims: {VALID_INPUT}")
        sizes[name] = _int_value(name, raw)
    if "dp" in sizes:
        if "dp_shard" in sizes:
            raise MeshConfigError("mesh: give dp or dp_shard, not both (dp is dp_replicate * dp_shard)")
        dp, rep = sizes.pop("dp"), sizes.get("dp_replicate", 1)
        if dp > 0 and rep > 0 and dp % rep:
            raise MeshConfigError(f"mesh: dp({dp}) is not divisible by dp_replicate({rep})")
        sizes["dp_shard"] = dp // rep if dp > 0 and rep > 0 else dp
    if "dp_shard" not in sizes and -1 in sizes.values():
        sizes["dp_shard"] = 1  # dp_shard fills the rest only when no other dim was asked to
    return MeshSpec(**sizes)


def parse_spec(text: str) -> MeshSpec:
    """Parse ``"pp=2,dp=-1,tp=2"``. An empty text is the default (pure data parallel)."""
    values: dict[str, str] = {}
    for raw in text.replace(";", ",").split(","):
        part = raw.strip()
        if not part:
            continue
        name, sep, value = part.partition("=")
        name = name.strip()
        if not sep:
            raise MeshConfigError(f"mesh: {part!r} needs a size, like {name}=2; valid dims: {VALID_INPUT}")
        if name in values:
            raise MeshConfigError(f"mesh: {name} is given twice in {text!r}")
        values[name] = value
    return spec_from_mapping(values)


def as_spec(value: MeshSpec | Mapping[str, Any] | str | None) -> MeshSpec:
    if value is None:
        return MeshSpec()
    if isinstance(value, MeshSpec):
        return value
    if isinstance(value, str):
        return parse_spec(value)
    if isinstance(value, Mapping):
        return spec_from_mapping(value)
    raise MeshConfigError(f"mesh must be a spec string, a mapping or a MeshSpec, not {type(value).__name__}")


def spec_from_config(config: Mapping[str, Any]) -> MeshSpec | None:
    """The mesh a DeepSpeed-style config asks for, or None if it says nothing about it.

    A ``mesh`` section wins; otherwise DeepSpeed's ``mesh_param`` (dp, sp),
    ``data_parallel_size``, ``sequence_parallel_size`` and ``tensor_parallel.autotp_size``.
    """
    if "mesh" in config:
        mesh = config["mesh"]
        if not isinstance(mesh, (str, Mapping)):
            raise MeshConfigError(f"config 'mesh' must be an object like {{\"tp\": 2}} or a string, not {mesh!r}")
        return as_spec(mesh)
    values: dict[str, Any] = {}
    if config.get("mesh_param") is not None:
        param = config["mesh_param"]
        if not isinstance(param, (list, tuple)) or len(param) != 2:
            raise MeshConfigError(f"config 'mesh_param' must be [data_parallel, sequence_parallel], not {param!r}")
        values["dp"], values["sp"] = param
    if "data_parallel_size" in config:
        values.setdefault("dp", config["data_parallel_size"])
    if "sequence_parallel_size" in config:
        values.setdefault("sp", config["sequence_parallel_size"])
    tp = config.get("tensor_parallel")
    if isinstance(tp, Mapping) and "autotp_size" in tp:
        values["tp"] = tp["autotp_size"]
    return spec_from_mapping(values) if values else None


def _label(name: str, sizes: Mapping[str, int]) -> str:
    # With no replication dp_shard is the whole of dp: show the name users typed.
    return "dp" if name == "dp_shard" and sizes.get("dp_replicate", 1) == 1 else name


def _factors(names: tuple[str, ...], sizes: Mapping[str, int]) -> str:
    shown = [f"{_label(n, sizes)}({sizes[n]})" for n in names if sizes[n] != 1]
    return " * ".join(shown) if shown else "1"


def resolve(spec: MeshSpec, world_size: int) -> MeshLayout:
    """Fill the ``-1``, check every rule, and return the layout; raises MeshConfigError."""
    sizes: dict[str, int] = {f.name: getattr(spec, f.name) for f in fields(spec) if f.name != "etp"}
    sizes["etp"] = 1 if spec.etp is None else spec.etp  # checked here, replaced by tp below when not given
    for name, size in sizes.items():
        if size < 1 and not (size == -1 and name not in ("ep", "etp")):
            allowed = "a positive whole number" if name in ("ep", "etp") else "a positive whole number or -1"
            raise MeshConfigError(f"mesh: {name} must be {allowed} (got {size})")
    open_dims = [n for n in ORDER if sizes[n] == -1]
    if len(open_dims) > 1:
        raise MeshConfigError(f"mesh: only one dim may be -1 (got {', '.join(f'{n}=-1' for n in open_dims)})")
    if open_dims:
        name = open_dims[0]
        others = tuple(n for n in ORDER if n != name)
        known = math.prod(sizes[n] for n in others)
        if world_size % known:
            raise MeshConfigError(
                f"mesh: cannot infer {name}: WORLD_SIZE({world_size}) is not divisible by "
                f"{_factors(others, sizes)} = {known}"
            )
        sizes[name] = world_size // known
    if sizes["cp"] > 1 and sizes["sp"] > 1:
        raise MeshConfigError(f"mesh: cp and sp cannot both be > 1 (cp={sizes['cp']}, sp={sizes['sp']})")
    product = math.prod(sizes[n] for n in ORDER)
    if product != world_size:
        raise MeshConfigError(f"mesh: {_factors(ORDER, sizes)} = {product} != WORLD_SIZE({world_size})")
    if spec.etp is None:
        sizes["etp"] = sizes["tp"]
    dense = math.prod(sizes[n] for n in DENSE)
    expert = sizes["ep"] * sizes["etp"]
    if dense % expert:
        etp = f"etp({sizes['etp']}{', = tp by default' if spec.etp is None else ''})"
        raise MeshConfigError(
            f"mesh: ep({sizes['ep']}) * {etp} = {expert} must divide {_factors(DENSE, sizes)} = {dense} "
            "(the ranks of one pipeline stage and dp replica)"
        )
    return MeshLayout(world_size=world_size, **{n: sizes[n] for n in DIMS})


def locality_warnings(layout: MeshLayout, local_world_size: int) -> list[str]:
    """Layouts that work but send the busiest collectives across nodes."""
    out: list[str] = []
    if layout.world_size <= local_world_size:
        return out
    for label, size in (("tp", layout.tp), ("tp*cp*sp", layout.tp * layout.cp * layout.sp)):
        if size > 1 and (size > local_world_size or local_world_size % size):
            verb = "exceeds" if size > local_world_size else "does not divide"
            out.append(
                f"mesh: {label}={size} {verb} the {local_world_size} ranks per node; its collectives will cross nodes"
            )
            break
    return out


@dataclass(frozen=True)
class MeshLayout:
    """A resolved mesh: every size known, product == world_size."""

    world_size: int
    pp: int
    dp_replicate: int
    dp_shard: int
    cp: int
    sp: int
    tp: int
    ep: int
    etp: int = 1

    @property
    def active(self) -> tuple[str, ...]:
        """Dims > 1 in canonical order: the dims of the torch mesh."""
        return tuple(n for n in ORDER if getattr(self, n) > 1)

    def members(self, name: str) -> tuple[str, ...]:
        """The world factors a dim or view spans (canonical order)."""
        if name in ORDER:
            return (name,)
        if name in VIEWS:
            return VIEWS[name]
        if name == "world":
            return ORDER
        raise MeshConfigError(f"mesh: unknown dim or view {name!r}; valid: {', '.join(NAMES)}")

    def size(self, name: str) -> int:
        if name in ("ep", "etp"):
            return int(getattr(self, name))
        if name == "emp":
            return self.ep * self.etp
        if name == "efsdp":
            return self.dense // (self.ep * self.etp)
        return math.prod(getattr(self, n) for n in self.members(name))

    @property
    def dense(self) -> int:
        return math.prod(getattr(self, n) for n in DENSE)

    def coordinate(self, rank: int) -> dict[str, int]:
        """Rank -> coordinate on every world factor (row-major, tp fastest)."""
        coord: dict[str, int] = {}
        for name in reversed(ORDER):
            size = getattr(self, name)
            rank, coord[name] = divmod(rank, size)
        return {n: coord[n] for n in ORDER}

    def rank_of(self, coord: Mapping[str, int]) -> int:
        rank = 0
        for name in ORDER:
            rank = rank * getattr(self, name) + coord.get(name, 0)
        return rank

    def groups(self, name: str) -> list[list[int]]:
        """Every group of a dim or view, each in group-rank order, sorted by first rank."""
        if name in EXPERT_VIEWS:
            return self._expert_groups(name)
        span = set(self.members(name))
        by_key: dict[tuple[int, ...], list[int]] = {}
        for rank in range(self.world_size):
            coord = self.coordinate(rank)
            key = tuple(coord[n] for n in ORDER if n not in span)
            by_key.setdefault(key, []).append(rank)  # row-major walk keeps group-rank order
        return sorted(by_key.values())

    def expert_coordinate(self, rank: int) -> dict[str, int]:
        """Rank -> index on efsdp, ep, etp (row-major over the dense region, etp fastest) and emp."""
        efsdp, emp = divmod(rank % self.dense, self.ep * self.etp)
        ep, etp = divmod(emp, self.etp)
        return {"efsdp": efsdp, "ep": ep, "etp": etp, "emp": emp}

    def _expert_groups(self, name: str) -> list[list[int]]:
        span = {"emp": ("ep", "etp")}.get(name, (name,))
        by_key: dict[tuple[int, ...], list[int]] = {}
        for rank in range(self.world_size):
            coord = self.expert_coordinate(rank)
            key = (rank // self.dense, *(coord[n] for n in EXPERT_DIMS if n not in span))
            by_key.setdefault(key, []).append(rank)
        return sorted(by_key.values())

    def group_of(self, name: str, rank: int) -> list[int]:
        return next(g for g in self.groups(name) if rank in g)

    def local_rank(self, name: str, rank: int) -> int:
        """This rank's index inside its group of a dim or view (arithmetic, no group list)."""
        if name in EXPERT_VIEWS:
            return self.expert_coordinate(rank)[name]
        coord, index = self.coordinate(rank), 0
        for member in self.members(name):
            index = index * getattr(self, member) + coord[member]
        return index

    def view_sources(self) -> dict[str, tuple[str, ...]]:
        """Each view with members > 1 -> those members; a repeated member set is an alias, not a new mesh."""
        return {
            v: tuple(n for n in m if getattr(self, n) > 1)
            for v, m in VIEWS.items()
            if any(getattr(self, n) > 1 for n in m)
        }

    def built_views(self) -> tuple[str, ...]:
        """Views that need their own process groups: two or more members > 1, member set not seen before."""
        seen: set[tuple[str, ...]] = set()
        out = []
        for view, on in self.view_sources().items():
            if len(on) >= 2 and on not in seen:
                out.append(view)
            seen.add(on)
        return tuple(out)

    def new_group_count(self) -> int:
        """``new_group`` calls per rank to build the mesh and views (a world-wide dim reuses WORLD)."""
        sizes: list[int] = [getattr(self, n) for n in self.active]
        total = sum(self.world_size // size for size in sizes if size != self.world_size)
        total += sum(self.world_size // self.size(v) for v in self.built_views() if self.size(v) != self.world_size)
        if self.pp > 2:
            total += self.world_size // self.pp  # the embedding groups (first and last stage)
        expert = self.expert_dims()
        if self.ep == 1 and self.etp == self.tp:
            # No MoE reshape: etp is tp and efsdp the rest of the dense region (flattened unless a view has it).
            on = tuple(n for n in DENSE[:-1] if getattr(self, n) > 1)
            if len(on) > 1 and self.size("efsdp") != self.world_size and on not in self.view_sources().values():
                total += self.world_size // self.size("efsdp")
        elif expert:
            # The dense region is flattened (unless it is one dim or a view), then unflattened into the expert dims.
            on = tuple(n for n in DENSE if getattr(self, n) > 1)
            if len(on) > 1 and self.dense != self.world_size and on not in self.view_sources().values():
                total += self.world_size // self.dense
            if len(expert) > 1:
                total += sum(self.world_size // self.size(n) for n in expert)
                if len(expert) == 3:
                    total += self.world_size // self.size("emp")  # (ep, etp) flattened
        return total

    def expert_dims(self) -> tuple[str, ...]:
        """The expert dims > 1 (of efsdp, ep, etp): the shape the dense region is unflattened to."""
        return tuple(n for n in EXPERT_DIMS if self.size(n) > 1)

    def summary(self) -> str:
        dims = " ".join(f"{n}={getattr(self, n)}" for n in ORDER if getattr(self, n) > 1) or "world=1"
        views = " ".join(f"{v}={self.size(v)}" for v in self.built_views())
        shown = self.ep > 1 or self.etp != self.tp
        ep = f" ep={self.ep} etp={self.etp} efsdp={self.size('efsdp')}" if shown else ""
        return f"mesh {dims}{ep}" + (f" | {views}" if views else "")

    def spec(self) -> MeshSpec:
        return replace(MeshSpec(), **{n: getattr(self, n) for n in DIMS})
