"""The engine handed to user code: rank facts plus an initialised torch.distributed.

Built once per process on the first :func:`dslaunch.engine` call. Imports torch
only here, never at dslaunch import time.
"""

from __future__ import annotations

import atexit
import datetime
import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dslaunch.bootstrap import shutdown
from dslaunch.bootstrap.env import RankInfo, detect

if TYPE_CHECKING:
    import torch
    from torch.distributed import ProcessGroup
    from torch.distributed.device_mesh import DeviceMesh

    from dslaunch.bootstrap.comm import Comm
    from dslaunch.bootstrap.mesh_build import BuiltMesh
    from dslaunch.bootstrap.timers import Timers
    from dslaunch.logs._core import Logger
    from dslaunch.mesh import MeshLayout

_lock = threading.Lock()
_engine: Engine | None = None


class EngineClosedError(RuntimeError):
    pass


@dataclass
class Engine:
    """This rank's facts and its initialised torch.distributed, from :func:`dslaunch.engine`."""

    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    node_rank: int
    device: torch.device
    backend: str
    process_group: ProcessGroup | None  # WORLD; None once the engine is closed at exit
    info: RankInfo
    owns_process_group: bool
    built_mesh: BuiltMesh | None
    timers: Timers
    log: Logger
    _comm: Comm | None

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def comm(self) -> Comm:
        """Collectives addressed by mesh dim or view name: ``engine.comm.all_reduce(t, axis="dp")``."""
        if self._comm is None:
            raise EngineClosedError("the engine is closed: its process groups were destroyed at exit")
        return self._comm

    def _built(self) -> BuiltMesh:
        if self.built_mesh is None:
            raise EngineClosedError("the engine is closed: its process groups were destroyed at exit")
        return self.built_mesh

    @property
    def mesh(self) -> DeviceMesh | None:
        """The torch DeviceMesh over the dims larger than 1 (canonical order)."""
        root: DeviceMesh | None = self._built().root
        return root

    @property
    def mesh_layout(self) -> MeshLayout:
        return self._built().layout

    def size(self, name: str) -> int:
        """Size of a dim or view (``tp``, ``dp``, ``dp_cp``, ``mp``...); 1 when absent."""
        return int(self._built().size(name))

    def group(self, name: str) -> ProcessGroup:
        """Process group of a dim or view."""
        group: ProcessGroup = self._built().group(name)
        return group

    def submesh(self, name: str) -> DeviceMesh | None:
        """1-D DeviceMesh of a dim or view (for DTensor, TP, FSDP2); None when its size is 1."""
        return self._built().submesh(name)

    @property
    def coordinate(self) -> dict[str, int]:
        """This rank's index along every dim and view."""
        return dict(self._built().coordinate())

    def should_stop(self) -> bool:
        """``dslaunch.should_stop()``: True on every rank at the same call once a stop was requested."""
        from dslaunch.bootstrap.stop_step import should_stop

        return should_stop()

    def close(self) -> None:
        """Destroy the process groups this engine made and drop its references to them."""
        shutdown.shutdown_distributed(current(), release, destroy_adopted=False)


def _pg_timeout() -> datetime.timedelta:
    seconds = float(os.environ.get("DSLAUNCH_PG_TIMEOUT", "600"))
    return datetime.timedelta(seconds=seconds)


def build_engine(mesh: Any = None) -> Engine:
    import torch
    import torch.distributed as dist

    info = detect()
    cuda = torch.cuda.is_available()
    if cuda:
        device = torch.device("cuda", info.local_rank % max(torch.cuda.device_count(), 1))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")

    owns = False
    if not dist.is_initialized():
        backend = "cuda:nccl,cpu:gloo" if cuda else "gloo"
        if info.world_size == 1 and (info.master_addr is None or info.master_port is None):  # no rendezvous to meet
            store = dist.HashStore()  # type: ignore[attr-defined]  # torch does not re-export it
            dist.init_process_group(backend, store=store, rank=0, world_size=1)
        else:
            os.environ.setdefault("MASTER_ADDR", info.master_addr or "127.0.0.1")
            if info.master_port is not None:
                os.environ.setdefault("MASTER_PORT", str(info.master_port))
            kwargs: dict[str, Any] = {}
            if cuda:
                kwargs["device_id"] = device
            dist.init_process_group(
                backend, rank=info.rank, world_size=info.world_size, timeout=_pg_timeout(), **kwargs
            )
        owns = True
    from dslaunch.bootstrap import progress
    from dslaunch.bootstrap.comm import Comm
    from dslaunch.bootstrap.mesh_build import bootstrap
    from dslaunch.bootstrap.timers import Timers
    from dslaunch.logs import get_logger, phases

    phases.mark("pg_ready")
    built = bootstrap(mesh, info.local_world_size, "cuda" if cuda else "cpu")
    phases.mark("mesh_ready")
    progress.engine_ready(str(dist.get_backend()))  # start-up done (--hang-timeout); flight recorder on request
    return Engine(
        built_mesh=built,
        _comm=Comm(built),
        timers=Timers(),
        log=get_logger("user"),
        rank=dist.get_rank(),
        local_rank=info.local_rank,
        world_size=dist.get_world_size(),
        local_world_size=info.local_world_size,
        node_rank=info.node_rank,
        device=device,
        backend=str(dist.get_backend()),
        process_group=dist.group.WORLD,
        info=info,
        owns_process_group=owns,
    )


def current() -> Engine | None:
    """The engine if this process built one, without building it."""
    return _engine


def release() -> None:
    """Forget the engine and its group references (at exit), so destroyed groups can be freed."""
    global _engine
    with _lock:
        if _engine is not None:
            _engine.process_group = None
            _engine.built_mesh = None
            _engine._comm = None
        _engine = None


def _close_at_exit() -> None:
    if not shutdown.ended_at_exit():  # under dslaunch the bootstrap's last atexit handler does it (teardown.py)
        shutdown.shutdown_distributed(current(), release, destroy_adopted=False)


def engine(mesh: Any = None) -> Engine:
    """The process-wide engine, built on first use; ``mesh`` overrides --mesh/DSLAUNCH_MESH/config."""
    global _engine
    with _lock:
        if _engine is None:
            _engine = build_engine(mesh=mesh)
            atexit.register(_close_at_exit)
        elif mesh is not None:
            from dslaunch.mesh import MeshConfigError, as_spec

            if as_spec(mesh).text() != _engine._built().requested:
                raise MeshConfigError(
                    f"the engine already exists with {_engine.mesh_layout.summary()}; "
                    f"it cannot be rebuilt with mesh={mesh!r}"
                )
        return _engine
