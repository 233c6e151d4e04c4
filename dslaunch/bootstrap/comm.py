"""Collectives over a mesh axis (dim or view), as thin calls to torch.distributed c10d ops.

``engine.comm.all_reduce(t, axis="dp")`` picks the process group of ``dp`` and calls the
c10d op; nothing here implements a collective. Each call is reported to the ``comm``
logger at debug level (op, axis, group size, dtype, bytes, seconds). Timings are host
wall time: on CUDA they measure the launch unless the op synchronises.

The axis keyword is ``axis=``; ``dim=`` is its deprecated alias (docs/mesh.md, "Axis keyword").
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from dslaunch import logs
from dslaunch.mesh import axis_alias

_OPS = ("sum", "avg", "product", "min", "max")


def _c10d(name: str, old: str) -> Callable[..., Any]:
    import torch.distributed as dist

    # torch 2.13 renamed the *_tensor collectives to *_single; older torch has only the old names.
    return getattr(dist, name, None) or getattr(dist, old)  # type: ignore[no-any-return]


def _reduce_op(op: str) -> Any:
    import torch.distributed as dist

    if op not in _OPS:
        raise ValueError(f"unknown reduce op {op!r}; valid: {', '.join(_OPS)}")
    return getattr(dist.ReduceOp, op.upper())


def _axis(axis: str | None, dim: str | None, call: str) -> str:
    """``axis=`` or the deprecated ``dim=`` (warned once per process, at the user's call); default ``world``."""
    found = axis_alias(axis, dim, api="engine.comm", call=f"engine.comm.{call}", stacklevel=4)
    return "world" if found is None else found


class Comm:
    """Collectives addressed by mesh axis: a dim or view name (``tp``, ``dp``, ``dp_cp``, ``world``...).

    Every method takes ``axis`` (default ``"world"``) and the deprecated keyword alias ``dim``.
    """

    def __init__(self, mesh: Any) -> None:
        self._mesh = mesh  # dslaunch.bootstrap.mesh_build.BuiltMesh
        self._record = logs.comm_record
        self._enabled = logs.comm_enabled

    def _report(self, op: str, axis: str, tensor: Any, start: float) -> None:
        seconds = time.perf_counter() - start
        if not self._enabled():
            return
        nbytes = tensor.numel() * tensor.element_size() if tensor is not None else 0
        dtype = str(tensor.dtype).removeprefix("torch.") if tensor is not None else "-"
        size = self._mesh.size(axis)
        self._record(op=op, axis=axis, group_size=size, dtype=dtype, nbytes=nbytes, duration_s=seconds)

    def all_reduce(self, tensor: Any, axis: str | None = None, op: str = "sum", *, dim: str | None = None) -> Any:
        """Reduce ``tensor`` in place over ``axis``; returns it."""
        axis = _axis(axis, dim, "all_reduce")
        import torch.distributed as dist

        start = time.perf_counter()
        red = _reduce_op(op)
        if op == "avg" and dist.get_backend(self._mesh.group(axis)) == "gloo":
            # gloo has no AVG: sum, then divide by the group size.
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=self._mesh.group(axis))
            tensor.div_(self._mesh.size(axis))
        else:
            dist.all_reduce(tensor, op=red, group=self._mesh.group(axis))
        self._report("all_reduce", axis, tensor, start)
        return tensor

    def all_gather(self, tensor: Any, axis: str | None = None, *, dim: str | None = None) -> Any:
        """Concatenate every group member's ``tensor`` along tensor dim 0, in group-rank order."""
        axis = _axis(axis, dim, "all_gather")
        import torch

        start = time.perf_counter()
        size = self._mesh.size(axis)
        out = torch.empty(
            (size * tensor.shape[0], *tensor.shape[1:]) if tensor.dim() else (size,),
            dtype=tensor.dtype,
            device=tensor.device,
        )
        _c10d("all_gather_single", "all_gather_into_tensor")(out, tensor.contiguous(), group=self._mesh.group(axis))
        self._report("all_gather", axis, tensor, start)
        return out

    def reduce_scatter(self, tensor: Any, axis: str | None = None, op: str = "sum", *, dim: str | None = None) -> Any:
        """Reduce over ``axis`` and keep this rank's chunk of tensor dim 0 (which must divide evenly)."""
        axis = _axis(axis, dim, "reduce_scatter")
        import torch

        start = time.perf_counter()
        size = self._mesh.size(axis)
        if tensor.shape[0] % size:
            raise ValueError(f"reduce_scatter over {axis}: tensor dim 0 ({tensor.shape[0]}) is not divisible by {size}")
        out = torch.empty((tensor.shape[0] // size, *tensor.shape[1:]), dtype=tensor.dtype, device=tensor.device)
        _c10d("reduce_scatter_single", "reduce_scatter_tensor")(
            out, tensor.contiguous(), op=_reduce_op(op), group=self._mesh.group(axis)
        )
        self._report("reduce_scatter", axis, tensor, start)
        return out

    def broadcast(self, tensor: Any, axis: str | None = None, src: int = 0, *, dim: str | None = None) -> Any:
        """Copy the tensor of group rank ``src`` (index inside the group) to every member, in place."""
        axis = _axis(axis, dim, "broadcast")
        import torch.distributed as dist

        start = time.perf_counter()
        members = self._mesh.ranks(axis)
        if not 0 <= src < len(members):
            raise ValueError(f"broadcast over {axis}: src={src} is not a rank inside the group (0..{len(members) - 1})")
        # src is a group rank; c10d's global src works on every torch version (group_src only from 2.6).
        dist.broadcast(tensor, src=members[src], group=self._mesh.group(axis))
        self._report("broadcast", axis, tensor, start)
        return tensor

    def all_to_all(self, tensor: Any, axis: str | None = None, *, dim: str | None = None) -> Any:
        """Split tensor dim 0 into equal chunks, send chunk i to group rank i, return what arrives."""
        axis = _axis(axis, dim, "all_to_all")
        import torch
        import torch.distributed as dist

        start = time.perf_counter()
        size = self._mesh.size(axis)
        if tensor.shape[0] % size:
            raise ValueError(f"all_to_all over {axis}: tensor dim 0 ({tensor.shape[0]}) is not divisible by {size}")
        out = torch.empty_like(tensor)
        dist.all_to_all_single(out, tensor.contiguous(), group=self._mesh.group(axis))
        self._report("all_to_all", axis, tensor, start)
        return out

    def barrier(self, axis: str | None = None, *, dim: str | None = None) -> None:
        axis = _axis(axis, dim, "barrier")
        import torch.distributed as dist

        start = time.perf_counter()
        dist.barrier(group=self._mesh.group(axis))
        self._report("barrier", axis, None, start)
