"""The ``spyre`` process-group backend: gloo over the host, registered for the spyre device type."""

from __future__ import annotations

from datetime import timedelta

import torch.distributed as dist
from torch.distributed import ProcessGroupGloo, Store

NAME = "spyre_gloo"


def create(store: Store, rank: int, world_size: int, timeout: timedelta) -> ProcessGroupGloo:
    """The backend of a group's spyre tensors: a gloo process group on host staging tensors.

    PyTorch calls this for the ``spyre`` entry of a group's device map, e.g.
    ``init_process_group()`` (the accelerator's default) or
    ``init_process_group("cpu:gloo,spyre:spyre_gloo")``. The spyre kernels of the c10d ops
    (``kernels.py``) move each collective's real elements to the host and run it on this engine.
    """
    return ProcessGroupGloo(store, rank, world_size, timeout=timeout)


def register() -> None:
    """Register ``spyre_gloo`` as the spyre device's default backend, and gloo as serving spyre
    tensors (idempotent).

    The second makes ``init_process_group("gloo")`` register its gloo backend for spyre too, so
    the PyTorch code that asks a group for the backend of a tensor's device (``device_id=``,
    ``batch_isend_irecv``) finds one. Example::

        dist.init_process_group(rank=rank, world_size=2)   # spyre:spyre_gloo, picked by PyTorch
        dist.all_reduce(torch.ones(3, device="spyre"))
    """
    if NAME.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(NAME, create, devices=["spyre"])
    dist.Backend.default_device_backend_map["spyre"] = NAME
    gloo_devices = dist.Backend.backend_capability[dist.Backend.GLOO]
    if "spyre" not in gloo_devices:
        gloo_devices.append("spyre")
